"""The CUDA backend: what every part of Ember asks of a ``cuda`` target, in one place.

``ember.build`` hands it lowered functions: it runs the CUDA pass list
(``pipeline.py``: host/device split, thread reductions, warp memory, swizzles,
pipelining, barriers, limits) through the common runner, prints CUDA C and compiles
it with NVRTC where it is installed (``build.py``). ``ember.compile`` asks it for the
implementation of each node from its strategy table (``strategy.py``: tensor-core
GEMMs for fp16/bf16 on sm_80+), the schedule of each fused group, and the tuning task
of each node.
A compiled model's kernels are stored in ``.ember`` files as TIR, source, cubins and
PTX (``artifact.py``), not as shared objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ember.backend import ArtifactLoader, ArtifactPacker, Backend
from ember.codegen_cuda import device
from ember.codegen_cuda.artifact import CudaLoader, CudaPacker
from ember.codegen_cuda.build import build_cuda, default_arch
from ember.codegen_cuda.pipeline import cuda_passes
from ember.codegen_cuda.strategy import CUDA_STRATEGY, schedule_group
from ember.frontend.passes.fuse_attention import fuse_attention
from ember.runtime.module import Module
from ember.tir.schedule.schedule import Schedule
from ember.tir.stmt import PrimFunc
from ember.tir.te.tensor import Tensor
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import Pass
from ember.tuner.strategy import Implementation

if TYPE_CHECKING:  # types only: the graph's value types belong to the frontend
    pass


class CUDABackend(Backend):
    """``cuda``: an NVIDIA GPU of the architecture ``-arch`` names (else the visible
    device's, else sm_80)."""

    kind = "cuda"
    strategy = CUDA_STRATEGY
    scalars_as_vectors = True
    gpu = True

    @property
    def arch(self) -> str:
        return self.target.arch or default_arch()

    def passes(self, ctx: PassContext) -> list[Pass]:
        return cuda_passes()

    def graph_passes(self, common: Sequence[Pass]) -> tuple[Pass, ...]:
        """``common`` with attention fusion before dead-code elimination (it leaves the
        chain's transposes unused)."""
        names = [p.name for p in common]
        at = names.index("eliminate_dead_code")
        return (*common[:at], fuse_attention, *common[at:])

    def build(self, funcs: Sequence[PrimFunc], ctx: PassContext) -> Module:
        return build_cuda(list(funcs), self.target, ctx=ctx)

    def schedule(self, outs: Sequence[Tensor], anchors: Sequence[Implementation] = ()) -> Schedule:
        return schedule_group(list(outs), anchors)

    def device_available(self) -> bool:
        return device.device_available()

    def load_templates(self) -> None:
        # start-up cost: the templates load when the tuner first asks for one
        import ember.codegen_cuda.schedules  # noqa: F401  (registers the templates)

    def artifact_packer(self, archs: Sequence[str] | None, ptx: bool) -> ArtifactPacker | None:
        return CudaPacker(archs, ptx)

    def artifact_manifest(self, packer: ArtifactPacker) -> dict[str, Any]:
        # the packer is the CudaPacker artifact_packer made for this export
        return {"cuda": cast(CudaPacker, packer).manifest_section()}

    def artifact_loader(
        self, manifest: dict[str, Any], members: dict[str, bytes], path: Path
    ) -> ArtifactLoader | None:
        return CudaLoader(manifest, members, path)
