"""``unswitch_selects`` on real kernels: concatenations and a ShuffleNet channel shuffle
under the generic CPU schedule, built and run on random data against numpy, with the
lowered IR checked for the hoisted ``if``; and random loop nests run before and after the
pass by the test executor (the Before/Expected test is in ``test_passes_expected.py``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules.generic import schedule_generic
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir import topi
from ember.tir.buffer import decl_buffer
from ember.tir.functor import post_order_visit
from ember.tir.te import placeholder
from ember.tir.topi.indexing import strided_slice
from ember.tir.transform.unswitch_selects import unswitch_selects
from ember.transform import PassContext
from tests.nightly import examples
from tests.tir.transform.tir_exec import run


def _ifs(func: S.PrimFunc) -> int:
    found: list[S.IfThenElse] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, S.IfThenElse) else None)
    return len(found)


@settings(max_examples=examples(12), deadline=None)
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


_CMP = [E.CompareOp.LT, E.CompareOp.GE, E.CompareOp.EQ]


@settings(max_examples=examples(60), deadline=None)
@given(
    extents=st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 4)),
    kinds=st.tuples(
        st.sampled_from([S.ForKind.SERIAL, S.ForKind.PARALLEL]),
        st.sampled_from([S.ForKind.SERIAL, S.ForKind.UNROLLED, S.ForKind.VECTORIZED]),
    ),
    conds=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 2), st.integers(-1, 5)),
        min_size=1,
        max_size=4,
    ),
)
def test_random_nests_keep_their_stores(extents, kinds, conds) -> None:
    """Random three-deep loop nests whose stores pick among loads by nested selects on
    comparisons of a loop variable, or the sum of two, with constants: the pass keeps
    every store, its value and its order (run by the test executor)."""
    ni, nj, nk = extents
    A = decl_buffer((8, 8, 8), "float32", name="A")
    B = decl_buffer((8, 8, 8), "float32", name="B")
    C = decl_buffer((ni, nj, nk), "float32", name="C")
    i, j, k = E.Var("i", "int32"), E.Var("j", "int32"), E.Var("k", "int32")
    loops = (i, j, k)
    value: E.PrimExpr = A[i, j, k]
    for n, (which, plus, op, const) in enumerate(conds):
        lhs = loops[which] if plus == 3 else loops[which] + loops[plus]
        cond = E.Compare("bool", _CMP[op], lhs, E.const(const, "int32"))
        other = (B if n % 2 else A)[k, i, j]
        value = E.select(cond, other + float(n), value)
    body = S.BufferStore(C, value, (i, j, k))
    nest = S.For(
        i,
        E.const(0),
        E.const(ni),
        kinds[0],
        S.For(
            j,
            E.const(0),
            E.const(nj),
            kinds[1],
            S.For(k, E.const(0), E.const(nk), S.ForKind.SERIAL, body),
        ),
    )
    func = S.PrimFunc("f", (A, B, C), nest)
    rng = np.random.default_rng(ni * 100 + nj * 10 + nk)
    data = {A: rng.standard_normal((8, 8, 8)), B: rng.standard_normal((8, 8, 8))}
    before = run(func, {}, {b: a.copy() for b, a in data.items()})
    after = run(unswitch_selects(func), {}, {b: a.copy() for b, a in data.items()})
    assert after == before
