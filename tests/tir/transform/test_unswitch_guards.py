"""``unswitch_guards`` and ``loop_partition``'s dead tiles on real kernels: GEMMs whose
row tiles and column blocks do not divide their sizes, built and run on random data
against numpy with the lowered IR checked for a guard-free k loop; and random loop nests
run before and after the pass by the test executor (the Before/Expected tests are in
``test_passes_expected.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.functor import post_order_visit, uses_var
from ember.tir.transform.unswitch_guards import unswitch_guards
from ember.tuner.task import create_task
from tests.nightly import examples
from tests.tir.transform.tir_exec import run


def _likely(cond: E.PrimExpr) -> E.PrimExpr:
    return E.Call("bool", E.Intrinsic.LIKELY, (cond,))


def _invariant_guards_in_k_loops(func: S.PrimFunc) -> int:
    """``likely`` guards inside loops named ``k*`` (the micro-kernel's reduction) that read
    no variable bound inside that loop: a test the loop repeats with the same outcome (a
    partial tile's lane guards, which the LLVM backend versions, read a lane variable)."""
    found = 0

    def count(n: object) -> None:
        nonlocal found
        if not (isinstance(n, S.For) and n.loop_var.name.startswith("k")):
            return
        bound: set[E.Var] = set()
        guards: list[E.PrimExpr] = []

        def collect(m: object) -> None:
            if isinstance(m, S.For):
                bound.add(m.loop_var)
            elif isinstance(m, S.IfThenElse) and isinstance(m.condition, E.Call):
                if m.condition.op is E.Intrinsic.LIKELY:
                    guards.append(m.condition)

        post_order_visit(n.body, collect)
        found += sum(not uses_var(g, lambda v: v in bound) for g in guards)

    post_order_visit(func.body, count)
    return found


@pytest.mark.parametrize(
    "M, N, K, mr, nc_panels",
    [(104, 384, 40, 6, 1), (101, 402, 37, 6, 2), (13, 200, 12, 6, 2), (9, 130, 5, 4, 2)],
)
def test_edge_tiles_leave_the_k_loop_and_match_numpy(M, N, K, mr, nc_panels) -> None:
    """Row tiles that do not divide M and column blocks that do not divide the panels:
    no guard is left in the k loop of the lowered kernel (104 x 384 in tiles of 6 rows
    ran 2.3x faster so), and the product equals numpy's, every output written (the
    output is filled with NaN first)."""
    task = create_task("dense_packed.llvm", args=(M, N, K, 64, (), "float32"), target="llvm")
    knobs = task.config_space.knobs
    choices = {k: v.default_index for k, v in knobs.items()}
    choices["mr"] = list(knobs["mr"].candidates).index(mr)
    choices["nc_panels"] = list(knobs["nc_panels"].candidates).index(nc_panels)
    s, args = task.instantiate(task.config_space.from_choices(choices))
    assert _invariant_guards_in_k_loops(ember.lower(s, args)) == 0
    f = ember.build(s, args, target="llvm")
    rng = np.random.default_rng(M * N + K)
    a = rng.standard_normal((M, K)).astype("float32")
    w = rng.standard_normal((K, N)).astype("float32")
    panels = -(-N // 64)
    packed = np.zeros((panels, K, 64), "float32")
    for x in range(panels):
        block = w[:, x * 64 : (x + 1) * 64]
        packed[x, :, : block.shape[1]] = block
    out = np.full(tuple(int(d.value) for d in args[2].shape), np.nan, "float32")
    f(a, packed, out)
    want = a.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(out[:, :N], want, rtol=1e-4, atol=1e-4)


@settings(max_examples=examples(60), deadline=None)
@given(
    extents=st.tuples(st.integers(1, 9), st.integers(1, 3), st.integers(1, 3)),
    kind=st.sampled_from([S.ForKind.SERIAL, S.ForKind.PARALLEL]),
    guards=st.lists(
        st.tuples(st.sampled_from(["mod", "div"]), st.integers(2, 4), st.integers(-1, 4)),
        min_size=1,
        max_size=4,
    ),
    with_else=st.booleans(),
)
def test_random_nests_keep_their_stores(extents, kind, guards, with_else) -> None:
    """Random nests ``for f: for k: for j:`` whose stores sit under guards on ``f % m`` or
    ``f // m`` (some joined with a guard on ``j``, some with an else branch): the pass
    keeps every store, its value and its order (run by the test executor)."""
    nf, nk, nj = extents
    A = decl_buffer((10, 4, 4), "float32", name="A")
    C = decl_buffer((nf, nk, nj), "float32", name="C")
    f, k, j = E.Var("f", "int32"), E.Var("k", "int32"), E.Var("j", "int32")
    stores: list[S.Stmt] = []
    for n, (op, m, c) in enumerate(guards):
        part = f % m if op == "mod" else f // m
        cond = E.Compare("bool", E.CompareOp.LT, part, E.const(c, "int32"))
        if n % 2:
            cond = E.logical_and(cond, E.Compare("bool", E.CompareOp.LT, j, E.const(2, "int32")))
        store = S.BufferStore(C, A[f, k, j] + float(n), (f, k, j))
        other = S.BufferStore(C, A[f, j, k] - float(n), (f, k, j)) if with_else else None
        stores.append(S.IfThenElse(_likely(cond), store, other))
    inner = S.For(j, E.const(0), E.const(nj), S.ForKind.SERIAL, S.seq(*stores))
    nest = S.For(
        f, E.const(0), E.const(nf), kind, S.For(k, E.const(0), E.const(nk), S.ForKind.SERIAL, inner)
    )
    func = S.PrimFunc("f", (A, C), nest)
    rng = np.random.default_rng(nf * 100 + nk * 10 + nj)
    data = {A: rng.standard_normal((10, 4, 4))}
    after_func = unswitch_guards(func)
    assert after_func is not func  # every nest has a guard to hoist
    before = run(func, {}, {b: a.copy() for b, a in data.items()})
    after = run(after_func, {}, {b: a.copy() for b, a in data.items()})
    assert after == before
