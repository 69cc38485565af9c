"""Graph passes, each a pure function ``Graph -> Graph`` in its own module.

Each is a named graph :class:`~ember.tir.transform.runner.Pass` (``@graph_pass``,
``graph_pass.py``), run by the one runner the TIR passes use: ``ember.compile`` runs
:data:`DEFAULT_PASSES` in this order between import and kernel building, and the
target's additions (the CPU's ``alter_conv_layout``). ``run_graph_passes`` verifies the
graph after each pass, skips the passes the current ``PassContext`` disables by name,
calls its instruments, times and dumps (``EMBER_DUMP_DIR``) each pass, and turns a crash
into an ``InternalError`` naming the pass. (Constant folding happens during import,
where each node is made.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.frontend.graph import Graph
from ember.frontend.passes.alter_conv_layout import alter_conv_layout, alter_conv_layout_with
from ember.frontend.passes.conv1d_as_2d import conv1d_as_2d
from ember.frontend.passes.conv_as_gemm import conv_as_gemm
from ember.frontend.passes.eliminate_common_subexpr import eliminate_common_subexpr
from ember.frontend.passes.eliminate_dead_code import eliminate_dead_code
from ember.frontend.passes.fold_batch_norm import fold_batch_norm
from ember.frontend.passes.fuse_attention import fuse_attention
from ember.frontend.passes.fuse_gelu import fuse_gelu
from ember.frontend.passes.fuse_layer_norm import fuse_layer_norm
from ember.frontend.passes.fuse_ops import fuse_ops
from ember.frontend.passes.graph_pass import GRAPH, as_graph_pass, graph_pass
from ember.frontend.passes.pack_dense_weights import pack_dense_weights
from ember.frontend.passes.pack_int8_weights import pack_int8_weights
from ember.frontend.passes.winograd_weights import transform_winograd_weights_with
from ember.tir.transform.context import PassContext
from ember.tir.transform.runner import Pass, run_passes

DEFAULT_PASSES: tuple[Pass, ...] = (
    eliminate_common_subexpr,
    fold_batch_norm,
    fuse_layer_norm,
    fuse_gelu,
    pack_dense_weights,
    pack_int8_weights,
    eliminate_dead_code,
    fuse_ops,
)


def run_graph_passes(
    graph: Graph,
    passes: Sequence[Any] = DEFAULT_PASSES,
    ctx: PassContext | None = None,
    timings: dict[str, float] | None = None,
) -> Graph:
    """``passes`` (graph passes, or plain functions ``Graph -> Graph``) applied in order
    under ``ctx`` (the current context when None), the graph verified after each."""
    out: Graph = run_passes(graph, [as_graph_pass(p) for p in passes], ctx, True, timings)
    return out


__all__ = [
    "DEFAULT_PASSES",
    "GRAPH",
    "alter_conv_layout",
    "alter_conv_layout_with",
    "transform_winograd_weights_with",
    "as_graph_pass",
    "eliminate_common_subexpr",
    "eliminate_dead_code",
    "fold_batch_norm",
    "conv1d_as_2d",
    "conv_as_gemm",
    "fuse_attention",
    "fuse_gelu",
    "fuse_layer_norm",
    "fuse_ops",
    "graph_pass",
    "pack_dense_weights",
    "pack_int8_weights",
    "run_graph_passes",
]
