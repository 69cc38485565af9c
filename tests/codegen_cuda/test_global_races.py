"""The emulator's global-memory race check: the whole launch, ordered only by a block's barriers.

Kernels are written by hand in the form ``split_host_device`` produces, so each
test shows exactly which accesses meet. The racing form of a reduction axis bound
to threads without a cross-thread reduction (every thread updating ``B[i]``) is
one of them.
"""

from __future__ import annotations

import numpy as np
import pytest

from ember.codegen_cuda.emulator import emulate
from ember.errors import RaceError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.ir_builder import IRBuilder


def _kernel(ib: IRBuilder, grid: int, block: int, name: str = "k") -> S.PrimFunc:
    return ib.get_func(name, attrs=(("kernel", True), ("launch", ((grid, 1, 1), (block, 1, 1)))))


def _bind(ib: IRBuilder, extent: int, tag: str, name: str):
    return ib.for_range(0, extent, name=name, kind="thread_binding", thread_tag=tag)


def racing_thread_reduction(rows: int = 4, n: int = 128, threads: int = 64) -> S.PrimFunc:
    """What lowering made of ``split(k, 64)`` + ``bind(k_inner, "threadIdx.x")`` before
    cross-thread reductions: every thread initialises and updates ``B[i]``."""
    ib = IRBuilder()
    A = ib.param((rows * n,), "float32", name="A")
    B = ib.param((rows,), "float32", name="B")
    with _bind(ib, rows, "blockIdx.x", "i") as i:
        with _bind(ib, threads, "threadIdx.x", "k_inner") as ki:
            ib.store(B, i, E.const(0.0))
            with ib.for_range(0, n // threads, name="k_outer") as ko:
                ib.store(B, i, B[i] + A[i * n + ko * threads + ki])
    return _kernel(ib, rows, threads, "racing_sum")


def test_the_racing_thread_reduction_is_a_race(rng):
    a = rng.uniform(-1, 1, 4 * 128).astype("float32")
    with pytest.raises(RaceError) as err:
        emulate(racing_thread_reduction(), a, np.zeros(4, "float32"))
    msg = str(err.value)
    assert "global-memory race" in msg and "'B[0]'" in msg
    assert msg.count("block (0, 0, 0) thread (") == 2  # both threads are named
    assert "B[i] + A[" in msg  # and the statement


def test_the_racing_form_runs_without_race_checks(rng):
    """With the check off it computes the wrong sum nobody wants: the race is real."""
    a = np.ones(4 * 128, "float32")
    b = np.zeros(4, "float32")
    emulate(racing_thread_reduction(), a, b, check_races=False)
    assert not np.allclose(b, 128.0)


def _two_blocks_store(value_of_block) -> S.PrimFunc:
    ib = IRBuilder()
    B = ib.param((4,), "float32", name="B")
    with _bind(ib, 2, "blockIdx.x", "bx") as bx:
        with _bind(ib, 32, "threadIdx.x", "tx") as tx:
            with ib.if_then_else(E.eq(tx, 0)):
                ib.store(B, 1, value_of_block(bx))
    return _kernel(ib, 2, 32)


def test_two_blocks_writing_one_element_race():
    kernel = _two_blocks_store(lambda bx: E.cast("float32", bx))
    with pytest.raises(RaceError, match=r"write-after-write.*'B\[1\]'.*block \(1, 0, 0\)"):
        emulate(kernel, np.zeros(4, "float32"))


def test_the_same_value_stored_twice_is_not_a_race():
    """A broadcast result stored by every thread (the same bits) cannot be torn."""
    b = np.zeros(4, "float32")
    emulate(_two_blocks_store(lambda bx: E.const(2.5)), b)
    assert b[1] == 2.5


def test_threads_of_one_store_writing_different_values_race():
    ib = IRBuilder()
    B = ib.param((4,), "float32", name="B")
    with _bind(ib, 1, "blockIdx.x", "bx"):
        with _bind(ib, 64, "threadIdx.x", "tx") as tx:
            ib.store(B, E.floormod(tx, 4), E.cast("float32", tx))
    with pytest.raises(RaceError, match="write-after-write"):
        emulate(_kernel(ib, 1, 64), np.zeros(4, "float32"))


def _hand_off(barrier: bool, blocks: int = 1) -> S.PrimFunc:
    """Thread 0 of each block writes ``B[0]``; then thread 5 of each block reads it."""
    ib = IRBuilder()
    B = ib.param((2,), "float32", name="B")
    C = ib.param((blocks,), "float32", name="C")
    with _bind(ib, blocks, "blockIdx.x", "bx") as bx:
        with _bind(ib, 32, "threadIdx.x", "tx") as tx:
            with ib.if_then_else(E.eq(tx, 0)):
                ib.store(B, 0, E.cast("float32", bx) + 1.0)
            if barrier:
                ib.barrier()
            with ib.if_then_else(E.eq(tx, 5)):
                ib.store(C, bx, B[0])
    return _kernel(ib, blocks, 32)


def test_read_after_another_threads_write_races_without_a_barrier():
    with pytest.raises(
        RaceError, match=r"read-after-write.*thread \(5, 0, 0\).*thread \(0, 0, 0\)"
    ):
        emulate(_hand_off(barrier=False), np.zeros(2, "float32"), np.zeros(1, "float32"))


def test_a_barrier_orders_global_accesses_within_a_block():
    c = np.zeros(1, "float32")
    emulate(_hand_off(barrier=True), np.zeros(2, "float32"), c)
    assert c[0] == 1.0


def test_a_barrier_does_not_order_other_blocks():
    with pytest.raises(RaceError, match="global-memory race"):
        emulate(_hand_off(barrier=True, blocks=3), np.zeros(2, "float32"), np.zeros(3, "float32"))


def test_write_after_another_threads_read_races():
    """``B[i] = B[i + 1]`` in place: thread i + 1 overwrites what thread i read."""
    ib = IRBuilder()
    B = ib.param((65,), "float32", name="B")
    with _bind(ib, 1, "blockIdx.x", "bx"):
        with _bind(ib, 64, "threadIdx.x", "tx") as tx:
            v = ib.allocate((1,), "float32", scope="local", name="v")
            ib.store(v, 0, B[tx + 1])
            ib.store(B, tx, v[0])
    with pytest.raises(RaceError, match="write-after-read"):
        emulate(_kernel(ib, 1, 64), np.arange(65, dtype="float32"))


def test_races_are_found_across_chunks_of_blocks():
    """Blocks far apart run in different chunks of the emulator; the history is per launch."""
    ib = IRBuilder()
    B = ib.param((1,), "float32", name="B")
    with _bind(ib, 4096, "blockIdx.x", "bx") as bx:
        with _bind(ib, 32, "threadIdx.x", "tx") as tx:
            with ib.if_then_else(E.logical_and(E.eq(tx, 0), E.eq(E.floormod(bx, 4095), 0))):
                ib.store(B, 0, E.cast("float32", bx))
    with pytest.raises(RaceError, match=r"block \(4095, 0, 0\)"):
        emulate(_kernel(ib, 4096, 32), np.zeros(1, "float32"))


def test_read_only_buffers_and_private_elements_are_not_races(rng):
    """Many threads reading one input element, each writing its own output: no race."""
    ib = IRBuilder()
    A = ib.param((8,), "float32", name="A")
    B = ib.param((4 * 64,), "float32", name="B")
    with _bind(ib, 4, "blockIdx.x", "bx") as bx:
        with _bind(ib, 64, "threadIdx.x", "tx") as tx:
            i = bx * 64 + tx
            ib.store(B, i, A[E.floormod(tx, 8)] * 2.0)
            ib.store(B, i, B[i] + 1.0)  # the thread's own element again
    a = rng.uniform(-1, 1, 8).astype("float32")
    b = np.zeros(256, "float32")
    emulate(_kernel(ib, 4, 64), a, b)
    np.testing.assert_allclose(b, np.tile(np.repeat(a[None], 8, 0).reshape(-1), 4) * 2 + 1)
