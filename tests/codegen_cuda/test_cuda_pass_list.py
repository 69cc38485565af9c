"""The CUDA pass list runs through the common runner: per-kernel dumps and IR checks, error
wrapping naming the pass and kernel, the arch from the context, and TVM's pass names."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen_cuda import pipeline
from ember.codegen_cuda.pipeline import cuda_passes
from ember.errors import InternalError, LoweringError
from ember.tir.transform.pipeline import Pass
from ember.transform import PassContext
from tests.codegen_cuda.gpu_schedules import tiled_matmul
from tests.numerics import assert_close, random_array


def _two_kernels(n: int = 300):  # type: ignore[no-untyped-def]
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    for t in (B, C):
        bx, tx = s[t].split(t.op.axis[0], factor=64)
        s[t].bind(bx, te.thread_axis("blockIdx.x"))
        s[t].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, C]


def test_the_list_is_literal_and_ordered():
    names = [p.name for p in cuda_passes()]
    assert names == [
        "split_host_device",
        "lower_thread_allreduce",
        "lower_warp_memory",
        "swizzle_shared",
        "inject_pipeline",
        "inject_sync",
        "verify_gpu",
    ]
    assert [p.name for p in cuda_passes() if p.required] == [
        "split_host_device",
        "lower_thread_allreduce",
        "lower_warp_memory",
        "swizzle_shared",
        "verify_gpu",
    ]
    assert cuda_passes()[0].scope == "module"


def test_dumps_each_cuda_pass_per_kernel(tmp_path, monkeypatch, rng):
    monkeypatch.setenv("EMBER_DUMP_DIR", str(tmp_path))
    s, args = _two_kernels()
    mod = ember.build(s, args, target="cuda")
    names = sorted(p.name for p in tmp_path.iterdir())
    kernels = sorted({n.split(".")[0] for n in names if n.endswith(".split_host_device.after.tir")})
    assert len(kernels) == 2
    for k in kernels:
        for p in cuda_passes():
            assert any(n.startswith(f"{k}.") and f".{p.name}.after" in n for n in names), p.name
    a = random_array((300,), "float32", rng)
    c = np.full(300, np.nan, "float32")
    mod.emulate(a, c)
    assert_close(c, a * 3.0 + 1.0, "float32")


def _swap_pass(monkeypatch, name: str, fn) -> None:  # type: ignore[no-untyped-def]
    original = pipeline.cuda_passes

    def patched() -> list[Pass]:
        return [
            Pass(name, fn, p.required, p.opt_level, p.scope) if p.name == name else p
            for p in original()
        ]

    monkeypatch.setattr(pipeline, "cuda_passes", patched)
    monkeypatch.setattr("ember.codegen_cuda.build.cuda_passes", patched)


def test_a_crash_in_a_cuda_pass_is_an_internal_error_naming_pass_and_kernel(monkeypatch):
    def crash(kernel):  # type: ignore[no-untyped-def]
        raise KeyError("boom")

    _swap_pass(monkeypatch, "inject_sync", crash)
    s, args = _two_kernels()
    with pytest.raises(InternalError, match=r"pass 'inject_sync' failed on function 'main_kernel"):
        ember.build(s, args, target="cuda")


def test_the_ir_is_checked_after_each_cuda_pass(monkeypatch):
    from ember.tir import stmt as S
    from ember.tir.functor import Mutator

    class UseUndefined(Mutator):  # a store of a variable nothing defines: ill-formed
        def visit_BufferStore(self, st: S.BufferStore) -> S.Stmt:
            from ember.tir import expr as E

            return S.BufferStore(st.buffer, E.Var("ghost", st.value.dtype), st.indices)

    _swap_pass(monkeypatch, "inject_sync", lambda k: UseUndefined().visit_func(k))
    s, args = _two_kernels()
    with pytest.raises(InternalError, match="inject_sync"):
        ember.build(s, args, target="cuda")


def test_tvm_pass_names_disable_cuda_passes(rng):
    s, args = tiled_matmul(32, 32, 32, tile=16)
    with PassContext(disabled_pass=["tir.ThreadSync"]):
        mod = ember.build(s, args, target="cuda -arch=sm_80")
    assert "__syncthreads" not in mod.get_source("cuda")
    a, b = random_array((32, 32), "float32", rng), random_array((32, 32), "float32", rng)
    with pytest.raises(ember.RaceError):
        mod.emulate(a, b, np.empty((32, 32), "float32"))


def test_the_arch_travels_in_the_context(monkeypatch):
    seen: list[str | None] = []

    def record(kernel, ctx):  # type: ignore[no-untyped-def]
        seen.append(ctx.arch)
        return kernel

    original = pipeline.cuda_passes

    def patched() -> list[Pass]:
        return [*original(), Pass("record", record, uses_context=True)]

    monkeypatch.setattr("ember.codegen_cuda.build.cuda_passes", patched)
    s, args = _two_kernels()
    ember.build(s, args, target="cuda -arch=sm_75")
    ember.build(s, args, target="cuda -arch=sm_90")
    assert seen == ["sm_75", "sm_75", "sm_90", "sm_90"]


def test_verify_gpu_errors_name_the_pass(rng):
    n = 4096
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=2048)  # more threads than a block may have
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(LoweringError, match="verify_gpu"):
        ember.build(s, [A, B], target="cuda")
