"""split_host_device, verify_gpu and inject_sync on lowered GPU schedules (no CUDA needed)."""

from __future__ import annotations

import pytest

import ember
from ember import te
from ember.codegen_cuda.transform.inject_sync import inject_sync
from ember.codegen_cuda.transform.split_host_device import split_host_device
from ember.codegen_cuda.transform.verify_gpu import verify_gpu
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from tests.codegen_cuda.gpu_schedules import elementwise, lowered, tiled_matmul


def _barriers(func: S.PrimFunc) -> int:
    n = 0

    def visit(node: object) -> None:
        nonlocal n
        n += isinstance(node, S.Barrier)

    post_order_visit(func.body, visit)
    return n


def test_split_elementwise_launch_dims():
    prog = split_host_device(lowered(elementwise(1000, 128)))
    (kernel,) = prog.kernels
    assert kernel.attr("launch") == ((8, 1, 1), (128, 1, 1))
    assert [b.name for b in kernel.params] == ["A", "B"]


def test_split_two_stages_gives_two_kernels_and_a_workspace():
    A = te.placeholder((256,), name="A")
    B = te.compute((256,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((256,), lambda i: B[255 - i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    for T in (B, C):
        bx, tx = s[T].split(s[T].op.axis[0], factor=64)
        s[T].bind(bx, "blockIdx.x")
        s[T].bind(tx, "threadIdx.x")
    prog = split_host_device(ember.lower(s, [A, C]))
    assert len(prog.kernels) == 2 and [w.name for w in prog.workspaces] == ["B"]
    assert [b.name for b in prog.launches[1].args] == ["C", "B"]


def test_unbound_stage_is_rejected():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ember.LoweringError, match="outside any GPU thread binding"):
        split_host_device(ember.lower(s, [A, B]))


def test_verify_gpu_rejects_oversized_block():
    prog = split_host_device(lowered(elementwise(4096, 2048)))
    with pytest.raises(ember.LoweringError, match="2048 threads per block.*limit is 1024"):
        verify_gpu(prog.kernels[0])


def test_verify_gpu_rejects_too_much_shared_memory():
    A = te.placeholder((64, 4096), name="A")
    k = te.reduce_axis((0, 4096), name="k")
    B = te.compute((64,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bi, ti = s[B].split(s[B].op.axis[0], factor=32)
    s[B].bind(bi, "blockIdx.x")
    s[B].bind(ti, "threadIdx.x")
    s[AS].compute_at(s[B], bi)  # a 32 x 4096 tile: 512 KiB of shared memory
    _, c = s[AS].op.axis
    co, ci = s[AS].split(c, factor=32)
    s[AS].bind(ci, "threadIdx.x")
    prog = split_host_device(ember.lower(s, [A, B]))
    with pytest.raises(ember.LoweringError, match="shared memory per block"):
        verify_gpu(prog.kernels[0], arch="sm_80")


def test_thread_axis_bound_twice_with_different_extents():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    i, j = s[B].op.axis
    bi, ti = s[B].split(i, factor=16)
    s[B].bind(bi, "blockIdx.x")
    s[B].bind(ti, "threadIdx.x")
    s[AS].compute_at(s[B], bi)
    a, _ = s[AS].op.axis
    ao, ai = s[AS].split(a, factor=8)
    s[AS].bind(ai, "threadIdx.x")
    with pytest.raises(ember.LoweringError, match="bound twice with different extents"):
        split_host_device(ember.lower(s, [A, B]))


def test_inject_sync_tiled_matmul_places_raw_and_war_barriers():
    prog = split_host_device(lowered(tiled_matmul()))
    kernel = inject_sync(prog.kernels[0])
    assert _barriers(kernel) == 2
    text = repr(kernel)
    # one barrier between the staged copies and the reads, one closing the k loop
    fetch = text.index("B.shared[ax0_1 * 16 + ax1_1] =")
    first = text.index('barrier("shared")')
    compute = text.index("for k_inner")
    assert fetch < first < compute
    assert text.rstrip().endswith('barrier("shared")')


def test_inject_sync_adds_nothing_without_shared_memory():
    prog = split_host_device(lowered(elementwise()))
    kernel = prog.kernels[0]
    assert inject_sync(kernel) is kernel
