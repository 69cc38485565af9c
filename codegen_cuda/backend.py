"""The CUDA backend: what every part of Ember asks of a ``cuda`` target, in one place.

``ember.build`` hands it lowered functions: it runs the CUDA pass list
(``pipeline.py``: host/device split, thread reductions, warp memory, swizzles,
pipelining, barriers, limits) through the common runner, prints CUDA C and compiles
it with NVRTC where it is installed (``build.py``). ``ember.compile`` asks it for the
compute of each node's implementation (``schedules/strategy.py``: tensor-core GEMMs
for fp16/bf16), the schedule of each fused group, and the tuning task of each node.
A compiled model's kernels are stored in ``.ember`` files as TIR, source, cubins and
PTX (``artifact.py``), not as shared objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ember.backend import Backend
from ember.codegen_cuda import device
from ember.codegen_cuda.artifact import CudaLoader, CudaPacker
from ember.codegen_cuda.build import build_cuda, default_arch
from ember.codegen_cuda.pipeline import cuda_passes
from ember.codegen_cuda.schedules import strategy
from ember.graph_schedule import schedule_cuda  # moves beside the CUDA templates
from ember.runtime.module import Module
from ember.tir.stmt import PrimFunc
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import Pass


class CUDABackend(Backend):
    """``cuda``: an NVIDIA GPU of the architecture ``-arch`` names (else the visible
    device's, else sm_80)."""

    kind = "cuda"
    scalars_as_vectors = True
    gpu = True

    @property
    def arch(self) -> str:
        return self.target.arch or default_arch()

    def passes(self, ctx: PassContext) -> list[Pass]:
        return cuda_passes()

    def build(self, funcs: Sequence[PrimFunc], ctx: PassContext) -> Module:
        return build_cuda(list(funcs), self.target, ctx=ctx)

    def compute(self, op: str, args: list[Any], attrs: dict[str, Any]) -> list[Any] | None:
        return strategy.compute_for(op, args, attrs, self.target.arch)

    def schedule(self, outs: Sequence[Any]) -> Any:
        return schedule_cuda(list(outs))

    def task_for(self, op: str, in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
        return strategy.task_for(op, in_types, attrs, self.target.arch)

    def device_available(self) -> bool:
        return device.device_available()

    def load_templates(self) -> None:
        import ember.codegen_cuda.schedules  # noqa: F401  (registers the templates)

    def artifact_packer(self, archs: Sequence[str] | None, ptx: bool) -> Any:
        return CudaPacker(archs, ptx)

    def artifact_manifest(self, packer: Any) -> dict[str, Any]:
        return {"cuda": packer.manifest_section()}

    def artifact_loader(
        self, manifest: dict[str, Any], members: dict[str, bytes], path: Path
    ) -> Any:
        return CudaLoader(manifest, members, path)
