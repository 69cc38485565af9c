"""Entry of the CUDA backend: a lowered GPU PrimFunc in, a :class:`CUDAModule` out.

``build_cuda`` is what :func:`ember.build` calls for ``target="cuda"``. It runs
the CUDA pass list (:mod:`.pipeline`: cut the function into kernels,
software-pipeline the shared stages marked for it, place barriers, check the
kernels against the architecture) through the common runner under a context
carrying the architecture, prints CUDA C and, when NVRTC is installed, compiles
it right away so a compile error surfaces at build time. Without cuda-python the
module still builds, prints and emulates.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.codegen_cuda.module import CUDAModule
from ember.codegen_cuda.pipeline import DEFAULT_ARCH, cuda_passes
from ember.target import Target
from ember.tir import stmt as S
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import run_passes


def default_arch() -> str:
    """The visible device's architecture, else ``sm_80``."""
    try:
        from ember.codegen_cuda.device import visible_arch  # type: ignore[import-not-found]
    except ImportError:
        return DEFAULT_ARCH
    return visible_arch() or DEFAULT_ARCH


def build_cuda(
    func: S.PrimFunc,
    target: Target,
    disabled_passes: Sequence[str] = (),
    ctx: PassContext | None = None,
) -> CUDAModule:
    arch = target.arch or default_arch()
    ctx = (ctx or PassContext.current()).with_disabled(disabled_passes).with_target(target, arch)
    program = run_passes(func, cuda_passes(), ctx, first_step=50)
    fast_math = target.get("fast-math", "0") not in ("0", "")
    module = CUDAModule(program, arch, fast_math)
    module.compile_if_available()
    return module
