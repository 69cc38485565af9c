"""Before/Expected tests of the CUDA pass list (``codegen_cuda/pipeline.py``), no CUDA needed.

One test per pass, named ``test_<pass name>`` (``tests/test_pass_tests_complete.py``
checks that every pass a pipeline can run has one). Each builds a small kernel by
hand, runs the pass alone, builds the expected kernel by hand, and compares them with
:func:`assert_structural_equal`. ``split_host_device`` makes a program of kernels, so
its test compares each kernel structurally and the launches by the places of their
buffers among the program's parameters and workspaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.codegen_cuda.pipeline import cuda_passes
from ember.codegen_cuda.transform.inject_pipeline import inject_pipeline
from ember.codegen_cuda.transform.inject_sync import inject_sync
from ember.codegen_cuda.transform.lower_thread_allreduce import lower_thread_allreduce
from ember.codegen_cuda.transform.lower_warp_memory import lower_warp_memory
from ember.codegen_cuda.transform.split_host_device import (
    DeviceProgram,
    Launch,
    split_host_device,
)
from ember.codegen_cuda.transform.swizzle_shared import swizzle_shared
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.ir_builder import IRBuilder
from ember.tir.schedule.cross_thread import ATTR_KEY, ThreadAllreduce
from ember.tir.structural import assert_structural_equal
from ember.tir.transform.context import PassContext

B = E.BinaryOp
BIND = "thread_binding"


def kernel_attrs(block: int, grid: int = 1, name: str = "k") -> tuple[tuple[str, Any], ...]:
    """The attributes ``split_host_device`` gives a kernel."""
    return (("kernel", True), ("launch", ((grid, 1, 1), (block, 1, 1))), ("global_symbol", name))


def node(op: E.BinaryOp, a: E.ExprLike, b: E.ExprLike) -> E.PrimExpr:
    """``a op b`` as a node even when both are constants (the operators would fold them)."""
    a, b = E.convert(a), E.convert(b)
    return E.BinOp(a.dtype, op, a, b)


# -- split_host_device -----------------------------------------------------------------------
def _elementwise_nest(ib: IRBuilder, out: Buffer, value: Any) -> None:
    """``for bx in blockIdx(2): for tx in threadIdx(32): out[i] = value(i)``, ``i`` the
    element of the thread."""
    with ib.for_range(0, 2, name="bx", kind=BIND, thread_tag="blockIdx.x") as bx:
        with ib.for_range(0, 32, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
            ib.store(out, bx * 32 + tx, value(bx * 32 + tx))


def _places(known: Sequence[Any], items: Sequence[Any]) -> list[int]:
    """Where each of ``items`` is among ``known`` (by identity; -1 for none)."""
    return [next((k for k, x in enumerate(known) if x is item), -1) for item in items]


def assert_program_equal(got: DeviceProgram, want: DeviceProgram) -> None:
    assert (got.name, len(got.params), len(got.workspaces)) == (
        want.name,
        len(want.params),
        len(want.workspaces),
    )
    assert_structural_equal(
        S.PrimFunc(got.name, got.params, S.no_op(), got.attrs),
        S.PrimFunc(want.name, want.params, S.no_op(), want.attrs),
    )
    for g, w in zip(got.workspaces, want.workspaces):
        assert_structural_equal(S.Allocate(g, S.no_op()), S.Allocate(w, S.no_op()))
    got_known, want_known = [*got.params, *got.workspaces], [*want.params, *want.workspaces]
    assert len(got.kernels) == len(want.kernels)
    for g, w in zip(got.kernels, want.kernels):
        assert g.name == w.name
        assert_structural_equal(g, w)
        # a kernel's buffers are the host's own, in the same places on both sides
        assert _places(got_known, g.buffers) == _places(want_known, w.buffers)
    assert len(got.launches) == len(want.launches)
    for lg, lw in zip(got.launches, want.launches):
        assert lg.kernel == lw.kernel
        assert (len(lg.sizes), len(lg.loops)) == (len(lw.sizes), len(lw.loops))
        assert _places(got_known, lg.args) == _places(want_known, lw.args)


def test_split_host_device() -> None:
    """Two root nests, the first writing a global intermediate: two kernels, each taking
    the buffers it touches, and the intermediate a workspace the host allocates."""

    def before() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((64,), "float32", name="A")
        C = ib.param((64,), "float32", name="C")
        T = ib.allocate((64,), "float32", "global", name="T")
        _elementwise_nest(ib, T, lambda i: A[i] + 1.0)
        _elementwise_nest(ib, C, lambda i: T[63 - i] * 2.0)
        return ib.get_func("f")

    def expected() -> DeviceProgram:
        A = decl_buffer((64,), "float32", name="A")
        C = decl_buffer((64,), "float32", name="C")
        T = decl_buffer((64,), "float32", name="T")
        first, second = IRBuilder(), IRBuilder()
        _elementwise_nest(first, T, lambda i: A[i] + 1.0)
        _elementwise_nest(second, C, lambda i: T[63 - i] * 2.0)
        kernels = (
            first.get_func("f_kernel0", (A, T), kernel_attrs(32, 2, "f_kernel0")),
            second.get_func("f_kernel1", (C, T), kernel_attrs(32, 2, "f_kernel1")),
        )
        launches = (Launch("f_kernel0", (A, T)), Launch("f_kernel1", (C, T)))
        return DeviceProgram("f", (A, C), (T,), kernels, launches)

    assert_program_equal(split_host_device(before()), expected())


# -- per-kernel passes ---------------------------------------------------------------------------
def _sum_over_threads() -> ThreadAllreduce:
    x, y = E.Var("x", "float32"), E.Var("y", "float32")
    return ThreadAllreduce("sum", (x,), (y,), (x + y,), (E.const(0.0),), ("threadIdx.x",))


def _allreduce_kernel(threads: int) -> S.PrimFunc:
    """``red = sum of A[tx] over the block's threads; B[0] = red``."""
    ib = IRBuilder()
    A = ib.param((threads,), "float32", name="A")
    Out = ib.param((1,), "float32", name="B")
    with ib.for_range(0, threads, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
        red = ib.allocate((1,), "float32", "local", name="red")
        with ib.attr(_sum_over_threads(), ATTR_KEY, 0):
            ib.store(red, 0, A[tx])
        ib.store(Out, 0, red[0])
    return ib.get_func("k", attrs=kernel_attrs(threads))


def test_lower_thread_allreduce() -> None:
    """Two threads, not whole warps: a shared-memory tree of one halving step (its
    barriers are inject_sync's to place), then everyone reads slot 0."""

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((2,), "float32", name="A")
        Out = ib.param((1,), "float32", name="B")
        with ib.for_range(0, 2, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
            red = ib.allocate((1,), "float32", "local", name="red")
            allreduce = IRBuilder()  # its register lives only until red is assigned
            reg = allreduce.allocate((1,), "float32", "local", name="red_buf0")
            combine = IRBuilder()  # the tree only until the register holds the result
            tree = combine.allocate((2,), "float32", "shared", name="red_tree0")
            combine.store(tree, tx, A[tx])
            with combine.if_then_else(tx < 1):
                a = combine.let("a0", tree[tx])
                b = combine.let("b0", tree[tx + 1])
                combine.store(tree, tx, a + b)
            combine.store(reg, 0, tree[0])
            allreduce.emit(combine.get())
            allreduce.store(red, 0, reg[0])
            ib.emit(allreduce.get())
            ib.store(Out, 0, red[0])
        return ib.get_func("k", attrs=kernel_attrs(2))

    assert_structural_equal(lower_thread_allreduce(_allreduce_kernel(2)), expected())


def test_lower_thread_allreduce_over_a_warp_shuffles() -> None:
    """A whole warp: an xor butterfly of shuffles by 16, 8, 4, 2, 1, no shared memory."""

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((32,), "float32", name="A")
        Out = ib.param((1,), "float32", name="B")
        with ib.for_range(0, 32, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
            red = ib.allocate((1,), "float32", "local", name="red")
            allreduce = IRBuilder()  # its register lives only until red is assigned
            reg = allreduce.allocate((1,), "float32", "local", name="red_buf0")
            allreduce.store(reg, 0, A[tx])
            for offset in (16, 8, 4, 2, 1):
                a = E.Var("a0", "float32")
                b = E.Var("b0", "float32")
                shuffle = E.Call("float32", E.Intrinsic.WARP_SHUFFLE_XOR, (a, E.const(offset)))
                store = S.BufferStore(reg, a + b, (E.const(0),))
                allreduce.emit(S.LetStmt(a, reg[0], S.LetStmt(b, shuffle, store)))
            allreduce.store(red, 0, reg[0])
            ib.emit(allreduce.get())
            ib.store(Out, 0, red[0])
        return ib.get_func("k", attrs=kernel_attrs(32))

    assert_structural_equal(lower_thread_allreduce(_allreduce_kernel(32)), expected())


def test_lower_warp_memory() -> None:
    """A warp buffer of 64 elements becomes each lane's local share of 2."""

    def build(scope: str, size: int) -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((64,), "float32", name="A")
        with ib.for_range(0, 32, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
            W = ib.allocate((size,), "float32", scope, name="W")
            with ib.for_range(0, 2, name="r") as r:
                ib.store(W, r, A[tx * 2 + r])
                ib.store(A, tx * 2 + r, W[r] * 2.0)
        return ib.get_func("k", attrs=kernel_attrs(32))

    before, expected = build("warp", 64), build("local", 2)
    assert_structural_equal(lower_warp_memory(before), expected)


def _bitwise(op: E.Intrinsic, a: E.PrimExpr, b: E.ExprLike) -> E.PrimExpr:
    return E.Call("int32", op, (a, E.convert(b)))


def test_swizzle_shared() -> None:
    """A tile of rows of 16 half-precision elements (two 16-byte chunks): element (r, c)
    is stored at ``r * 16 + (c // 8 ^ (r // 4 & 1)) * 8 + c % 8``, by the writer and the
    reader alike."""

    def build(index: Any) -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((64,), "float16", name="A")
        Out = ib.param((64,), "float16", name="B")
        with ib.for_range(0, 4, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
            T = ib.allocate((64,), "float16", "shared", name="T")
            e = E.Var("e")
            fill = S.BufferStore(T, A[tx * 16 + e], (index(tx * 16 + e),))
            mark = (("smem_swizzle", 16),)
            ib.emit(S.For(e, E.const(0), E.const(16), S.ForKind.SERIAL, fill, "", mark))
            ib.barrier()
            with ib.for_range(0, 16, name="e") as e2:
                ib.store(Out, tx * 16 + e2, T[index(e2 * 4 + tx)])
        return ib.get_func("k", attrs=kernel_attrs(4))

    def swizzled(i: E.PrimExpr) -> E.PrimExpr:
        row, col = i // 16, i % 16
        row_phase = _bitwise(E.Intrinsic.BITWISE_AND, row // 4, 1)
        chunk = _bitwise(E.Intrinsic.BITWISE_XOR, col // 8, row_phase)
        return row * 16 + chunk * 8 + col % 8

    before, expected = build(lambda i: i), build(swizzled)
    assert_structural_equal(swizzle_shared(before), expected)


def _pipelined_row_sums() -> S.PrimFunc:
    """``for ko in range(3)``: fill a 4-float shared tile marked for 2 stages from A, then
    add its reversed tile into B."""
    ib = IRBuilder()
    A = ib.param((12,), "float32", name="A")
    Out = ib.param((4,), "float32", name="B")
    with ib.for_range(0, 4, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
        with ib.for_range(0, 3, name="ko") as ko:
            AS = ib.allocate((4,), "float32", "shared", name="AS")
            with ib.attr(AS.data, "pipeline_stages", 2):
                ib.store(AS, tx, A[ko * 4 + tx])
                ib.store(Out, tx, Out[tx] + AS[3 - tx])
    return ib.get_func("k", attrs=kernel_attrs(4))


def _stage(e: E.PrimExpr, index: E.PrimExpr) -> E.PrimExpr:
    """``e % 2 * 4 + index``: stage ``e % 2`` of a buffer of two 4-float stages."""
    return node(B.ADD, node(B.MUL, node(B.FLOORMOD, e, 2), 4), index)


def test_inject_pipeline() -> None:
    """sm_80: tile 0 is copied asynchronously before the loop; each iteration waits for its
    tile, issues the copy of the next one into the other stage, and computes."""

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((12,), "float32", name="A")
        Out = ib.param((4,), "float32", name="B")
        with ib.for_range(0, 4, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
            AS = ib.allocate((8,), "float32", "shared", name="AS")
            ib.emit(S.AsyncCopy(S.BufferStore(AS, A[tx], (_stage(E.const(0), tx),))))
            ib.emit(S.AsyncCommit())
            with ib.for_range(0, 3, name="ko") as ko:
                ib.emit(S.AsyncWait(0))
                ib.barrier()
                with ib.if_then_else(ko + 1 < 3):
                    fill = S.BufferStore(AS, A[ko * 4 + tx + 4], (_stage(ko + 1, tx),))
                    ib.emit(S.AsyncCopy(fill))
                ib.emit(S.AsyncCommit())
                ib.store(Out, tx, Out[tx] + AS[_stage(ko, 3 - tx)])
        return ib.get_func("k", attrs=kernel_attrs(4))

    assert_structural_equal(inject_pipeline(_pipelined_row_sums(), "sm_80"), expected())


def test_inject_pipeline_before_sm80_prefetches_through_registers() -> None:
    """sm_70 has no cp.async: the next tile's load goes to a register before the compute
    and to shared memory after it."""

    def expected() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((12,), "float32", name="A")
        Out = ib.param((4,), "float32", name="B")
        with ib.for_range(0, 4, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
            AS = ib.allocate((8,), "float32", "shared", name="AS")
            ib.store(AS, _stage(E.const(0), tx), A[tx])
            with ib.for_range(0, 3, name="ko") as ko:
                nxt = ib.allocate((1,), "float32", "local", name="AS.next")
                ib.barrier()
                with ib.if_then_else(ko + 1 < 3):
                    ib.store(nxt, 0, A[ko * 4 + tx + 4])
                ib.store(Out, tx, Out[tx] + AS[_stage(ko, 3 - tx)])
                with ib.if_then_else(ko + 1 < 3):
                    ib.store(AS, _stage(ko + 1, tx), nxt[0])
        return ib.get_func("k", attrs=kernel_attrs(4))

    assert_structural_equal(inject_pipeline(_pipelined_row_sums(), "sm_70"), expected())


def test_inject_sync() -> None:
    """Each thread reads another's element: a barrier between the write and the read
    (read after write), and one closing the loop body before the next iteration
    overwrites the tile (write after read)."""

    def build(barriers: bool) -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((64,), "float32", name="A")
        Out = ib.param((64,), "float32", name="B")
        with ib.for_range(0, 1, name="bx", kind=BIND, thread_tag="blockIdx.x"):
            AS = ib.allocate((32,), "float32", "shared", name="AS")
            with ib.for_range(0, 32, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
                with ib.for_range(0, 2, name="k") as k:
                    ib.store(AS, tx, A[k * 32 + tx])
                    if barriers:
                        ib.barrier()
                    ib.store(Out, k * 32 + tx, AS[31 - tx])
                    if barriers:
                        ib.barrier()
        return ib.get_func("k", attrs=kernel_attrs(32))

    assert_structural_equal(inject_sync(build(barriers=False)), build(barriers=True))


def test_verify_gpu() -> None:
    """A check: a kernel within every limit comes back as it went in (the limits it
    enforces have their own tests in test_device_passes.py)."""

    def build() -> S.PrimFunc:
        ib = IRBuilder()
        A = ib.param((64,), "float32", name="A")
        with ib.for_range(0, 2, name="bx", kind=BIND, thread_tag="blockIdx.x") as bx:
            T = ib.allocate((32,), "float32", "shared", name="T")
            with ib.for_range(0, 32, name="tx", kind=BIND, thread_tag="threadIdx.x") as tx:
                ib.store(T, tx, A[bx * 32 + tx])
                ib.barrier()
                ib.store(A, bx * 32 + tx, T[31 - tx])
        return ib.get_func("k", attrs=kernel_attrs(32, 2))

    (verify,) = [p for p in cuda_passes() if p.name == "verify_gpu"]
    assert_structural_equal(verify(build(), PassContext()), build())
