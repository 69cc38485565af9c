"""Entry of the CUDA backend: lowered GPU PrimFuncs in, one :class:`CUDAModule` out.

``build_cuda`` is what :func:`ember.build` calls for ``target="cuda"``. For each
function it runs the CUDA pass list (:mod:`.pipeline`: cut the function into
kernels, lower cross-thread reductions, software-pipeline the shared stages
marked for it, place barriers, check the kernels against the architecture)
through the common runner under a context carrying the architecture; then it
prints CUDA C and, when NVRTC is installed, compiles it right away so a compile
error surfaces at build time. Without cuda-python the module still builds,
prints and emulates.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ember.codegen_cuda import device
from ember.codegen_cuda.module import CUDAModule
from ember.codegen_cuda.pipeline import DEFAULT_ARCH, cuda_passes
from ember.errors import ArgumentError
from ember.target import Target
from ember.tir import stmt as S
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import run_passes


def default_arch() -> str:
    """The visible device's architecture, else ``sm_80``."""
    return device.visible_arch() or DEFAULT_ARCH


def build_cuda(
    funcs: S.PrimFunc | Sequence[S.PrimFunc],
    target: Target,
    disabled_passes: Sequence[str] = (),
    ctx: PassContext | None = None,
) -> CUDAModule:
    """Compile lowered functions into one CUDA module (one source, one NVRTC program);
    each function is an entry point with its own kernels and launch list."""
    arch = target.arch or default_arch()
    ctx = (ctx or PassContext.current()).with_disabled(disabled_passes).with_target(target, arch)
    func_list = [funcs] if isinstance(funcs, S.PrimFunc) else list(funcs)
    programs = [run_passes(f, cuda_passes(), ctx, first_step=50) for f in func_list]
    fast_math = target.flag("fast-math")
    module = CUDAModule(programs, arch, fast_math)
    module.compile_if_available()
    out_dir = ctx.get("cuda.kernels_output_dir")
    if out_dir is not None:
        save_kernels(module, out_dir)
    return module


def save_kernels(module: CUDAModule, out_dir: str) -> None:
    """TVM's ``cuda.kernels_output_dir``: the module's CUDA source as ``tvm_kernels.cu`` (and
    its PTX as ``tvm_kernels.ptx`` when NVRTC is installed), for profilers and reading."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "tvm_kernels.cu"), "w") as f:
            f.write(module.cuda_source())
        if module._compiled is not None:  # compiled at build when NVRTC is installed
            with open(os.path.join(out_dir, "tvm_kernels.ptx"), "w") as f:
                f.write(module._compiled.ptx)
    except OSError as e:
        raise ArgumentError(f"cuda.kernels_output_dir: cannot write into {out_dir!r}: {e}") from e
