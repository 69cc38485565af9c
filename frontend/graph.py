"""The graph IR: typed values, operator nodes and the graph the compiler consumes.

The ONNX importer (and later ``nn``) produces a :class:`Graph`; passes rewrite it;
``ember.compile`` turns each node (or fused group of nodes) into a kernel. A value
is a name with a :class:`TensorType` (a shape of ints, or strings for symbolic
dims, and a numpy dtype name). A node names an Ember op (``frontend/ops``), its
input and output values, and normalized attributes: plain hashable Python values
(ints, floats, strings, tuples), so ``(op, attrs, input types)`` keys a kernel
cache. ``params`` holds every constant (initializers, folded subgraphs) by value
name. Nodes are kept in topological order; :meth:`Graph.verify` checks it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.errors import ArgumentError, InternalError
from ember.frontend.narrow_dtypes import NARROW_DTYPES, storage_dtype

if TYPE_CHECKING:
    from ember.frontend.interface import Interface

Dim = int | str

# How a user fixes a symbolic input dim, from Python or from the shell (errors end with it).
SHAPES_HINT = "(shapes={name: shape} in Python, --shape NAME=D0,D1,... on the command line)"

# No 64-bit CPU addresses more than 2**57 bytes (x86-64 with 5-level paging; AArch64
# stops at 2**52), so a tensor larger than this cannot exist on any machine.
MAX_TENSOR_BYTES = 1 << 57

# The element types a graph input may have: what the ONNX importer and ``nn`` tracing take
# (the narrow ones, ml_dtypes' bfloat16, float8, int4..., as ``narrow_dtypes.py`` says).
SUPPORTED_DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", *NARROW_DTYPES,
)  # fmt: skip


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype of a value; a string dim is symbolic (``"batch"``)."""

    shape: tuple[Dim, ...]
    dtype: str

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def size(self) -> int:
        """Number of elements; only for static shapes (exact: Python ints never wrap)."""
        return math.prod(int(d) for d in self.shape)

    @property
    def dims(self) -> tuple[int, ...]:
        """The shape as ints; only for static shapes."""
        return tuple(int(d) for d in self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the values; only for static shapes."""
        return self.size * storage_dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


def check_size(t: TensorType, what: str) -> None:
    """ArgumentError for a type no machine can hold: a negative dim, or more bytes than
    any address space (sizes are exact Python ints, so a huge shape cannot wrap to a small
    byte count). Symbolic dims pass; they are checked once they are fixed."""
    dims = [d for d in t.shape if isinstance(d, int)]
    if any(d < 0 for d in dims):
        raise ArgumentError(f"{what} has a negative dimension: {t}")
    if len(dims) == len(t.shape) and t.nbytes > MAX_TENSOR_BYTES:
        raise ArgumentError(
            f"{what} of type {t} would take {t.nbytes:.3g} bytes, more than any 64-bit "
            f"machine can address (2**57); check the shape"
        )


@dataclass(frozen=True)
class Value:
    """A named tensor in the graph: a graph input, a param or a node output."""

    name: str
    type: TensorType

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype


def node_label(name: str, op_type: str, op: str) -> str:
    """How an error names a node by where it came from: "ONNX node 'conv1' (Conv)", or
    "PyTorch node 'embedding' (aten.embedding)" for what the torch importer made (its
    op types are ATen op packets)."""
    source = "PyTorch" if op_type.startswith("aten.") else "ONNX"
    return f"{source} node '{name}' ({op_type or op})"


@dataclass
class Node:
    """One Ember op applied to values. ``name``/``op_type`` are the ONNX node's, for errors.

    ``group`` is the fused group this node belongs to (None until a fusion pass runs).
    ``absorbed`` names (as :func:`node_label` does) the source nodes a rewrite merged into
    this one, in graph order: the depthwise conv and clip before a fused 1x1 conv, a
    folded batch norm; all of a fused attention's or layer norm's nodes, its namesake's
    own op too, since the fused node's op type is a new one. Errors and profiles then name
    every node a kernel computes, so its time and its failures map back to the model.
    ``subgraphs`` holds the bodies of a control-flow node (``if``: then/else, ``loop``:
    body), each a Graph whose inputs line up with what the host step feeds it; the
    compiler runs such a node on the host (``ember/control_flow.py``), not as a kernel.
    """

    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    op_type: str = ""
    group: int | None = None
    subgraphs: dict[str, Graph] = field(default_factory=dict)
    absorbed: tuple[str, ...] = ()

    def where(self) -> str:
        """How an error names this node: "ONNX node 'conv1' (Conv)", and what was merged
        into it: "ONNX node 'conv_22' (Conv) (fused with ONNX node 'conv_12' (Conv), ...)"."""
        label = node_label(self.name, self.op_type, self.op)
        return f"{label} (fused with {', '.join(self.absorbed)})" if self.absorbed else label

    def attr_key(self) -> tuple[tuple[str, Any], ...]:
        return tuple(sorted(self.attrs.items()))


def merged_labels(nodes: Sequence[Node]) -> tuple[str, ...]:
    """The source-node labels behind ``nodes`` (each one's own and what it absorbed), in
    order: the ``absorbed`` of a node a rewrite makes from them."""
    return tuple(
        label for n in nodes for label in (*n.absorbed, node_label(n.name, n.op_type, n.op))
    )


@dataclass
class Graph:
    """A dataflow graph: ``inputs`` -> ``nodes`` (topological) -> ``outputs``.

    ``values`` types every value by name (inputs, params and node outputs);
    ``params`` holds the constants' data. ``defaults`` holds the value of an input
    that a run may leave out (an ONNX initializer also listed as a graph input, which
    ONNX lets a run override). ``interface`` (an :class:`~ember.frontend.interface.Interface`)
    is set when the ONNX model takes or gives sequences or optionals: how the flat
    ``inputs`` and ``outputs`` group into the model's own; None for all-tensor models.
    """

    inputs: list[Value]
    outputs: list[Value]
    nodes: list[Node]
    params: dict[str, np.ndarray]
    values: dict[str, Value]
    name: str = "main"
    defaults: dict[str, np.ndarray] = field(default_factory=dict)
    interface: Interface | None = None

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [v.name for v in self.outputs]

    def producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                users.setdefault(i, []).append(n)
        return users

    def verify(self) -> Graph:
        """Check names are defined before use, typed, unique; raise InternalError if not."""
        defined = set(self.params) | {v.name for v in self.inputs}
        problems = [f"param '{p}' has no type" for p in self.params if p not in self.values]
        problems += [
            f"input '{v.name}' is also a param" for v in self.inputs if v.name in self.params
        ]
        for n in self.nodes:
            for i in n.inputs:
                if i not in defined:
                    problems.append(f"node '{n.name}' ({n.op}) reads '{i}' before it is defined")
            for o in n.outputs:
                if o in defined:
                    problems.append(f"node '{n.name}' ({n.op}) redefines '{o}'")
                if o not in self.values:
                    problems.append(f"node '{n.name}' ({n.op}) output '{o}' has no type")
                defined.add(o)
        problems += [
            f"output '{v.name}' is never defined" for v in self.outputs if v.name not in defined
        ]
        if problems:
            raise InternalError("invalid graph:\n  " + "\n  ".join(problems))
        return self

    def __str__(self) -> str:
        return format_graph(self)


def _fmt_attr(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return "[" + ", ".join(_fmt_attr(x) for x in v) + "]"
    return repr(v) if isinstance(v, str) else str(v)


def format_node(n: Node, values: dict[str, Value]) -> str:
    """One node as a line of graph text (``%y: f32[4] = relu(%x)``), for dumps and errors."""
    outs = ", ".join(f"%{o}: {values[o].type}" if o in values else f"%{o}" for o in n.outputs)
    attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(n.attrs.items()))
    args = ", ".join(f"%{i}" for i in n.inputs)
    tail = f"  # {n.op_type} '{n.name}'" if n.name else ""
    line = f"{outs} = {n.op}({args}{', ' if args and attrs else ''}{attrs}){tail}"
    for key, sub in n.subgraphs.items():
        line += f"\n    {key}: " + format_graph(sub).replace("\n", "\n    ")
    return line


def format_graph(g: Graph) -> str:
    """Readable text: signature, params, then nodes, indented under their fused group."""
    sig = ", ".join(f"%{v.name}: {v.type}" for v in g.inputs)
    lines = [f"graph {g.name}({sig}) {{"]
    for p, arr in g.params.items():
        lines.append(
            f"  param %{p}: {g.values[p].type}" + (f" = {arr.tolist()}" if arr.size <= 8 else "")
        )
    group = None
    for n in g.nodes:
        if n.group is not None and n.group != group:
            lines.append(f"  group {n.group}:")
        group = n.group
        indent = "    " if n.group is not None else "  "
        lines.append(indent + format_node(n, g.values))
    lines.append(f"  return {', '.join('%' + v.name for v in g.outputs)}")
    lines.append("}")
    return "\n".join(lines)


def topological_order(nodes: Iterable[Node], available: set[str]) -> list[Node]:
    """Nodes sorted so each comes after its inputs' producers (stable); raises on a cycle."""
    pending, done, order = list(nodes), set(available), []
    while pending:
        ready = [n for n in pending if all(i in done for i in n.inputs)]
        if not ready:
            names = ", ".join(f"'{n.name}'" for n in pending[:5])
            raise InternalError(f"graph has a cycle or an undefined value among nodes {names}")
        for n in ready:
            order.append(n)
            done.update(n.outputs)
        taken = {id(n) for n in ready}
        pending = [n for n in pending if id(n) not in taken]
    return order
