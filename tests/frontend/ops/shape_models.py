"""One-node ONNX models with inputs in a fixed order (some constant, some omitted), for
the shape and indexing op tests; onnxruntime is the reference."""

from __future__ import annotations

from typing import Any

import numpy as np

onnx = __import__("pytest").importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tests.frontend.onnx_models import check_against_ort  # noqa: E402

# An input slot: ("x", array) fed at run time, ("=name", array) a constant, or None (omitted).
Slot = tuple[str, np.ndarray] | None


def node_model(op: str, slots: list[Slot], n_outputs: int = 1, opset: int = 17, **attrs: Any):
    """A model of one ``op`` node whose inputs are ``slots`` in order."""
    names, graph_in, inits = [], [], []
    while slots and slots[-1] is None:
        slots = slots[:-1]
    for slot in slots:
        if slot is None:
            names.append("")
            continue
        name, arr = slot
        if name.startswith("="):
            inits.append(numpy_helper.from_array(np.asarray(arr), name[1:]))
            names.append(name[1:])
        else:
            dtype = helper.np_dtype_to_tensor_dtype(arr.dtype)
            graph_in.append(helper.make_tensor_value_info(name, dtype, arr.shape))
            names.append(name)
    outs = [f"y{k}" for k in range(n_outputs)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", **attrs)
    out_info = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs]
    g = helper.make_graph([node], "test", graph_in, out_info, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.output[:]
    first = next(s[1] for s in slots if s is not None)
    for info in inferred.graph.output:  # uninferred (an invalid node): typed like input 0
        if info.type.tensor_type.elem_type == TensorProto.UNDEFINED:
            info = helper.make_tensor_value_info(
                info.name, helper.np_dtype_to_tensor_dtype(first.dtype), [None] * first.ndim
            )
        model.graph.output.append(info)
    return model


def check(
    op: str,
    slots: list[Slot],
    n_outputs: int = 1,
    opset: int = 17,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    **attrs: Any,
) -> list[np.ndarray]:
    """Build the model, and compare Ember's outputs with onnxruntime's."""
    model = node_model(op, slots, n_outputs, opset, **attrs)
    feeds = {s[0]: s[1] for s in slots if s is not None and not s[0].startswith("=")}
    return check_against_ort(model, feeds, rtol=rtol, atol=atol)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)
