"""Tuple reducers as TVM's tutorial writes them, and numpy references that break ties alike.

TVM's argmax ``fcombine`` keeps the running pair when its value is ``>=`` the other's,
so on ties the pair reduced *first* wins: the answer depends on the order in which the
schedule combines elements. The references apply the same rule in the schedule's
order: ``fold_reference`` serially along an order of the reduction index (plain loops:
index order); ``lanes_reference`` for a reduction split by ``f`` whose inner part runs
on threads or is factored out by ``rfactor``: each ``k % f`` lane folds in index order,
then the lanes combine serially, or across threads as ``lower_thread_allreduce`` does
(halving trees per warp and over warps, ties keeping the lower slot).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ember import te
from ember.tir import expr as E


def _argmax_combine(x, y):
    lhs = te.select(x[1] >= y[1], x[0], y[0])
    rhs = te.select(x[1] >= y[1], x[1], y[1])
    return lhs, rhs


def _argmax_identity(t0, t1):
    return E.const(-1, t0), te.min_value(t1)


def _argmin_combine(x, y):
    lhs = te.select(x[1] <= y[1], x[0], y[0])
    rhs = te.select(x[1] <= y[1], x[1], y[1])
    return lhs, rhs


def _argmin_identity(t0, t1):
    return E.const(-1, t0), te.max_value(t1)


argmax = te.comm_reducer(_argmax_combine, _argmax_identity, name="argmax")
argmin = te.comm_reducer(_argmin_combine, _argmin_identity, name="argmin")


def serial_order(n: int) -> list[int]:
    return list(range(n))


def lane_order(n: int, factor: int) -> list[int]:
    """Each lane ``k % factor`` in index order, lanes lowest first (a reordered split, or
    ``rfactor`` followed by a serial reduction over the lanes)."""
    return sorted(range(n), key=lambda k: (k % factor, k // factor))


Pair = tuple[int, float]


def _keep(kind: str) -> Callable[[float, float], bool]:
    return (lambda a, b: a >= b) if kind == "argmax" else (lambda a, b: a <= b)


def _combine(a: Pair, b: Pair, kind: str) -> Pair:
    """TVM's fcombine: keep ``a`` unless ``b``'s value is strictly better."""
    return a if _keep(kind)(a[1], b[1]) else b


def _identity(kind: str) -> Pair:
    return (-1, -np.inf if kind == "argmax" else np.inf)


def _fold(pairs: Sequence[Pair], kind: str) -> Pair:
    acc = _identity(kind)
    for p in pairs:
        acc = _combine(acc, p, kind)
    return acc


def _halving_tree(pairs: list[Pair], kind: str) -> Pair:
    """Slot ``r`` takes ``combine(slot r, slot r + half)`` for halves down to 1, over a
    power-of-two row padded with the identity: the shared-memory tree, and what lane 0
    of the xor butterfly computes."""
    width = 1 << max(len(pairs) - 1, 0).bit_length()
    slots = list(pairs) + [_identity(kind)] * (width - len(pairs))
    while width > 1:
        width //= 2
        slots = [_combine(slots[r], slots[r + width], kind) for r in range(width)]
    return slots[0]


def across_threads(pairs: list[Pair], kind: str) -> Pair:
    """How ``lower_thread_allreduce`` combines one value per thread: groups of whole warps
    reduce each warp by the butterfly, then the warps' partials the same way; other
    groups use one tree over all threads."""
    n = len(pairs)
    if n > 32 and n % 32 == 0:
        warps = [_halving_tree(pairs[w : w + 32], kind) for w in range(0, n, 32)]
        return _halving_tree(warps, kind)
    return _halving_tree(pairs, kind)


def fold_reference(
    idx: np.ndarray, val: np.ndarray, order: Sequence[int], kind: str = "argmax"
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``(idx, val)`` reduced by TVM's fcombine, serially along ``order``."""
    return _rows(idx, val, lambda i, v: _fold([(i[k], v[k]) for k in order], kind))


def lanes_reference(
    idx: np.ndarray, val: np.ndarray, factor: int, kind: str = "argmax", threads: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Each lane ``k % factor`` folded in index order, then the lanes combined across
    threads (``threads=True``: a reduction bound to threadIdx) or serially in lane order."""
    n = idx.shape[-1]

    def row(i: np.ndarray, v: np.ndarray) -> Pair:
        lanes = [
            _fold([(i[k], v[k]) for k in range(lane, n, factor)], kind) for lane in range(factor)
        ]
        return across_threads(lanes, kind) if threads else _fold(lanes, kind)

    return _rows(idx, val, row)


def _rows(idx: np.ndarray, val: np.ndarray, f: Callable[..., Pair]) -> tuple[np.ndarray, ...]:
    out_i = np.empty(idx.shape[:-1], idx.dtype)
    out_v = np.empty(val.shape[:-1], val.dtype)
    for row in np.ndindex(*idx.shape[:-1]):
        out_i[row], out_v[row] = f(idx[row], val[row])
    return out_i, out_v


def tie_heavy(shape: Sequence[int], rng: np.random.Generator, dtype: str = "float32") -> np.ndarray:
    """Random values from a handful of levels, so that most rows have tied maxima."""
    return rng.integers(-3, 4, size=tuple(shape)).astype(dtype)


def inputs_for_argmax(m: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ids (so the winner is visible) and tie-heavy values."""
    idx = rng.permutation(m * n).reshape(m, n).astype("int32") + 100
    return idx, tie_heavy((m, n), rng)
