"""The computes of 3x3 stride-1 convolution by Winograd F(m x m, 3 x 3) (Lavin & Gray, 2015).

Pure tensor expressions, no schedule: ``codegen_llvm/schedules/winograd.py`` (the
``conv2d_winograd.llvm`` template and the CPU strategy) schedules them; its module docstring
explains the layouts. The stages, by name and tag (the schedule finds them by these):
``X_pad`` (tag ``pad``), the zero-padded input; ``V`` (``winograd_input``), the transformed
input tiles; ``U`` (``winograd_weights``), the weights transformed into the GEMM's packed
panels; ``M`` (``winograd_gemm``), the batched GEMM over channels, its knobs in the op's
attrs; ``conv`` (``conv2d_winograd``), the NCHW output transform. The channel-blocked variants
(:func:`winograd_conv2d_nchwc`, for a graph's ``conv_nchwc`` nodes) read ``[N, C/cb, H, W,
cb]`` inputs and blocked weights and write ``[N, O/ob, OH, OW, ob]``, with the same stage
names and tags.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction as F
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor

__all__ = [
    "MATRICES",
    "Matrix",
    "WinogradShape",
    "winograd_conv2d",
    "winograd_conv2d_nchwc",
    "winograd_input",
    "winograd_input_nchwc",
    "winograd_weights",
    "winograd_weights_numpy",
]

Matrix = Sequence[Sequence[F | int]]

# (B^T, G, A^T) of F(2x2, 3x3) and F(4x4, 3x3) (Lavin & Gray, "Fast Algorithms for
# Convolutional Neural Networks", 2015, with the interpolation points 0, +-1, +-2)
_H, _S, _T, _X = F(1, 2), F(1, 6), F(1, 12), F(1, 24)
MATRICES: dict[int, tuple[Matrix, Matrix, Matrix]] = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [_H, _H, _H], [_H, -_H, _H], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ],
        [
            [F(1, 4), 0, 0],
            [-_S, -_S, -_S],
            [-_S, _S, -_S],
            [_X, _T, _S],
            [_X, -_T, _S],
            [0, 0, 1],
        ],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}


def _lin(coeffs: Sequence[Any], terms: Sequence[Any], dtype: str) -> Any:
    """``sum_k coeffs[k] * terms[k]`` over the nonzero coefficients, without multiplying
    by +-1 (the transforms are mostly additions)."""
    acc = None
    for c, term in zip(coeffs, terms):
        if c == 0:
            continue
        if abs(c) != 1:
            term, c = E.const(float(abs(c)), dtype) * term, (1 if c > 0 else -1)
        if acc is None:
            acc = term if c > 0 else E.const(0.0, dtype) - term
        else:
            acc = acc + term if c > 0 else acc - term
    return acc


def _pick(index: Any, values: Sequence[Any]) -> Any:
    """``values[index]`` for a loop variable ``index``: a select chain that folds to one
    value once the loop is unrolled."""
    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = E.select(index == k, values[k], out)
    return out


def _sandwich(mat: Matrix, e1: Any, e2: Any, tap: Any, width: int, dtype: str) -> Any:
    """``(mat @ D @ mat^T)[e1, e2]`` with ``D[i][j] = tap(i, j)``: the inner row sums do
    not depend on ``e1``, so once both loops are unrolled they are computed once."""

    taps = [[tap(i, j) for j in range(width)] for i in range(width)]
    rows = [_pick(e2, [_lin(r, taps[i], dtype) for r in mat]) for i in range(width)]
    return _pick(e1, [_lin(r, rows, dtype) for r in mat])


class WinogradShape:
    """Sizes of a 3x3 stride-1 convolution and of its ``m x m`` output tiles."""

    def __init__(self, N: int, C: int, H: int, W: int, O: int, padding: Any, m: int) -> None:
        pads = (padding,) * 4 if isinstance(padding, int) else tuple(padding)
        if len(pads) == 2:
            pads = (pads[0], pads[1], pads[0], pads[1])
        if len(pads) != 4 or any(not isinstance(p, int) or p < 0 for p in pads):
            raise ArgumentError(
                "conv2d_winograd.llvm: padding must be an int, (top/bottom, left/right) or "
                f"(top, left, bottom, right) of non-negative ints, got {padding!r}"
            )
        if m not in MATRICES:
            raise ArgumentError(f"conv2d_winograd.llvm: tile size must be 2 or 4, got {m!r}")
        self.N, self.C, self.H, self.W, self.O, self.m = N, C, H, W, O, m
        self.pt, self.pl, pb, pr = pads
        self.OH, self.OW = H + self.pt + pb - 2, W + self.pl + pr - 2
        if self.OH <= 0 or self.OW <= 0:
            raise ArgumentError(
                f"conv2d_winograd.llvm: a 3x3 kernel does not fit the padded {H}x{W} input; "
                f"the output would be {self.OH}x{self.OW}"
            )
        self.a = m + 2
        self.TH, self.TW = -(-self.OH // m), -(-self.OW // m)
        self.T = N * self.TH * self.TW

    def tile(self, t: Any) -> tuple[Any, Any, Any]:
        """``(n, ty, tx)`` of flat tile index ``t``."""
        return t // (self.TH * self.TW), (t // self.TW) % self.TH, t % self.TW


def _padded(X: Tensor, g: WinogradShape) -> Tensor:
    """``X_pad``: ``X`` (NCHW, or blocked NCHW[c] with its lanes last) zero-padded to whole
    ``m x m`` tiles plus the 2-pixel halo, a stage of its own (tag ``pad``)."""
    shape = [int(d.value) for d in X.shape]  # type: ignore[attr-defined]
    rows, cols = g.TH * g.m + 2, g.TW * g.m + 2

    def pad(*p: E.PrimExpr) -> E.PrimExpr:  # (n, c, h, w) and the lane where blocked
        n, c, h, w, *lane = p
        y, x = h - g.pt, w - g.pl
        inside = E.logical_and(E.logical_and(y >= 0, y < g.H), E.logical_and(x >= 0, x < g.W))
        yy, xx = E.max_(E.min_(y, g.H - 1), 0), E.max_(E.min_(x, g.W - 1), 0)
        return E.select(inside, X[(n, c, yy, xx, *lane)], E.const(0, X.dtype))

    return te.compute((*shape[:2], rows, cols, *shape[4:]), pad, name="X_pad", tag="pad")


def winograd_input(X: Tensor, g: WinogradShape) -> Tensor:
    """``V[e1, e2, c, t]``: the transformed input tiles (via the zero-padded copy)."""
    dtype = X.dtype
    Xp = _padded(X, g)
    BT = MATRICES[g.m][0]

    def transform(e1, e2, c, t):  # noqa: ANN001, ANN202
        n, ty, tx = g.tile(t)
        return _sandwich(BT, e1, e2, lambda i, j: Xp[n, c, ty * g.m + i, tx * g.m + j], g.a, dtype)

    return te.compute((g.a, g.a, g.C, g.T), transform, name="V", tag="winograd_input")


def winograd_weights(Wt: Tensor, m: int, nr: int) -> Tensor:
    """``U[e1, e2, ob, c, z] = (G Wt[o, c] G^T)[e1, e2]`` for ``o = ob * nr + z`` (zero
    past the last channel): the weights transformed into the GEMM's packed panels."""
    O, C = (int(d.value) for d in Wt.shape[:2])  # type: ignore[attr-defined]
    G = MATRICES[m][1]
    a = m + 2

    def f(e1, e2, ob, c, z):  # noqa: ANN001, ANN202
        o = ob * nr + z
        safe = E.min_(o, O - 1)
        value = _sandwich(G, e1, e2, lambda i, j: Wt[safe, c, i, j], 3, Wt.dtype)
        return E.select(o < O, value, E.const(0, Wt.dtype))

    return te.compute((a, a, -(-O // nr), C, nr), f, name="U", tag="winograd_weights")


def winograd_weights_numpy(wb: np.ndarray, m: int, nr: int) -> np.ndarray:
    """:func:`winograd_weights` of weights blocked as ``[O/ob, C/cb, 3, 3, cb, ob]`` (zero
    past the real channels), in numpy, over all ``O/ob * ob`` outputs and ``C/cb * cb``
    inputs: a graph's constant weights transformed once, at compile time (in float64,
    then cast), so the kernel reads ``U`` (``[a, a, ceil(O/nr), C, nr]``) as an input."""
    OB, CB, kh, kw, cb, ob = wb.shape
    if (kh, kw) != (3, 3):
        raise ArgumentError(f"winograd weights: a 3x3 kernel is needed, got {kh}x{kw}")
    a, O, C = m + 2, OB * ob, CB * cb
    G = np.array(MATRICES[m][1], dtype=np.float64)
    # (G w G^T)[i, j] = sum over k, l of G[i, k] w[k, l] G[j, l]: one GEMM by kron(G, G)
    # over every (o, c) at once (an einsum of the three took 2.5x as long: 0.1 s for 512^2)
    w = wb.transpose(2, 3, 0, 5, 1, 4).reshape(9, O * C).astype(np.float64)
    full = (np.kron(G, G) @ w).reshape(a, a, O, C)
    panels = -(-O // nr)
    padded = np.zeros((a, a, panels * nr, C), np.float64)
    padded[:, :, :O] = full
    U = padded.reshape(a, a, panels, nr, C).transpose(0, 1, 2, 4, 3)
    return np.ascontiguousarray(U.astype(wb.dtype))


def winograd_conv2d(
    X: Tensor, U: Tensor, bias: Tensor | None, g: WinogradShape, knobs: dict[str, int]
) -> Tensor:
    """The convolution from the transformed weights ``U`` on: the batched GEMM ``M``
    (tagged ``winograd_gemm``, ``knobs`` in the op's attrs for its schedule; ``knobs["nr"]``
    is the panel width ``U`` is packed in) and the output transform ``conv``, NCHW (plus
    ``bias[o]`` when given)."""
    V = winograd_input(X, g)
    dtype, nr = X.dtype, knobs["nr"]
    c = te.reduce_axis((0, g.C), name="c")

    def gemm(e1, e2, t, o):  # noqa: ANN001, ANN202
        return te.sum(V[e1, e2, c.var, t] * U[e1, e2, o // nr, c.var, o % nr], axis=c)

    M = te.compute((g.a, g.a, g.T, g.O), gemm, name="M", tag="winograd_gemm", attrs=knobs)
    AT = MATRICES[g.m][2]

    def output(n, o, y, x):  # noqa: ANN001, ANN202
        t = (n * g.TH + y // g.m) * g.TW + x // g.m
        tap = lambda i, j: M[i, j, t, o]  # noqa: E731
        value = _sandwich(AT, y % g.m, x % g.m, tap, g.a, dtype)
        return value + bias[o] if bias is not None else value

    return te.compute((g.N, g.O, g.OH, g.OW), output, name="conv", tag="conv2d_winograd")


def winograd_input_nchwc(X: Tensor, g: WinogradShape) -> Tensor:
    """``V[e1, e2, t, c]``: the transformed input tiles of a blocked ``X`` (``[N, C/cb, H,
    W, cb]``), over every blocked channel (lanes past the real ones are read and meet zero
    weights), tiles as the GEMM's rows so each step broadcasts from one row."""
    CB, cb = (int(X.shape[i].value) for i in (1, 4))  # type: ignore[attr-defined]
    dtype = X.dtype
    Xp = _padded(X, g)
    BT = MATRICES[g.m][0]

    def transform(e1, e2, t, c):  # noqa: ANN001, ANN202
        n, ty, tx = g.tile(t)

        def tap(i: int, j: int) -> Any:
            return Xp[n, c // cb, ty * g.m + i, tx * g.m + j, c % cb]

        return _sandwich(BT, e1, e2, tap, g.a, dtype)

    return te.compute((g.a, g.a, g.T, CB * cb), transform, name="V", tag="winograd_input")


def winograd_conv2d_nchwc(
    X: Tensor, U: Tensor, bias: Tensor | None, g: WinogradShape, ob: int, knobs: dict[str, int]
) -> Tensor:
    """:func:`winograd_conv2d` on a blocked ``X``, writing ``[N, O/ob, OH, OW, ob]`` (plus
    ``bias[o // ob, o % ob]``, a blocked bias, when given); ``U`` covers ``O/ob * ob``
    outputs (:func:`winograd_weights_numpy`), so the lanes past ``O`` come out as the
    bias's (zero) padding."""
    V = winograd_input_nchwc(X, g)
    dtype, nr = X.dtype, knobs["nr"]
    OB = -(-g.O // ob)
    c = te.reduce_axis((0, int(V.shape[3].value)), name="c")  # type: ignore[attr-defined]

    def gemm(e1, e2, t, o):  # noqa: ANN001, ANN202
        return te.sum(V[e1, e2, t, c.var] * U[e1, e2, o // nr, c.var, o % nr], axis=c)

    M = te.compute((g.a, g.a, g.T, OB * ob), gemm, name="M", tag="winograd_gemm", attrs=knobs)
    AT = MATRICES[g.m][2]

    def output(n, ok, y, x, oi):  # noqa: ANN001, ANN202
        t = (n * g.TH + y // g.m) * g.TW + x // g.m
        tap = lambda i, j: M[i, j, t, ok * ob + oi]  # noqa: E731
        value = _sandwich(AT, y % g.m, x % g.m, tap, g.a, dtype)
        return value + bias[ok, oi] if bias is not None else value

    shape = (g.N, OB, g.OH, g.OW, ob)
    return te.compute(shape, output, name="conv", tag="conv2d_winograd_nchwc")
