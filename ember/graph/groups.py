"""Fused groups: which nodes run as one kernel, what they read and write, their TE compute.

A fusion pass marks each node with its group; :func:`fused_groups` collects the groups in
an order that runs each after the groups it reads from, :func:`group_io` names the values
a group reads and the ones it writes that something outside reads, and
:func:`group_to_te` turns a group into tensor expressions (each node's compute fed the
tensors of the nodes before it). The compile driver builds one kernel per group from
these; :mod:`ember.graph.group_tasks` describes a group as plain JSON (:func:`group_spec`),
so a tuner's worker process can rebuild the same compute and auto-schedule it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from ember.backend import Backend, get_backend
from ember.errors import ArgumentError, EmberError, InternalError
from ember.frontend.graph import Graph, Node, TensorType
from ember.frontend.narrow_dtypes import kernel_dtype
from ember.frontend.ops.registry import get_op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tuner.strategy import Implementation


@dataclass(frozen=True)
class GroupIO:
    """A group's nodes, the values it reads (in first-use order), the values it writes
    that are read outside it or are graph outputs, and the types of all of them."""

    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    types: dict[str, TensorType]


def fused_groups(graph: Graph) -> list[list[Node]]:
    """The nodes of each fused group (a node without a group is a group of its own), the
    groups in an order that runs each after the groups it reads from (topological over
    groups; ties by first node)."""
    members: dict[tuple[str, Any], list[Node]] = {}
    for k, node in enumerate(graph.nodes):
        key = ("g", node.group) if node.group is not None else ("n", k)
        members.setdefault(key, []).append(node)
    keys = list(members)
    group_of = {o: key for key, nodes in members.items() for n in nodes for o in n.outputs}
    needs = {
        key: {group_of[i] for n in nodes for i in n.inputs if i in group_of} - {key}
        for key, nodes in members.items()
    }
    order: list[list[Node]] = []
    done: set[Any] = set()
    while len(order) < len(keys):
        ready = [k for k in keys if k not in done and needs[k] <= done]
        if not ready:
            raise InternalError("fused groups depend on each other in a cycle")
        done.add(ready[0])
        order.append(members[ready[0]])
    return order


def group_io(graph: Graph, nodes: Sequence[Node]) -> GroupIO:
    """What a group of ``graph`` reads and writes (see :class:`GroupIO`)."""
    made = {o for n in nodes for o in n.outputs}
    inputs = tuple(dict.fromkeys(i for n in nodes for i in n.inputs if i not in made))
    inside = {id(n) for n in nodes}
    read_outside = {i for n in graph.nodes if id(n) not in inside for i in n.inputs}
    read_outside |= set(graph.output_names)
    outputs = tuple(o for n in nodes for o in n.outputs if o in read_outside)
    types = {v: graph.values[v].type for v in (*inputs, *made)}
    return GroupIO(tuple(nodes), inputs, outputs, types)


def static_shape(t: TensorType) -> tuple[int, ...]:
    """``t``'s shape, all ints: kernels are built for static shapes only (a symbolic
    dim makes a DynamicModel, which compiles each size it meets)."""
    return cast("tuple[int, ...]", t.shape)


def group_to_te(
    nodes: Sequence[Node],
    inputs: Sequence[str],
    outputs: Sequence[str],
    types: dict[str, TensorType],
    target: Any = "llvm",
    anchors: list[Implementation] | None = None,
) -> tuple[list[Tensor], list[Tensor]]:
    """Placeholders for a fused group's ``inputs`` and the tensors of its ``outputs``: each
    node's compute is fed the tensors of the nodes before it, not placeholders. A node
    takes the compute of the target's best strategy implementation where one applies,
    else the op's own; the implementations taken are appended to ``anchors`` where given
    (the group's schedule runs theirs)."""
    backend: Backend = get_backend(target)
    env: dict[str, Tensor] = {
        v: te.placeholder(static_shape(types[v]), dtype=kernel_dtype(types[v].dtype), name=f"in{i}")
        for i, v in enumerate(inputs)
    }
    placeholders = [env[v] for v in inputs]
    for node in nodes:
        try:
            args = [env[i] for i in node.inputs]
            hit = backend.compute(node.op, args, node.attrs)
            if hit is None:
                outs = get_op(node.op).compute(args, node.attrs)
            else:
                outs = hit[0]
                if anchors is not None:
                    anchors.append(hit[1])
        except EmberError as e:
            raise e.add_context(f"while computing {node.where()}") from None
        except Exception as e:
            raise InternalError(f"compute of op '{node.op}' failed: {e}") from e
        env.update(zip(node.outputs, outs))
    return placeholders, [env[v] for v in outputs]


# -- a group as plain JSON ------------------------------------------------------------------
SPEC_VERSION = 1


def _attr_to_json(v: Any) -> Any:
    if isinstance(v, tuple):
        return {"tuple": [_attr_to_json(x) for x in v]}
    if isinstance(v, list):
        return [_attr_to_json(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return {"float": repr(v)}
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    raise ArgumentError(f"a node attribute of type {type(v).__name__} has no JSON form")


def _attr_from_json(v: Any) -> Any:
    if isinstance(v, dict) and "tuple" in v:
        return tuple(_attr_from_json(x) for x in v["tuple"])
    if isinstance(v, dict) and "float" in v:
        return float(v["float"])
    if isinstance(v, list):
        return [_attr_from_json(x) for x in v]
    return v


def group_spec(io: GroupIO) -> str:
    """The group's computation as canonical JSON, without its value or node names: equal
    groups (a repeated layer) give the same text, which names the tuning workload."""
    local = {v: f"v{k}" for k, v in enumerate(io.inputs)}
    body = []
    for node in io.nodes:
        for o in node.outputs:
            local[o] = f"v{len(local)}"
        body.append(
            {
                "op": node.op,
                "attrs": {k: _attr_to_json(v) for k, v in sorted(node.attrs.items())},
                "in": [local[i] for i in node.inputs],
                "out": [local[o] for o in node.outputs],
            }
        )
    types = {local[v]: [list(t.shape), t.dtype] for v, t in io.types.items()}
    data = {
        "version": SPEC_VERSION,
        "inputs": [local[v] for v in io.inputs],
        "outputs": [local[v] for v in io.outputs],
        "types": dict(sorted(types.items(), key=lambda kv: int(kv[0][1:]))),
        "nodes": body,
    }
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def group_from_spec(spec: str) -> GroupIO:
    """The group a :func:`group_spec` text describes (nodes named ``n0``, ``n1``...)."""
    try:
        data = json.loads(spec)
        if data.get("version") != SPEC_VERSION:
            raise ArgumentError(
                f"a fused-group spec of version {data.get('version')!r}; this Ember reads "
                f"version {SPEC_VERSION}"
            )
        nodes = tuple(
            Node(
                n["op"],
                f"n{k}",
                tuple(n["in"]),
                tuple(n["out"]),
                {a: _attr_from_json(v) for a, v in n["attrs"].items()},
                n["op"],
            )
            for k, n in enumerate(data["nodes"])
        )
        types = {v: TensorType(tuple(s), d) for v, (s, d) in data["types"].items()}
        return GroupIO(nodes, tuple(data["inputs"]), tuple(data["outputs"]), types)
    except (ValueError, KeyError, TypeError) as e:
        raise ArgumentError(f"a malformed fused-group spec: {type(e).__name__}: {e}") from e
