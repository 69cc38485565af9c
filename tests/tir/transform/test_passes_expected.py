"""Before/Expected tests of the target-independent TIR passes and of the CPU's own pass.

One test per pass, named ``test_<pass name>`` (``tests/test_pass_tests_complete.py``
checks that every pass a pipeline can run has one). Each builds a small ``before``
function by hand, runs the pass alone, builds the ``expected`` function by hand, and
compares them with :func:`assert_structural_equal`, which matches variables and
buffers by where they are defined, so the two sides are built independently. The
style is TVM's ``tests/python/tir-transform`` tests.
"""

from __future__ import annotations

from typing import Any

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.ir_builder import IRBuilder
from ember.tir.structural import assert_structural_equal
from ember.tir.transform.context import PassContext
from ember.tir.transform.flatten_buffers import flatten_buffers
from ember.tir.transform.loop_partition import loop_partition
from ember.tir.transform.simplify import simplify
from ember.tir.transform.unroll_loops import unroll_loops
from ember.tir.transform.unswitch_guards import unswitch_guards
from ember.tir.transform.unswitch_selects import unswitch_selects
from ember.tir.transform.vectorize_loops import (
    FALLBACK,
    LANE_EDGE,
    vectorize_loops,
    version_lane_guards,
)
from ember.tir.transform.widen_index_dtypes import widen_index_dtypes


def likely(cond: E.PrimExpr) -> E.PrimExpr:
    return E.Call("bool", E.Intrinsic.LIKELY, (cond,))


def unfolded(op: E.BinaryOp, a: E.ExprLike, b: E.ExprLike) -> E.PrimExpr:
    """``a op b`` as a node even when both are constants (the operators would fold them):
    what a pass that only substitutes leaves for ``simplify``."""
    a, b = E.convert(a), E.convert(b)
    return E.BinOp(a.dtype, op, a, b)


def ramp(base: E.PrimExpr, lanes: int) -> E.PrimExpr:
    return E.Ramp(f"{base.dtype}x{lanes}", base, E.const(1, base.dtype), lanes)


def broadcast(value: E.PrimExpr, lanes: int) -> E.PrimExpr:
    return E.Broadcast(f"{value.dtype}x{lanes}", value, lanes)


# -- phase 1 -------------------------------------------------------------------------------
def test_widen_index_dtypes() -> None:
    """An index past int32 (49999 * 50000 + 49999) widens both loop variables to int64."""
    size = 50000 * 50000

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((size,), "float32", name="A")
        with ib.for_range(0, 50000, name="i") as i:
            with ib.for_range(0, 50000, name="j") as j:
                ib.store(A, i * 50000 + j, 1.0)
        return ib.get_func("f")

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((size,), "float32", name="A")
        with ib.for_range(0, 50000, name="i", dtype="int64") as i:
            with ib.for_range(0, 50000, name="j", dtype="int64") as j:
                ib.store(A, i * E.const(50000, "int64") + j, 1.0)
        return ib.get_func("f")

    assert_structural_equal(widen_index_dtypes(before()), expected())


def test_widen_index_dtypes_leaves_int32_indices_alone() -> None:
    ib = IRBuilder()
    A = ib.param((64,), "float32", name="A")
    with ib.for_range(0, 8, name="i") as i:
        with ib.for_range(0, 8, name="j") as j:
            ib.store(A, i * 8 + j, 1.0)
    func = ib.get_func("f")
    assert widen_index_dtypes(func) is func


def test_simplify() -> None:
    """A provable guard goes, a loop of one iteration becomes its body, ``x * 1.0`` and
    ``i + 0`` fold."""

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((16,), "float32", name="A")
        with ib.for_range(0, 16, name="i") as i:
            with ib.if_then_else(i < 32):
                with ib.for_range(0, 1, name="k") as k:
                    ib.store(A, i + k * 4, A[i + 0] * 1.0)
        return ib.get_func("f")

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((16,), "float32", name="A")
        with ib.for_range(0, 16, name="i") as i:
            ib.store(A, i, A[i])
        return ib.get_func("f")

    assert_structural_equal(simplify(before()), expected())


def test_flatten_buffers() -> None:
    """Accesses become one row-major index; the allocation becomes 1-D; the parameter keeps
    its declared shape and its flat view shares its data pointer."""

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((4, 8), "float32", name="A")
        T = ib.allocate((2, 8), "float32", "local", name="T")
        with ib.for_range(0, 4, name="i") as i:
            with ib.for_range(0, 8, name="j") as j:
                ib.store(T, (1, j), A[i, j] * 2.0)
                ib.store(A, (i, j), T[1, j])
        return ib.get_func("f")

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((4, 8), "float32", name="A")
        A_flat = decl_buffer((32,), "float32", name="A", data=A.data)
        T = ib.allocate((16,), "float32", "local", name="T")
        with ib.for_range(0, 4, name="i") as i:
            with ib.for_range(0, 8, name="j") as j:
                ib.store(T, 8 + j, A_flat[i * 8 + j] * 2.0)
                ib.store(A_flat, i * 8 + j, T[8 + j])
        return ib.get_func("f")

    assert_structural_equal(flatten_buffers(before()), expected())


# -- phase 2 -------------------------------------------------------------------------------
def test_loop_partition() -> None:
    """The tail of a split of 10 by 4: a main loop with no guard, keeping the loop's kind,
    and the last iteration, whose guard holds for two inner values, cut to them."""

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((10,), "float32", name="A")
        with ib.for_range(0, 3, name="io", kind="parallel") as io:
            with ib.for_range(0, 4, name="ii") as ii:
                with ib.if_then_else(likely(io * 4 + ii < 10)):
                    ib.store(A, io * 4 + ii, 1.0)
        return ib.get_func("f")

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((10,), "float32", name="A")
        with ib.for_range(0, 2, name="io", kind="parallel") as io:
            with ib.for_range(0, 4, name="ii") as ii:
                ib.store(A, io * 4 + ii, 1.0)
        with ib.for_range(0, 2, name="ii") as ii:  # io = 2, left for simplify to fold
            ib.store(A, unfolded(E.BinaryOp.MUL, 2, 4) + ii, 1.0)
        return ib.get_func("f")

    assert_structural_equal(loop_partition(before()), expected())


def test_loop_partition_shared_guard() -> None:
    """A guarded select that appears twice in one store (the same object, as a compute
    that reuses a subexpression builds it) is removed at both places in the main loop,
    as two separate copies would be; the tail keeps it."""

    def shared(i: E.PrimExpr, B: object) -> E.PrimExpr:
        return E.select(likely(i < 6), B[i], E.const(0.0, "float32"))  # type: ignore[index]

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((8,), "float32", name="A")
        B = ib.param((8,), "float32", name="B")
        with ib.for_range(0, 8, name="i") as i:
            s = shared(i, B)
            ib.store(A, i, s * s)
        return ib.get_func("f")

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((8,), "float32", name="A")
        B = ib.param((8,), "float32", name="B")
        with ib.for_range(0, 6, name="i") as i:
            ib.store(A, i, B[i] * B[i])
        with ib.for_range(6, 8, name="i") as i:
            s = shared(i, B)
            ib.store(A, i, s * s)
        return ib.get_func("f")

    assert_structural_equal(loop_partition(before()), expected())


def test_loop_partition_cuts_dead_tiles() -> None:
    """A register tile's loop whose body is more than one guard: a scratch buffer filled
    under one guard and stored out under another. From jo = 3 on, the store out is
    guarded false for every column, so those iterations (which would only fill the
    scratch) are cut off; jo = 2, the partial tile, runs alone, its loops split in turn."""

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((10,), "float32", name="A")
        with ib.for_range(0, 4, name="jo") as jo:
            acc = ib.allocate((4,), "float32", name="acc")
            with ib.for_range(0, 4, name="c") as c:
                with ib.if_then_else(likely(jo * 4 + c < 12)):
                    ib.store(acc, c, 1.0)
            with ib.for_range(0, 4, name="c") as c:
                with ib.if_then_else(likely(jo * 4 + c < 10)):
                    ib.store(A, jo * 4 + c, acc[c])
        return ib.get_func("f")

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((10,), "float32", name="A")
        with ib.for_range(0, 2, name="jo") as jo:
            acc = ib.allocate((4,), "float32", name="acc")
            with ib.for_range(0, 4, name="c") as c:
                ib.store(acc, c, 1.0)
            with ib.for_range(0, 4, name="c") as c:
                ib.store(A, jo * 4 + c, acc[c])
        edge = unfolded(E.BinaryOp.MUL, 2, 4)  # jo = 2, left for simplify to fold
        acc = ib.allocate((4,), "float32", name="acc")
        with ib.for_range(0, 4, name="c") as c:  # its loops partitioned in turn
            ib.store(acc, c, 1.0)
        with ib.for_range(0, 2, name="c") as c:
            ib.store(A, edge + c, acc[c])
        return ib.get_func("f")

    assert_structural_equal(loop_partition(before()), expected())


def test_unswitch_guards() -> None:
    """Row tiles of 3 over 8 rows fused with 2 column blocks: the edge tile's guard on
    the fused variable's remainder, inside the k loop, becomes an ``if`` around two
    copies of the body: one with no test, one without the guarded store. The column
    guard, affine in its loop (``loop_partition``'s), stays."""

    def params(ib: IRBuilder) -> tuple[Any, Any]:
        A = ib.param((8, 4), "float32", name="A")
        C = ib.param((8, 6), "float32", name="C")
        return A, C

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A, C = params(ib)
        with ib.for_range(0, 6, name="f", kind="parallel") as f:
            with ib.for_range(0, 4, name="k") as k:
                ib.store(C, (f % 3 * 3, f // 3), A[f % 3 * 3, k])
                with ib.if_then_else(likely(f % 3 < 2)):
                    ib.store(C, (f % 3 * 3 + 2, f // 3), A[f % 3 * 3 + 2, k])
                with ib.for_range(0, 3, name="j") as j:
                    with ib.if_then_else(likely(f // 3 * 3 + j < 5)):
                        ib.store(C, (f % 3 * 3, j), A[0, k])
        return ib.get_func("f")

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A, C = params(ib)
        with ib.for_range(0, 6, name="f", kind="parallel") as f:
            with ib.if_then_else(f % 3 < 2):
                with ib.for_range(0, 4, name="k") as k:
                    ib.store(C, (f % 3 * 3, f // 3), A[f % 3 * 3, k])
                    ib.store(C, (f % 3 * 3 + 2, f // 3), A[f % 3 * 3 + 2, k])
                    with ib.for_range(0, 3, name="j") as j:
                        with ib.if_then_else(likely(f // 3 * 3 + j < 5)):
                            ib.store(C, (f % 3 * 3, j), A[0, k])
            with ib.else_():
                with ib.for_range(0, 4, name="k") as k:
                    ib.store(C, (f % 3 * 3, f // 3), A[f % 3 * 3, k])
                    with ib.for_range(0, 3, name="j") as j:
                        with ib.if_then_else(likely(f // 3 * 3 + j < 5)):
                            ib.store(C, (f % 3 * 3, j), A[0, k])
        return ib.get_func("f")

    assert_structural_equal(unswitch_guards(before()), expected())


def test_unswitch_guards_leaves_affine_and_outer_guards() -> None:
    """A guard affine in its loop (``loop_partition`` splits on it) and one not under
    any inner loop (tested once a body) are left as they are."""
    ib = IRBuilder()
    A = ib.param((8,), "float32", name="A")
    with ib.for_range(0, 8, name="i", kind="parallel") as i:
        with ib.if_then_else(likely(i % 3 < 2)):
            ib.store(A, i, 1.0)
        with ib.for_range(0, 2, name="k") as k:
            with ib.if_then_else(likely(i * 2 + k < 7)):
                ib.store(A, i, 2.0)
    func = ib.get_func("f")
    assert unswitch_guards(func) is func


def test_unswitch_selects() -> None:
    """A concat's select on the row (invariant in the column loop) becomes an ``if`` in
    the row loop around two copies of the column loop, each reading one input; the
    select on the column (a lane of the inner loop) stays."""

    def params(ib: IRBuilder) -> tuple[Any, Any, Any]:
        A = ib.param((3, 5), "float32", name="A")
        B = ib.param((4, 5), "float32", name="B")
        C = ib.param((7, 5), "float32", name="C")
        return A, B, C

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A, B, C = params(ib)
        with ib.for_range(0, 7, name="i", kind="parallel") as i:
            with ib.for_range(0, 5, name="j") as j:
                row = E.select(i < 3, A[E.min_(i, 2), j], B[E.max_(i - 3, 0), j])
                ib.store(C, (i, j), E.select(j < 2, row, row * 2.0))
        return ib.get_func("f")

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A, B, C = params(ib)
        with ib.for_range(0, 7, name="i", kind="parallel") as i:
            with ib.if_then_else(i < 3):
                with ib.for_range(0, 5, name="j") as j:
                    row = A[E.min_(i, 2), j]
                    ib.store(C, (i, j), E.select(j < 2, row, row * 2.0))
            with ib.else_():
                with ib.for_range(0, 5, name="j") as j:
                    row = B[E.max_(i - 3, 0), j]
                    ib.store(C, (i, j), E.select(j < 2, row, row * 2.0))
        return ib.get_func("f")

    assert_structural_equal(unswitch_selects(before()), expected())


def test_unswitch_selects_leaves_data_and_lane_conditions() -> None:
    """A select on a loaded value (ReLU), one of two constants, and one in a vectorized
    loop on its own lane are left as they are."""
    ib = IRBuilder()
    A = ib.param((8, 8), "float32", name="A")
    B = ib.param((8, 8), "float32", name="B")
    with ib.for_range(0, 8, name="i") as i:
        with ib.for_range(0, 8, name="j", kind="vectorized") as j:
            relu = E.select(A[i, j] > 0.0, A[i, j], E.const(0.0, "float32"))
            flag = E.select(i < 4, E.const(1.0, "float32"), E.const(2.0, "float32"))
            lane = E.select(j < 3, A[i, j], B[i, j])
            ib.store(B, (i, j), relu + flag + lane)
    func = ib.get_func("f")
    assert unswitch_selects(func) is func


def test_vectorize_loops() -> None:
    """A vectorized loop becomes one vector statement: ramps for affine indices,
    broadcasts for invariant values."""

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((8,), "float32", name="A")
        B = ib.param((8,), "float32", name="B")
        with ib.for_range(0, 2, name="o") as o:
            with ib.for_range(0, 4, name="v", kind="vectorized") as v:
                ib.store(B, o * 4 + v, A[o * 4 + v] + 1.0)
        return ib.get_func("f")

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((8,), "float32", name="A")
        B = ib.param((8,), "float32", name="B")
        with ib.for_range(0, 2, name="o") as o:
            lanes = ramp(o * 4 + 0, 4)
            ib.store(B, lanes, A[lanes] + broadcast(E.const(1.0), 4))
        return ib.get_func("f")

    assert_structural_equal(vectorize_loops(before(), PassContext()), expected())


def test_unroll_loops() -> None:
    """An ``unroll`` loop becomes one copy of its body per iteration, outer copies first."""

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((3,), "float32", name="A")
        B = ib.param((3,), "float32", name="B")
        with ib.for_range(0, 3, name="u", kind="unroll") as u:
            ib.store(A, u, B[u] * 2.0)
        return ib.get_func("f")

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((3,), "float32", name="A")
        B = ib.param((3,), "float32", name="B")
        for k in range(3):
            ib.store(A, k, B[k] * 2.0)
        return ib.get_func("f")

    assert_structural_equal(unroll_loops(before(), PassContext()), expected())


# -- the CPU's own pass ----------------------------------------------------------------------
def test_version_lane_guards() -> None:
    """A vectorized loop ``vectorize_loops`` left serial for a guard on its lanes (the edge
    of a split of 20 by 16) is versioned: vector statements where the guard holds at the
    first and the last lane, the serial loop elsewhere (marked as the edge lanes, which
    the LLVM backend keeps from unrolling)."""

    def before() -> S.PrimFunc:
        A = decl_buffer((32,), "float32", name="A")
        B = decl_buffer((32,), "float32", name="B")
        j, c = E.Var("j"), E.Var("c")
        idx = j * 16 + c
        guarded = S.IfThenElse(likely(idx < 20), S.BufferStore(B, A[idx] * 2.0, (idx,)))
        marked = ((FALLBACK, True),)  # how vectorize_loops leaves such a loop
        lanes = S.For(c, E.const(0), E.const(16), S.ForKind.SERIAL, guarded, "", marked)
        return S.PrimFunc("f", (A, B), S.For(j, E.const(0), E.const(2), S.ForKind.PARALLEL, lanes))

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((32,), "float32", name="A")
        B = ib.param((32,), "float32", name="B")
        with ib.for_range(0, 2, name="j", kind="parallel") as j:
            first, last = j * 16 + 0, j * 16 + 15
            with ib.if_then_else(likely(E.logical_and(first < 20, last < 20))):
                vec = ramp(j * 16 + 0, 16)
                ib.store(B, vec, A[vec] * broadcast(E.const(2.0), 16))
            with ib.else_():
                with ib.for_range(0, 16, name="c", annotations=((LANE_EDGE, True),)) as c:
                    with ib.if_then_else(likely(j * 16 + c < 20)):
                        ib.store(B, j * 16 + c, A[j * 16 + c] * 2.0)
        return ib.get_func("f")

    assert_structural_equal(version_lane_guards(before()), expected())
