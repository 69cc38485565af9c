"""The CPU backend: what every part of Ember asks of an ``llvm`` target, in one place.

``ember.build`` hands it lowered functions: it runs its own TIR passes (loop
versioning for the lanes the vectorizer left guarded) through the common runner,
then generates LLVM IR and machine code (``build.py``). ``ember.compile`` asks it
for its graph passes (the blocked ``NCHWc`` convolution layout, ``conv_layout.py``),
each node's implementation from its strategy table (``strategy.py``: a ``tir/topi``
compute paired with its template's schedule and tuning task), the schedule of each
fused group (those implementations' schedules, the generic one for the rest:
``schedules/generic.py``), and the tuning task of each node. Compiled kernels
may be cached on disk, keyed by the machine the code was generated for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember.backend import ArtifactLoader, ArtifactPacker, Backend
from ember.codegen_llvm import cpu_features, jit
from ember.codegen_llvm.build import build_llvm
from ember.codegen_llvm.conv_layout import alter_conv_layout_tuned, transform_winograd_weights_tuned
from ember.codegen_llvm.step_loop import compiled_step_loop
from ember.codegen_llvm.strategy import CPU_STRATEGY, schedule_group
from ember.frontend.passes.conv1d_as_2d import conv1d_as_2d
from ember.frontend.passes.conv_as_gemm import conv_as_gemm
from ember.frontend.passes.fuse_attention import fuse_attention
from ember.frontend.passes.fuse_cache_append import fuse_cache_append
from ember.frontend.passes.fuse_dw_pointwise import fuse_dw_pointwise
from ember.frontend.passes.fuse_expand_dw_pointwise import fuse_expand_dw_pointwise
from ember.runtime.module import Module
from ember.runtime.step_loop import StepLoop
from ember.tir.schedule.schedule import Schedule
from ember.tir.stmt import PrimFunc
from ember.tir.te.tensor import Tensor
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import Pass
from ember.tuner.strategy import Implementation

if TYPE_CHECKING:  # types only: the graph's value types belong to the frontend
    pass
from ember.tir.transform.vectorize_loops import version_lane_guards


class CPUBackend(Backend):
    """``llvm``: this machine's CPU (or the one ``-mcpu``/``-mtriple`` name)."""

    kind = "llvm"
    strategy = CPU_STRATEGY

    def passes(self, ctx: PassContext) -> list[Pass]:
        # loops the vectorizer left serial for a guard on their lanes run as vectors
        # where the guard holds for every lane (CPU vectors only)
        return [Pass("version_lane_guards", version_lane_guards)]

    def build(self, funcs: Sequence[PrimFunc], ctx: PassContext) -> Module:
        return build_llvm(list(funcs), self.target, ctx=ctx, passes=self.passes(ctx))

    def graph_passes(self, common: Sequence[Pass]) -> tuple[Pass, ...]:
        """``common`` with convs of few input channels as GEMMs before the weight packing
        (which packs their weights), and attention fusion, 1-D convs as 2-D, the convolution
        layout pass and Winograd's compile-time weight transform before dead-code
        elimination (they leave transposes and the NCHW weights unused); a decode step's
        cache append joins its attention after it."""
        names = [p.name for p in common]
        at = names.index("eliminate_dead_code")
        packs = names.index("pack_dense_weights")  # packs the weights conv_as_gemm leaves
        convs = (
            conv1d_as_2d, alter_conv_layout_tuned, transform_winograd_weights_tuned,
            fuse_dw_pointwise, fuse_expand_dw_pointwise,
        )  # fmt: skip
        cpu = (fuse_attention, *convs)
        dce = (common[at], fuse_cache_append)  # after the transposes attention read are gone
        return (*common[:packs], conv_as_gemm, *common[packs:at], *cpu, *dce, *common[at + 1 :])

    def schedule(self, outs: Sequence[Tensor], anchors: Sequence[Implementation] = ()) -> Schedule:
        return schedule_group(list(outs), anchors)

    def cannot_run(self, built_for: dict[str, Any]) -> str | None:
        return cpu_features.host_mismatch(built_for, unknown_ok=True)

    def vector_lanes(self, dtype: str) -> int:
        return cpu_features.vector_unit(self.target).lanes(dtype)

    def tile_row_lanes(self, dtype: str) -> int:
        return cpu_features.vector_unit(self.target).row_lanes(dtype)

    def disk_cache_key(self) -> str | None:
        spec = jit.MachineSpec.from_target(self.target)
        return " ".join([spec.triple, spec.cpu, spec.features, str(spec.opt_level)])

    def artifact_manifest(self, packer: ArtifactPacker) -> dict[str, Any]:
        return {"cpu": cpu_features.built_for(str(self.target))}

    def artifact_loader(
        self, manifest: dict[str, Any], members: dict[str, bytes], path: Path
    ) -> ArtifactLoader | None:
        if isinstance(manifest.get("cpu"), dict):  # files before format 2: unchecked
            cpu_features.check_host(manifest["cpu"], path)
        return None

    def step_loop(self) -> StepLoop | None:
        return compiled_step_loop(self.target)

    def load_templates(self) -> None:
        # start-up cost: the templates load when the tuner first asks for one
        import ember.codegen_llvm.schedules  # noqa: F401  (registers the templates)
