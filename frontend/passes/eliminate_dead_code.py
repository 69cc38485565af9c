"""Dead-code elimination: drop nodes no graph output depends on, and unread params.

Expects a verified graph; gives a graph whose every node and param feeds an output
(graph inputs stay, even unread: they are the model's signature).
"""

from __future__ import annotations

from dataclasses import replace

from ember.frontend.graph import Graph
from ember.frontend.passes.graph_pass import graph_pass


@graph_pass
def eliminate_dead_code(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes)."""
    live = set(graph.output_names)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs):
            kept.append(node)
            live.update(node.inputs)
    kept.reverse()
    if len(kept) == len(graph.nodes) and all(p in live for p in graph.params):
        return graph
    params = {p: a for p, a in graph.params.items() if p in live}
    names = live | set(graph.input_names) | {o for n in kept for o in n.outputs}
    values = {n: v for n, v in graph.values.items() if n in names}
    return replace(graph, nodes=kept, params=params, values=values)
