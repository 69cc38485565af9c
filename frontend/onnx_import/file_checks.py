"""Checks of an ONNX file against itself and against Ember, run by the importer.

Each follows what onnxruntime does with the same file: raw tensor data must be as long
as the tensor (:func:`check_data_length`), an opset newer than Ember knows converts with
a warning (:func:`check_opset`), and a declared output dtype the graph does not make is
refused while a differing declared shape only warns (:func:`check_declared_outputs`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ember.errors import EmberError, InvalidModelError
from ember.frontend.graph import Graph, Value
from ember.frontend.interface import TENSOR
from ember.frontend.onnx_import.declared import declared_dim, elem_dtype, opsets


def check_data_length(t: Any, source: str) -> None:
    """InvalidModelError when tensor ``t`` holds fewer (or more) raw bytes than its dims
    and type need: an external data file without a ``length`` is read to its end, so a
    short file would otherwise surface as numpy's reshape error."""
    # optional dependency: onnx
    from onnx import TensorProto, helper

    if not t.HasField("raw_data"):
        return
    # 4-bit types pack two values to a byte, 2-bit ones four (the last byte padded)
    per_byte = {getattr(TensorProto, k, -1): 2 for k in ("INT4", "UINT4", "FLOAT4E2M1")}
    per_byte.update({getattr(TensorProto, k, -1): 4 for k in ("INT2", "UINT2")})
    count = int(np.prod(t.dims, dtype=object))
    if t.data_type in per_byte:
        need = -(-count // per_byte[t.data_type])
    else:
        try:
            need = count * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        except (KeyError, TypeError, ValueError):
            return  # a type without a fixed size (string): onnx reads it its own way
    if len(t.raw_data) != need:
        raise InvalidModelError(
            f"tensor '{t.name}' of shape {list(t.dims)} needs {need} bytes, but "
            f"{len(t.raw_data)} were read from {source}"
        )


# The newest default-domain opset whose operator changes the converters follow (the
# If/Loop/Scan forms in ops_control_flow.py list it); a newer model still converts with
# each operator's latest form, which may have changed meaning, so the user is told.
# Opset 26 added BitCast and CumProd; 27 added CausalConvWithState and LinearAttention and
# gave Range float16/bfloat16 with ``stash_type`` (onnx 1.22).
NEWEST_OPSET = 27


def check_opset(proto: Any) -> None:
    """Warn about a default-domain opset newer than :data:`NEWEST_OPSET`. onnxruntime
    refuses one newer than it knows; Ember converts it when every operator has a
    converter, as most operators keep their form from one opset to the next."""
    opset = opsets(proto).get("", 0)
    if opset > NEWEST_OPSET:
        warnings.warn(
            f"the model uses ONNX opset {opset}, newer than the {NEWEST_OPSET} Ember knows: "
            f"its operators are converted as opset {NEWEST_OPSET} defines them; check the "
            "results (for instance against onnxruntime)",
            UserWarning,
            stacklevel=3,
        )


def check_declared_outputs(proto: Any, graph: Graph) -> None:
    """InvalidModelError when the model declares an output of a dtype its graph does not
    make (onnxruntime refuses such a model too); a declared static shape that differs
    from the graph's is a warning, as onnxruntime only warns ("lenient merge")."""
    for vi, value in _tensor_outputs(proto, graph):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None or tt.elem_type == 0:  # UNDEFINED: nothing declared
            continue
        try:
            declared = elem_dtype(vi)
        except EmberError:  # a type Ember takes in no input, such as bfloat16: by its name
            declared = _onnx_type_name(tt.elem_type)
        if declared != value.type.dtype:
            raise InvalidModelError(
                f"output '{vi.name}' is declared {declared}, but the graph makes it "
                f"{value.type.dtype}"
            )
        if not tt.HasField("shape") or not value.type.is_static:
            continue
        dims = [declared_dim(vi.name, k, d) for k, d in enumerate(tt.shape.dim)]
        if len(dims) != value.type.ndim or any(
            isinstance(d, int) and d != n for d, n in zip(dims, value.type.shape)
        ):
            warnings.warn(
                f"output '{vi.name}' is declared with shape {dims}, but the graph makes "
                f"{list(value.type.shape)}; Ember returns the graph's",
                UserWarning,
                stacklevel=3,
            )


def _tensor_outputs(proto: Any, graph: Graph) -> list[tuple[Any, Value]]:
    """Each declared output with the graph value of a tensor it holds (outputs that are
    sequences or empty optionals are flat values of their own: ``Graph.interface``)."""
    if graph.interface is None:
        return list(zip(proto.graph.output, graph.outputs))
    ports = graph.interface.outputs
    return [
        (vi, graph.values[p.values[0]])
        for vi, p in zip(proto.graph.output, ports)
        if p.kind == TENSOR
    ]


def _onnx_type_name(elem_type: int) -> str:
    """ONNX's lower-case name of an element type ("bfloat16"), which is Ember's dtype name
    where Ember has the type; "ONNX type N" for a number ONNX does not define."""
    # optional dependency: onnx
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"ONNX type {elem_type}"
