"""Small ONNX models built with onnx.helper from seeded random weights, for tests and benchmarks.

Each builder returns ``(model, inputs)``: a checked ``ModelProto`` and a feed dict.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def build_model(
    nodes: list[Any],
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    initializers: dict[str, np.ndarray],
    opset: int = 17,
) -> Any:
    """A model over ``nodes``; output types come from onnx's shape inference."""
    # optional dependency: onnx
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        nodes,
        "model",
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in inputs.items()
        ],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def small_cnn(
    rng: np.random.Generator, batch: int = 1, h: int = 16, w: int = 16
) -> tuple[Any, dict]:
    """Conv-Relu-MaxPool-Conv-Relu-GlobalAveragePool-Flatten-Gemm-Softmax, 10 classes."""
    # optional dependency: onnx
    from onnx import helper

    weights = {
        "W1": rng.standard_normal((8, 3, 3, 3)).astype("float32") * 0.3,
        "B1": rng.standard_normal(8).astype("float32"),
        "W2": rng.standard_normal((12, 8, 3, 3)).astype("float32") * 0.2,
        "B2": rng.standard_normal(12).astype("float32"),
        "FC": rng.standard_normal((10, 12)).astype("float32"),
        "FB": rng.standard_normal(10).astype("float32"),
    }
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "W2", "B2"], ["c2"], name="conv2", strides=[2, 2], pads=[0, 1, 1, 0]),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        n("Flatten", ["g"], ["f"], name="flatten"),
        n("Gemm", ["f", "FC", "FB"], ["logits"], name="fc", transB=1),
        n("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    x = rng.standard_normal((batch, 3, h, w)).astype("float32")
    return build_model(nodes, {"x": x}, ["probs"], weights), {"x": x}


def mlp(
    rng: np.random.Generator, batch: int = 64, sizes: tuple[int, ...] = (512, 1024, 256)
) -> tuple[Any, dict]:
    """MatMul-Add-Relu layers, the last without bias and activation."""
    # optional dependency: onnx
    from onnx import helper

    n = helper.make_node
    weights: dict[str, np.ndarray] = {}
    nodes, prev = [], "x"
    for k, (a, b) in enumerate(zip(sizes, sizes[1:])):
        weights[f"w{k}"] = (rng.standard_normal((a, b)) / np.sqrt(a)).astype("float32")
        nodes.append(n("MatMul", [prev, f"w{k}"], [f"h{k}"], name=f"fc{k}"))
        prev = f"h{k}"
        if k < len(sizes) - 2:
            weights[f"b{k}"] = rng.standard_normal(b).astype("float32")
            nodes.append(n("Add", [prev, f"b{k}"], [f"hb{k}"], name=f"bias{k}"))
            nodes.append(n("Relu", [f"hb{k}"], [f"a{k}"], name=f"relu{k}"))
            prev = f"a{k}"
    x = rng.standard_normal((batch, sizes[0])).astype("float32")
    return build_model(nodes, {"x": x}, [prev], weights), {"x": x}


def symbolic_batch(model: Any, dim: str = "N") -> Any:
    """``model`` with dim 0 of every graph input and output renamed to the symbol ``dim``,
    as PyTorch's ``dynamic_axes={"x": {0: dim}}`` exports it (a copy; weights unchanged)."""
    # optional dependency: onnx
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    known = {i.name for i in out.graph.initializer}
    for vi in [*out.graph.input, *out.graph.output]:
        if vi.name in known or not vi.type.tensor_type.HasField("shape"):
            continue
        first = vi.type.tensor_type.shape.dim[0]
        first.Clear()
        first.dim_param = dim
    return out


T, B, F, P, H1, H2, C = 9, 3, 13, 11, 7, 5, 6  # the speech model's sizes


def _speech_weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    return {
        "proj_w": w(F, P),
        "proj_b": w(P),
        "l1_w": w(2, 4 * H1, P),
        "l1_r": w(2, 4 * H1, H1),
        "l1_b": w(2, 8 * H1),
        "l2_w": w(1, 4 * H2, 2 * H1),
        "l2_r": w(1, 4 * H2, H2),
        "l2_b": w(1, 8 * H2),
        "shape_seq": np.array([T, B, 2 * H1], np.int64),
        "shape_last": np.array([B, H2], np.int64),
        "head_a": w(H2, C),
        "head_a_b": w(C),
        "head_b": w(H2, C),
        "head_b_b": w(C),
    }


def speech_lstm() -> tuple[Any, dict[str, np.ndarray]]:
    """features [T, B, F] -> MatMul + Add + Relu -> bidirectional LSTM (runtime sequence
    lengths) -> Transpose, Reshape -> LSTM (Y_h) -> If(use_a): Gemm + Relu, else Gemm +
    Tanh -> Softmax; odd sizes, an odd number of frames."""
    # optional dependency: onnx
    from onnx import helper

    rng = np.random.default_rng(2024)
    then_g = helper.make_graph(
        [
            helper.make_node("Gemm", ["last", "head_a", "head_a_b"], ["a_lin"]),
            helper.make_node("Relu", ["a_lin"], ["a_out"]),
        ],
        "head_a",
        [],
        [helper.make_tensor_value_info("a_out", 1, [B, C])],
    )
    else_g = helper.make_graph(
        [
            helper.make_node("Gemm", ["last", "head_b", "head_b_b"], ["b_lin"], alpha=0.5),
            helper.make_node("Tanh", ["b_lin"], ["b_out"]),
        ],
        "head_b",
        [],
        [helper.make_tensor_value_info("b_out", 1, [B, C])],
    )
    nodes = [
        helper.make_node("MatMul", ["features", "proj_w"], ["proj_mm"]),
        helper.make_node("Add", ["proj_mm", "proj_b"], ["proj_add"]),
        helper.make_node("Relu", ["proj_add"], ["proj"]),
        helper.make_node(
            "LSTM",
            ["proj", "l1_w", "l1_r", "l1_b", "lens"],
            ["l1_y"],
            hidden_size=H1,
            direction="bidirectional",
            name="lstm1",
        ),
        helper.make_node("Transpose", ["l1_y"], ["l1_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["l1_t", "shape_seq"], ["l1_seq"]),
        helper.make_node(
            "LSTM", ["l1_seq", "l2_w", "l2_r", "l2_b"], ["", "l2_h"], hidden_size=H2, name="lstm2"
        ),
        helper.make_node("Reshape", ["l2_h", "shape_last"], ["last"]),
        helper.make_node(
            "If", ["use_a"], ["logits"], then_branch=then_g, else_branch=else_g, name="head"
        ),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    inputs = {
        "features": rng.standard_normal((T, B, F)).astype(np.float32),
        "lens": np.array([T, 4, 7], np.int32),
        "use_a": np.array(True),
    }
    return build_model(nodes, inputs, ["probs"], _speech_weights(rng), opset=17), inputs
