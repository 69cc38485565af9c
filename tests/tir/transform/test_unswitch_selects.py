"""``unswitch_selects`` on real kernels: concatenations and a ShuffleNet channel shuffle
under the generic CPU schedule, built and run on random data against numpy, with the
lowered IR checked for the hoisted ``if`` (the Before/Expected test is in
``test_passes_expected.py``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules.generic import schedule_generic
from ember.tir import stmt as S
from ember.tir import topi
from ember.tir.functor import post_order_visit
from ember.tir.te import placeholder
from ember.tir.topi.indexing import strided_slice
from ember.transform import PassContext


def _ifs(func: S.PrimFunc) -> int:
    found: list[S.IfThenElse] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, S.IfThenElse) else None)
    return len(found)


@settings(max_examples=12, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    rest=st.tuples(st.integers(1, 5), st.integers(1, 37)),
    axis=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_a_concat_matches_numpy(sizes: list[int], rest: tuple[int, int], axis: int, seed: int):
    """Any number of inputs, any axis, odd sizes: the kernel equals ``np.concatenate``."""
    rng = np.random.default_rng(seed)
    shapes = []
    for n in sizes:
        shape = [rest[0], 3, rest[1]]
        shape[axis] = n
        shapes.append(tuple(shape))
    xs = [placeholder(s, "float32", name=f"x{k}") for k, s in enumerate(shapes)]
    out = topi.concatenate(xs, axis)
    f = ember.build(schedule_generic([out]), [*xs, out], target="llvm")
    data = [rng.standard_normal(s).astype("float32") for s in shapes]
    want = np.concatenate(data, axis)
    got = np.full(want.shape, np.nan, "float32")
    f(*data, got)
    np.testing.assert_array_equal(got, want)


def _shuffle(half: int, h: int, w: int) -> tuple[list, object]:
    """ShuffleNet v2's unit end: its kept half (NCHW) beside its branch's output (16
    channels a block) back to NCHW, concatenated and shuffled in two groups."""
    kept = placeholder((1, 2 * half, h, w), "float32", name="kept")
    branch = placeholder((1, -(-half // 16), h, w, 16), "float32", name="branch")
    a = strided_slice(kept, [0, 0, 0, 0], [1, 1, 1, 1], [1, half, h, w])
    b = topi.layout_transform(branch, 16, 0, half)
    cat = topi.concatenate([a, b], 1)
    grouped = topi.reshape(cat, (1, 2, half, h, w))
    out = topi.reshape(topi.transpose(grouped, (0, 2, 1, 3, 4)), (1, 2 * half, h, w))
    return [kept, branch], out


def test_a_channel_shuffle_reads_each_source_in_its_own_branch() -> None:
    """29 channels a half (not a whole block), 7x9 pixels: one ``if`` per output channel
    picks the source, the result equals numpy's, and without the pass the same kernel
    has no ``if`` (and still equals it)."""
    half, h, w = 29, 7, 9
    ins, out = _shuffle(half, h, w)
    rng = np.random.default_rng(3)
    kept = rng.standard_normal((1, 2 * half, h, w)).astype("float32")
    branch = rng.standard_normal((1, 2, h, w, 16)).astype("float32")
    plain = branch.transpose(0, 1, 4, 2, 3).reshape(1, 32, h, w)[:, :half]
    both = np.concatenate([kept[:, :half], plain], 1)
    want = both.reshape(1, 2, half, h, w).transpose(0, 2, 1, 3, 4).reshape(1, 2 * half, h, w)
    for disabled, ifs in (((), 1), (("unswitch_selects",), 0)):
        with PassContext(disabled_pass=disabled):
            func = ember.lower(schedule_generic([out]), [*ins, out])
            f = ember.build(schedule_generic([out]), [*ins, out], target="llvm")
        assert _ifs(func) == ifs
        got = np.full(want.shape, np.nan, "float32")
        f(kept, branch, got)
        np.testing.assert_array_equal(got, want)
