"""Graph passes, each a pure function ``Graph -> Graph`` in its own module.

``ember.compile`` runs :data:`DEFAULT_PASSES` in this order between import and
kernel building; ``run_graph_passes`` verifies the graph after each one.
(Constant folding happens during import, where each node is made.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.errors import EmberError, InternalError
from ember.frontend.graph import Graph
from ember.frontend.passes.alter_conv_layout import alter_conv_layout, alter_conv_layout_with
from ember.frontend.passes.eliminate_common_subexpr import eliminate_common_subexpr
from ember.frontend.passes.eliminate_dead_code import eliminate_dead_code
from ember.frontend.passes.fold_batch_norm import fold_batch_norm
from ember.frontend.passes.fuse_ops import fuse_ops
from ember.frontend.passes.pack_dense_weights import pack_dense_weights
from ember.frontend.passes.pack_int8_weights import pack_int8_weights

GraphPass = Callable[[Graph], Graph]

DEFAULT_PASSES: tuple[GraphPass, ...] = (
    eliminate_common_subexpr,
    fold_batch_norm,
    pack_dense_weights,
    pack_int8_weights,
    eliminate_dead_code,
    fuse_ops,
)


def run_graph_passes(graph: Graph, passes: Sequence[GraphPass] = DEFAULT_PASSES) -> Graph:
    """Runs graph passes in order, verifying after each; a pass that crashes becomes an
    ``InternalError`` naming it."""
    for p in passes:
        try:
            graph = p(graph)
        except EmberError:
            raise
        except Exception as e:
            raise InternalError(f"graph pass '{p.__name__}' failed: {e}") from e
        graph.verify()
    return graph


__all__ = [
    "DEFAULT_PASSES",
    "alter_conv_layout",
    "alter_conv_layout_with",
    "eliminate_common_subexpr",
    "eliminate_dead_code",
    "fold_batch_norm",
    "fuse_ops",
    "pack_dense_weights",
    "pack_int8_weights",
    "run_graph_passes",
]
