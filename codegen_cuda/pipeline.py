"""The CUDA target's pass list, run by the common runner after the target-independent list.

``split_host_device`` is a module pass: it turns the lowered function into a
:class:`~ember.codegen_cuda.transform.split_host_device.DeviceProgram` of kernels
(one per root stage nest) and launches. Every later pass is a function pass, so
the runner applies it to each kernel in turn, with the same checks, dumps,
timings and error wrapping as the common passes. Target facts — the
architecture — come from the :class:`PassContext` the build made
(``ctx.with_target(target, arch)``), not from extra arguments.
"""

from __future__ import annotations

from ember.codegen_cuda.transform.inject_pipeline import inject_pipeline
from ember.codegen_cuda.transform.inject_sync import inject_sync
from ember.codegen_cuda.transform.lower_thread_allreduce import lower_thread_allreduce
from ember.codegen_cuda.transform.lower_warp_memory import lower_warp_memory
from ember.codegen_cuda.transform.split_host_device import split_host_device
from ember.codegen_cuda.transform.swizzle_shared import swizzle_shared
from ember.codegen_cuda.transform.verify_gpu import verify_gpu
from ember.tir.stmt import PrimFunc
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import Pass

DEFAULT_ARCH = "sm_80"


def _arch(ctx: PassContext) -> str:
    return ctx.arch or DEFAULT_ARCH


def _inject_pipeline(kernel: PrimFunc, ctx: PassContext) -> PrimFunc:
    return inject_pipeline(kernel, _arch(ctx))


def _verify_gpu(kernel: PrimFunc, ctx: PassContext) -> PrimFunc:
    """The target's ``-max-threads-per-block`` / ``-max-shared-memory-per-block`` (checked
    positive integers by ``Target.parse``) replace the architecture's limits."""
    target = ctx.target
    threads = target.get("max-threads-per-block") if target is not None else None
    shared = target.get("max-shared-memory-per-block") if target is not None else None
    return verify_gpu(
        kernel, _arch(ctx), int(threads) if threads else None, int(shared) if shared else None
    )


def cuda_passes() -> list[Pass]:
    """The CUDA passes, in order."""
    return [
        Pass("split_host_device", split_host_device, required=True, scope="module"),
        # required: it gives the thread_allreduce marks their meaning
        Pass("lower_thread_allreduce", lower_thread_allreduce, required=True),
        # required: a warp buffer has no meaning to the printer or the emulator
        Pass("lower_warp_memory", lower_warp_memory, required=True),
        # required: the writers and the readers of a swizzled tile must agree
        Pass("swizzle_shared", swizzle_shared, required=True),
        Pass("inject_pipeline", _inject_pipeline, uses_context=True),
        Pass("inject_sync", inject_sync),
        Pass("verify_gpu", _verify_gpu, required=True, uses_context=True),
    ]


__all__ = ["cuda_passes"]
