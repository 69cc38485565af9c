"""Common-subexpression elimination: one node for each distinct (op, attrs, inputs).

Expects a verified graph in topological order; gives one where a node equal to an
earlier one (same op, attributes and input values) is gone and its readers read the
earlier node's outputs. Params with the same dtype, shape and bytes are merged
first, so two copies of one constant (exporters write them) count as one input.
Graph outputs keep their names: a duplicate that is an output stays.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from ember.frontend.graph import Graph, Node
from ember.frontend.passes.graph_pass import graph_pass


def _param_key(array) -> tuple:  # noqa: ANN001
    digest = hashlib.sha256(array.tobytes()).hexdigest()
    return (str(array.dtype), array.shape, digest)


@graph_pass
def eliminate_common_subexpr(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes)."""
    outputs = set(graph.output_names)
    rename: dict[str, str] = {}
    first_param: dict[tuple, str] = {}
    for name, array in graph.params.items():
        if name in outputs:  # an output keeps its name, even as a copy of another constant
            rename[name] = name
            continue
        rename[name] = first_param.setdefault(_param_key(array), name)
    seen: dict[tuple, Node] = {}
    kept: list[Node] = []
    for node in graph.nodes:
        inputs = tuple(rename.get(i, i) for i in node.inputs)
        key = (node.op, node.attr_key(), inputs)
        twin = seen.get(key)
        if twin is not None and not any(o in outputs for o in node.outputs):
            rename.update(zip(node.outputs, twin.outputs))
            continue
        new = node if inputs == node.inputs else replace(node, inputs=inputs)
        seen.setdefault(key, new)
        kept.append(new)
    if len(kept) == len(graph.nodes) and all(rename[p] == p for p in graph.params):
        return graph
    params = {p: a for p, a in graph.params.items() if rename[p] == p}
    gone = {n for n, r in rename.items() if r != n}
    values = {n: v for n, v in graph.values.items() if n not in gone}
    return replace(graph, nodes=kept, params=params, values=values)
