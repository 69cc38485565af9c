"""onnxruntime as an exact reference for 8-bit integer products on every x86 host.

Without VNNI (AVX2, or AVX-512 before Cascade Lake), onnxruntime multiplies uint8
activations by int8 weights with ``vpmaddubsw``, which adds each pair of products into a
*saturating* int16; a pair over 32,767 is clipped, so a U8S8 ``MatMulInteger``,
``QLinearConv``, ``QLinearMatMul`` or QDQ graph gives wrong numbers there (onnxruntime's
quantization guide says so and recommends S8S8 on such machines). Ember computes those
products exactly, so a test that took onnxruntime's output as the truth failed on an AMD
EPYC (Zen 3) host with differences of thousands.

On such a host :func:`session` gives onnxruntime the model's *signed twin*: every uint8
value in it is shifted down by 128 to int8, zero points included. ``(q - 128) - (z - 128)``
is ``q - z``, and ``QuantizeLinear`` with a zero point of ``z - 128`` saturating to
``[-128, 127]`` gives exactly its uint8 result minus 128, so every integer accumulator and
every dequantized float is the same, and onnxruntime's S8S8 kernels are exact. Feeds are
shifted on the way in and uint8 outputs back on the way out. Only ops whose meaning the
shift keeps are allowed to touch a uint8 value; any other raises, so the twin is never
quietly a different model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from ember.codegen_llvm.cpu_features import host_cpu

# onnxruntime's U8S8 products saturate on x86 without a VNNI instruction set.
U8S8_SATURATES = host_cpu()[1].startswith(("x86_64", "i386", "i686")) and not (
    {"avx512vnni", "avxvnni", "amx-int8"} & host_cpu()[2]
)

# Ops that may read or make uint8 values in the twin: quantize and dequantize and the
# integer products, with (zero point's input index, the operand it belongs to: an input
# index, or -1 for output 0) for each zero point that may be left out (its default, a
# uint8 0, must become an int8 -128); the QLinear ops' zero points are required.
_ZERO_POINTS = {
    "QuantizeLinear": ((2, -1),),
    "DequantizeLinear": ((2, 0),),
    "MatMulInteger": ((2, 0), (3, 1)),
    "ConvInteger": ((2, 0), (3, 1)),
    "QLinearMatMul": (),
    "QLinearConv": (),
}
# and data movement, which commutes with the shift
_SHIFT_INVARIANT = {
    "Identity", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Slice",
    "Split", "Gather", "MaxPool",
}  # fmt: skip


def _shift(values: np.ndarray) -> np.ndarray:
    return (values.astype(np.int16) - 128).astype(np.int8)


def signed_twin(model: Any) -> tuple[Any, set[str], set[str]]:
    """``model`` with every uint8 value shifted to int8, and the names of the graph inputs
    and outputs whose type changed (feed them shifted, read them shifted back)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.value_info, *g.output]}
    types.update({t.name: t.data_type for t in g.initializer})
    u8 = {name for name, t in types.items() if t == TensorProto.UINT8}
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    tg = twin.graph
    del tg.value_info[:]
    for t in tg.initializer:
        if t.data_type == TensorProto.UINT8:
            t.CopyFrom(numpy_helper.from_array(_shift(numpy_helper.to_array(t)), t.name))
    minus_128 = "ort_exact_minus_128"
    nodes = []
    for node in tg.node:
        touched = [v for v in [*node.input, *node.output] if v in u8]
        if not touched:
            nodes.append(node)
            continue
        if node.op_type == "DynamicQuantizeLinear":  # its uint8 outputs, shifted after it
            raw = [f"{v}_ort_exact_u8" for v in node.output[::2]]
            nodes.append(
                helper.make_node(node.op_type, [node.input[0]], [raw[0], node.output[1], raw[1]])
            )
            for src, dst in zip(raw, node.output[::2]):
                wide = f"{dst}_ort_exact_i32"
                nodes.append(helper.make_node("Cast", [src], [wide], to=TensorProto.INT32))
                nodes.append(helper.make_node("Sub", [wide, f"{minus_128}_i32"], [f"{wide}_s"]))
                nodes.append(helper.make_node("Cast", [f"{wide}_s"], [dst], to=TensorProto.INT8))
            continue
        if node.op_type in _SHIFT_INVARIANT:
            nodes.append(node)
            continue
        zero_points = _ZERO_POINTS.get(node.op_type)
        if zero_points is None:
            raise NotImplementedError(
                f"no exact signed twin for {node.op_type} '{node.name}' on uint8 values"
            )
        for attr in node.attribute:
            if attr.name == "output_dtype" and attr.i == TensorProto.UINT8:
                attr.i = TensorProto.INT8
        inputs = list(node.input)
        for at, of in zero_points:
            operand = node.output[0] if of < 0 else inputs[of]
            if operand in u8 and (at >= len(inputs) or inputs[at] == ""):
                inputs += [""] * (at + 1 - len(inputs))
                inputs[at] = minus_128
        del node.input[:]
        node.input.extend(inputs)
        nodes.append(node)
    del tg.node[:]
    tg.node.extend(nodes)
    tg.initializer.append(numpy_helper.from_array(np.array(-128, np.int8), minus_128))
    tg.initializer.append(numpy_helper.from_array(np.array(128, np.int32), f"{minus_128}_i32"))
    inputs = {v.name for v in tg.input if v.type.tensor_type.elem_type == TensorProto.UINT8}
    outputs = {v.name for v in tg.output if v.name in u8}
    for v in [*tg.input, *tg.output]:
        if v.name in u8:
            v.type.tensor_type.elem_type = TensorProto.INT8
    return twin, inputs, outputs


class _TwinSession:
    """An onnxruntime session on the signed twin that takes and gives the model's types."""

    def __init__(self, model: Any, options: Any, providers: Sequence[str]) -> None:
        twin, self._inputs, self._outputs = signed_twin(model)
        self._session = ort.InferenceSession(twin.SerializeToString(), options, providers)
        self._names = [o.name for o in self._session.get_outputs()]

    def get_inputs(self) -> Any:
        return self._session.get_inputs()

    def get_outputs(self) -> Any:
        return self._session.get_outputs()

    def run(self, names: Sequence[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        feeds = {k: _shift(v) if k in self._inputs else v for k, v in feeds.items()}
        wanted = list(names) if names else self._names
        got = self._session.run(wanted, feeds)
        return [
            (g.astype(np.int16) + 128).astype(np.uint8) if n in self._outputs else g
            for n, g in zip(wanted, got)
        ]


# a model with one of these may multiply 8-bit values (a QDQ model's DequantizeLinear
# is fused with the product that reads it into onnxruntime's integer kernels)
_PRODUCTS = {"MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv", "DequantizeLinear"}


def _has_uint8_products(model: Any) -> bool:
    if not any(n.op_type in _PRODUCTS for n in model.graph.node):
        return False
    inferred = onnx.shape_inference.infer_shapes(model).graph
    values = [*inferred.input, *inferred.value_info, *inferred.output]
    return any(v.type.tensor_type.elem_type == TensorProto.UINT8 for v in values) or any(
        t.data_type == TensorProto.UINT8 for t in inferred.initializer
    )


def session(
    model: Any, options: Any = None, providers: Sequence[str] = ("CPUExecutionProvider",)
) -> Any:
    """An onnxruntime session whose integer products are exact on this host."""
    if U8S8_SATURATES and _has_uint8_products(model):
        return _TwinSession(model, options, list(providers))
    return ort.InferenceSession(model.SerializeToString(), options, list(providers))


def run(model: Any, feeds: dict[str, np.ndarray], options: Any = None) -> list[np.ndarray]:
    """onnxruntime's outputs for ``feeds``, exact for 8-bit products on every host."""
    return session(model, options).run(None, feeds)
