"""Storage scopes for fragments (``warp``, ``wmma.*``): schedules take them, bound
inference relaxes thread loops by TVM's rule for each, and ``verify_gpu`` counts a
warp's storage per warp and checks fragments hold whole 16x16 tiles."""

from __future__ import annotations

import pytest

import ember
from ember import te
from ember.codegen_cuda.transform.split_host_device import split_host_device
from ember.codegen_cuda.transform.verify_gpu import verify_gpu
from ember.errors import LoweringError, ScheduleError
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from ember.tir.scopes import STORAGE_SCOPES, thread_rank_relaxed


def _allocs(func: S.PrimFunc) -> dict[str, S.Allocate]:
    out: dict[str, S.Allocate] = {}
    post_order_visit(
        func.body, lambda n: out.setdefault(n.buffer.name, n) if isinstance(n, S.Allocate) else None
    )
    return out


def _staged(scope: str, n: int = 256, dtype: str = "float32"):  # noqa: ANN202
    """B = A * 2 with A staged through ``scope``, computed at the thread loop."""
    A = te.placeholder((n,), dtype, name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, scope, [B])
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    s[AS].compute_at(s[B], tx)
    return s, A, B


@pytest.mark.parametrize(("scope", "size"), [("local", 1), ("warp", 32), ("shared", 32)])
def test_thread_relaxation_per_scope(scope: str, size: int) -> None:
    """At threadIdx.x: a thread's local copy is one element; warp memory and shared memory
    hold the whole warp's / block's 32."""
    s, A, B = _staged(scope)
    func = ember.lower(s, [A, B])
    (alloc,) = [a for name, a in _allocs(func).items() if name.startswith("A.")]
    assert alloc.buffer.scope == scope
    assert [d.value for d in alloc.buffer.shape] == [size]


def test_every_scope_is_accepted_and_others_are_not() -> None:
    for scope in STORAGE_SCOPES:
        s, A, B = _staged(scope)
        assert s[s.stages[1].op].scope == scope
    with pytest.raises(ScheduleError, match="wmma.accumulator"):
        _staged("wmma.fragment")


def test_relaxation_rule() -> None:
    assert thread_rank_relaxed("global", "blockIdx.x")
    assert thread_rank_relaxed("shared", "threadIdx.y") and not thread_rank_relaxed(
        "shared", "blockIdx.x"
    )
    assert thread_rank_relaxed("warp", "threadIdx.x") and not thread_rank_relaxed(
        "warp", "threadIdx.y"
    )
    for scope in ("local", "wmma.matrix_a", "wmma.accumulator"):
        assert not thread_rank_relaxed(scope, "threadIdx.x")


def _kernel_with(scope: str, n: int, dtype: str):  # noqa: ANN202
    """A kernel with one ``scope`` buffer of ``n`` elements (a hand-made fragment tile)."""
    A = te.placeholder((n,), dtype, name="A")
    B = te.compute((n,), lambda i: A[i] + A[i], name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, scope, [B])
    (blk,) = [s[B].fuse(B.op.axis[0])]
    bx, tx = s[B].split(blk, factor=n)
    s[B].bind(bx, "blockIdx.x")
    s[AS].compute_at(s[B], bx)
    (kernel,) = split_host_device(ember.lower(s, [A, B])).kernels
    return kernel


def test_fragment_counts_per_warp() -> None:
    """A 16x16 float32 accumulator is 1 KiB per warp, 32 bytes per lane: within budget even
    where 1 KiB per thread times 16 tiles would not be."""
    verify_gpu(_kernel_with("wmma.accumulator", 256 * 16, "float32"))
    verify_gpu(_kernel_with("wmma.matrix_a", 256, "float16"))
    with pytest.raises(LoweringError, match="local memory per thread"):
        verify_gpu(_kernel_with("local", 256 * 32, "float32"))


@pytest.mark.parametrize(
    ("scope", "n", "dtype", "message"),
    [
        ("wmma.matrix_a", 100, "float16", "whole number of 16x16 tiles"),
        ("wmma.matrix_b", 256, "float64", "holds float64"),
        ("wmma.accumulator", 256, "int8", "holds int8"),
        ("warp", 33, "float32", "multiple of the 32 lanes"),
    ],
)
def test_bad_fragments(scope: str, n: int, dtype: str, message: str) -> None:
    with pytest.raises(LoweringError, match=message):
        verify_gpu(_kernel_with(scope, n, dtype))
