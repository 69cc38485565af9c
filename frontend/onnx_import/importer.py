"""ONNX -> Ember graph: load and check the model, then convert node by node.

``from_onnx`` takes a path, bytes or a ``ModelProto``. It rejects a malformed model
with :class:`InvalidModelError`, lists every operator it cannot convert in one
:class:`UnsupportedOperatorError`, turns initializers and ``Constant`` nodes into
params, fixes symbolic input dims from ``shapes``, and runs each node's converter
(``onnx_import/registry.py``) in order; converters fold constant subgraphs as they
go, so what reaches the compiler is the data path only.

Where the file and the graph disagree it follows onnxruntime: a dim written -1, '' or
'?' is a symbol of its own; an initializer also listed as an input is an input with a
default; a declared output dtype the graph does not make is refused (a differing shape
warns); an opset newer than Ember knows warns; raw data shorter than its tensor is an
:class:`InvalidModelError` naming the tensor and its file.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ember.errors import (
    ArgumentError,
    EmberError,
    InternalError,
    InvalidModelError,
    UnsupportedOperatorError,
)
from ember.frontend.graph import Graph, TensorType, Value, check_size
from ember.frontend.interface import TENSOR, Interface, Port
from ember.frontend.onnx_import.boundary import add_input, bind_output, structured_type
from ember.frontend.onnx_import.context import ConvertContext, GraphBuilder, tensor_array
from ember.frontend.onnx_import.declared import declared_dim as _dim
from ember.frontend.onnx_import.declared import elem_dtype as _elem_dtype
from ember.frontend.onnx_import.declared import opsets as _opsets
from ember.frontend.onnx_import.declared import subgraphs_of
from ember.frontend.onnx_import.file_checks import (
    check_data_length,
    check_declared_outputs,
    check_opset,
)
from ember.frontend.onnx_import.registry import find_converter
from ember.frontend.onnx_import.sequences import Bound, EmptyOptional, SequenceValue
from ember.frontend.string_tensors import STRING, is_string_array


def _onnx() -> Any:
    try:
        # optional dependency: onnx
        import onnx
    except ImportError as e:
        raise EmberError(
            "importing ONNX models needs the 'onnx' package: pip install ember[onnx]"
        ) from e
    return onnx


def read_model_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the ONNX file at ``path`` (what a compile's disk cache hashes, then
    parses: the file is read once, so the key always names what was compiled)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidModelError(f"cannot read ONNX model '{path}': {e}") from e


def load_model(model: Any, data: bytes | None = None) -> Any:
    """A checked ``ModelProto`` from a path, bytes or a ModelProto; ``data``: the bytes of
    the file at path ``model`` where the caller has read them already."""
    onnx = _onnx()
    checked: Any = None  # what the checker reads: the bytes parsed where they are the model
    if isinstance(model, (str, os.PathLike)):
        path = model
        checked = read_model_file(path) if data is None else data
        model = _parse(onnx, checked, str(path))
        if _load_external_data(model, str(path)):
            checked = None  # the bytes lack the weights read in
    elif isinstance(model, (bytes, bytearray)):
        checked = bytes(model)
        model = _parse(onnx, checked, "<bytes>")
    elif not isinstance(model, onnx.ModelProto):
        raise ArgumentError(
            f"expected an ONNX path, bytes or ModelProto, got {type(model).__name__}"
        )
    try:
        # checking a proto serializes it again first: 0.3 s of ResNet-50's, its bytes 0.03 s
        onnx.checker.check_model(model if checked is None else checked)
    except Exception as e:  # onnx.checker.ValidationError and friends
        raise InvalidModelError(f"the ONNX model is not valid: {e}") from e
    return model


def _load_external_data(model: Any, path: str) -> bool:
    """Initializers kept in files beside the model (models over 2 GB) are read in; whether
    there were any."""
    # optional dependency: onnx
    from onnx import external_data_helper as ext

    if not any(ext.uses_external_data(t) for t in _all_initializers(model.graph)):
        return False
    base = os.path.dirname(os.path.abspath(path))
    files = [
        (t, os.path.join(base, ext.ExternalDataInfo(t).location))
        for t in _all_initializers(model.graph)
        if ext.uses_external_data(t)
    ]
    try:
        ext.load_external_data_for_model(model, base)
    except Exception as e:  # missing or short data files
        raise InvalidModelError(f"cannot read the external data of '{path}': {e}") from e
    for t, file in files:  # the same messages, now holding the data read
        check_data_length(t, f"its external data file '{file}'")
    return True


def _all_initializers(graph: Any) -> list[Any]:
    """The initializers of ``graph`` and, depth first, of every subgraph."""
    out = list(graph.initializer)
    for node in graph.node:
        for sub in subgraphs_of(node):
            out.extend(_all_initializers(sub))
    return out


def _parse(onnx: Any, data: bytes, where: str) -> Any:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # google.protobuf.message.DecodeError
        raise InvalidModelError(
            f"'{where}' is not an ONNX model (truncated or corrupt): {e}"
        ) from e
    if not model.HasField("graph"):
        raise InvalidModelError(f"'{where}' holds no ONNX graph (truncated or not an ONNX file)")
    return model


def _all_nodes(graph: Any) -> list[Any]:
    """The graph's nodes and, depth first, those of every subgraph."""
    out = []
    for node in graph.node:
        out.append(node)
        for sub in subgraphs_of(node):
            out.extend(_all_nodes(sub))
    return out


def check_supported(model: Any) -> None:
    """Raise one UnsupportedOperatorError naming every op type Ember cannot convert
    (in the main graph and in every subgraph)."""
    opsets = _opsets(model)
    missing: dict[str, list[str]] = {}
    for i, node in enumerate(_all_nodes(model.graph)):
        domain = "" if node.domain == "ai.onnx" else node.domain
        version = opsets.get(domain, 1)
        if find_converter(node.op_type, domain, version) is None:
            key = f"{domain + '.' if domain else ''}{node.op_type} (opset {version})"
            missing.setdefault(key, []).append(node.name or f"#{i}")
    if missing:
        lines = [
            f"  {k}: {', '.join(repr(n) for n in names)}" for k, names in sorted(missing.items())
        ]
        raise UnsupportedOperatorError(
            f"the model uses {len(missing)} operator type(s) Ember does not support:\n"
            + "\n".join(lines)
        )


def _value_type(vi: Any, shapes: Mapping[str, Sequence[int]]) -> TensorType:
    """An input's type; ``shapes[name]`` fixes its symbolic dims (and must fit the known ones)."""
    dtype = _elem_dtype(vi)
    tt = vi.type.tensor_type
    fixed = tuple(int(s) for s in shapes[vi.name]) if vi.name in shapes else None
    if not tt.HasField("shape"):
        if fixed is None:
            raise ArgumentError(
                f"input '{vi.name}' has no shape in the model; pass shapes={{'{vi.name}': ...}}"
            )
        check_size(TensorType(fixed, dtype), f"input '{vi.name}'")
        return TensorType(fixed, dtype)
    dims = [_dim(vi.name, k, d) for k, d in enumerate(tt.shape.dim)]
    if fixed is not None:
        if len(fixed) != len(dims) or any(
            isinstance(a, int) and a != b for a, b in zip(dims, fixed)
        ):
            raise ArgumentError(
                f"shapes['{vi.name}'] = {list(fixed)} does not fit the model's {dims}"
            )
        dims = list(fixed)
    out = TensorType(tuple(dims), dtype)
    check_size(out, f"input '{vi.name}'")
    return out


def from_onnx(model: Any, shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import an ONNX model as an Ember :class:`Graph` (see the module docstring).

    ``shapes`` fixes symbolic input dims, and specializes sequence and optional inputs:
    ``shapes["x"]`` lists the shapes of sequence ``x``'s elements (one per element), and
    is None for an optional input left empty, else its tensor's shape (or its sequence's
    element shapes). Such inputs and outputs become flat tensors (``x[0]``, ``x[1]``, ...),
    and ``Graph.interface`` says how they group (``frontend/interface.py``).

    An initializer also listed as a graph input (IR version 4 on) is an input a run may
    override, its data the default (``Graph.defaults``), as onnxruntime has it; it then
    does not fold as a constant. Where Ember needs its value at compile time (a Reshape's
    shape), the model is imported again with it as a constant, with a warning."""
    proto = load_model(model)
    check_supported(proto)
    check_opset(proto)
    shapes = dict(shapes or {})
    overridable = overridable_initializers(proto)
    try:
        graph = _convert(proto, shapes, overridable)
    except EmberError as first:
        if not overridable:
            raise
        graph = _convert(proto, shapes, set())  # raises its own error for a wrong model
        warnings.warn(
            f"initializer(s) {sorted(overridable)} are listed as graph inputs, but Ember "
            f"needs them as constants ({first.message}); they cannot be overridden at run time",
            UserWarning,
            stacklevel=2,
        )
    check_declared_outputs(proto, graph)
    return graph


def overridable_initializers(proto: Any) -> set[str]:
    """Initializers a run may override: those also listed as graph inputs, from IR version
    4 on (before it, every initializer was listed and none could be; onnxruntime agrees)."""
    if proto.ir_version < 4:
        return set()
    listed = {vi.name for vi in proto.graph.input}
    return {t.name for t in proto.graph.initializer if t.name in listed}


def _convert(proto: Any, shapes: dict[str, Sequence[int]], overridable: set[str]) -> Graph:
    """The graph of ``proto``; ``overridable`` initializers become inputs with defaults."""
    g = proto.graph
    reserved = {v for n in _all_nodes(g) for v in (*n.input, *n.output)} | {i.name for i in g.input}
    b = GraphBuilder(reserved)
    env: dict[str, Bound] = {}
    defaults: dict[str, np.ndarray] = {}
    for init in g.initializer:
        check_data_length(init, "the model")
        if init.name in overridable:
            defaults[init.name] = tensor_array(init)
        else:
            env[init.name] = b.add_param(init.name, tensor_array(init))
    inputs, in_ports = _add_inputs(g, b, env, shapes, defaults)
    # a listed initializer imported as a constant (see from_onnx) may still be named
    unknown = set(shapes) - {vi.name for vi in g.input}
    if unknown:
        raise ArgumentError(
            f"shapes names unknown inputs {sorted(unknown)}; inputs: {[v.name for v in inputs]}"
        )
    opsets = _opsets(proto)
    for index, node in enumerate(g.node):
        convert_node(node, node.name or f"{node.op_type}_{index}", env, b, opsets)
    outputs, out_ports = _bind_outputs(g, env, b)
    name = g.name or "main"
    graph = Graph(inputs, outputs, b.nodes, b.params, b.values, name=name, defaults=defaults)
    if any(p.kind != TENSOR for p in (*in_ports, *out_ports)):  # a sequence, an empty optional
        graph.interface = Interface(tuple(in_ports), tuple(out_ports))
    return graph.verify()


def _add_inputs(
    g: Any, b: GraphBuilder, env: dict[str, Bound], shapes: Mapping[str, Any], defaults: dict
) -> tuple[list[Value], list[Port]]:
    """The graph inputs (a sequence or optional input flattened to its tensors, as
    ``shapes`` specializes it: ``boundary.py``), each bound in ``env``, and their ports."""
    inputs: list[Value] = []
    ports = []
    for vi in g.input:
        if vi.name in env:
            continue
        structured = structured_type(vi)
        if structured is not None:
            flat, port = add_input(b, env, vi.name, structured, shapes)
            inputs += flat
            ports.append(port)
            continue
        inputs.append(b.add_input(vi.name, _input_type(vi, shapes, defaults.get(vi.name))))
        env[vi.name] = vi.name
        ports.append(Port(vi.name, TENSOR, (vi.name,)))
    return inputs, ports


def _bind_outputs(g: Any, env: dict[str, Bound], b: GraphBuilder) -> tuple[list[Value], list[Port]]:
    """The graph outputs (a sequence flattened to its tensors, an empty optional to none)
    and their ports."""
    outputs: list[Value] = []
    ports = []
    for o in g.output:
        value = env.get(o.name)
        if isinstance(value, (SequenceValue, EmptyOptional)):
            flat, port = bind_output(o.name, value, o, b)
        else:
            flat = [_bind_output(o.name, env, b)]
            port = Port(o.name, TENSOR, (flat[0].name,))
        outputs += flat
        ports.append(port)
    return outputs, ports


def _input_type(vi: Any, shapes: Mapping[str, Sequence[int]], default: Any) -> TensorType:
    """An input's type: declared (``_value_type``), or its default's for an overridable
    initializer (whose data fixes the shape a run must give)."""
    if default is None:
        return _value_type(vi, shapes)
    dtype = STRING if is_string_array(default) else str(default.dtype)
    t = TensorType(tuple(int(d) for d in default.shape), dtype)
    if vi.name in shapes and tuple(int(d) for d in shapes[vi.name]) != t.shape:
        raise ArgumentError(
            f"shapes['{vi.name}'] = {list(shapes[vi.name])} does not fit the shape of its "
            f"initializer {list(t.shape)}"
        )
    return t


def convert_node(
    node: Any, name: str, env: dict[str, Bound], b: GraphBuilder, opsets: dict[str, int]
) -> None:
    """Convert one ONNX node into ``b``, binding its outputs in ``env`` (also used for the
    nodes of subgraphs, with their own env and builder); ``name`` is how errors call it."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    opset = opsets.get(domain, 1)
    rule = find_converter(node.op_type, domain, opset)
    assert rule is not None  # check_supported ran first
    ctx = ConvertContext(node, name, env, b, opset, opsets)
    start = len(b.nodes)
    known = set(b.values)
    where = f"while converting ONNX node '{name}' ({node.op_type})"
    try:
        results = rule.fn(ctx)
    except EmberError as e:
        raise e.add_context(where) from None
    except MemoryError as e:  # a constant the model's shapes make too large for this machine
        raise ArgumentError(
            f"{node.op_type} '{name}' makes a constant larger than this machine can allocate"
        ).add_context(where) from e
    except Exception as e:
        raise InternalError(
            f"converter for {node.op_type} failed: {type(e).__name__}: {e}"
        ).add_context(where) from e
    if len(results) < len([o for o in node.output if o]):
        raise InternalError(
            f"converter for {node.op_type} returned {len(results)} outputs"
        ).add_context(where)
    for onnx_name, value in zip(node.output, results):
        if not onnx_name:
            continue
        if isinstance(value, str) and value not in known and onnx_name not in b.values:
            b.rename(value, onnx_name, start)
            value = onnx_name
        env[onnx_name] = value


def _bind_output(name: str, env: dict[str, Bound], b: GraphBuilder) -> Value:
    """The graph output ``name``, copied under its ONNX name when it aliases another value
    (an Identity of an input, an output listed twice)."""
    if name not in env:
        raise InvalidModelError(f"graph output '{name}' is not produced by any node")
    value = env[name]
    if not isinstance(value, str):
        raise InternalError(f"graph output '{name}' is {value}, not a tensor")
    if value != name and name not in b.values:
        start = len(b.nodes)
        (copy,) = b.emit("copy", [value], {}, (f"output_{name}", "Identity"))
        b.rename(copy, name, start)
        value = name
    return b.values[value]
