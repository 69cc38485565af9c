"""A QDQ-quantized CNN (Conv-Relu-Conv-Relu-GlobalAveragePool-Gemm) through Ember vs onnxruntime.

The float model is built with onnx.helper from seeded random weights and quantized by
``onnxruntime.quantization.quantize_static`` in QDQ form (uint8 activations, int8
weights, per tensor or per channel) from a small seeded calibration set. Ember runs
the QDQ graph as written: DequantizeLinear to float, float Conv/Gemm, QuantizeLinear.

Two references. onnxruntime with graph optimizations off runs the same float
semantics, and every quantized tensor matches it exactly on these inputs (only
float summation order differs, so a value within float rounding of a half step could
flip; none does here). onnxruntime with optimizations on fuses DQ-Conv-Q into integer
QLinearConv and requantizes the int32 accumulator, which can round a near-tie the
other way: Ember stays within one quantization step of it, in a small fraction of
elements. Every quantized intermediate is a graph output, so errors cannot hide.

With ``fuse_qdq`` (frontend/onnx_import/qdq_fuse.py) Ember makes the same fusion and
then matches the optimized onnxruntime exactly instead, and the literal one within a step.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tests.frontend import ort_exact  # noqa: E402

SHAPE = (2, 3, 13, 11)


def _float_cnn(rng: np.random.Generator):
    w = {
        "W1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype("float32"),
        "B1": (rng.standard_normal(8) * 0.1).astype("float32"),
        "W2": (rng.standard_normal((12, 8, 3, 3)) * 0.2).astype("float32"),
        "B2": (rng.standard_normal(12) * 0.1).astype("float32"),
        "FC": rng.standard_normal((10, 12)).astype("float32"),
        "FB": rng.standard_normal(10).astype("float32"),
    }
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "W2", "B2"], ["c2"], name="conv2", strides=[2, 2], pads=[1, 1, 1, 1]),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        n("Flatten", ["g"], ["f"], name="flatten"),
        n("Gemm", ["f", "FC", "FB"], ["logits"], name="fc", transB=1),
    ]
    g = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [SHAPE[0], 10])],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _quantize(model, tmp_path, per_channel: bool):
    """quantize_static in QDQ form, calibrated on four seeded random batches."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            r = np.random.default_rng(1)
            self.batches = iter(
                [{"x": r.standard_normal(SHAPE).astype("float32")} for _ in range(4)]
            )

        def get_next(self):
            return next(self.batches, None)

    src, dst = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(model, str(src))
    quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=per_channel,
    )
    q = onnx.load(str(dst))
    # every quantized activation becomes an output too, so each layer is compared
    typed = {v.name: v for v in onnx.shape_inference.infer_shapes(q).graph.value_info}
    for node in q.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] != "x":
            q.graph.output.append(typed[node.output[0]])
    return q


def _ort(model, optimize: bool):
    so = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    so.graph_optimization_level = level.ORT_ENABLE_ALL if optimize else level.ORT_DISABLE_ALL
    return ort_exact.session(model, so)  # exact 8-bit products on every host


@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_cnn_matches_onnxruntime(tmp_path, per_channel):
    import ember

    q = _quantize(_float_cnn(np.random.default_rng(0)), tmp_path, per_channel)
    ops = {n.op_type for n in q.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm"} <= ops
    lib = ember.compile(q)
    literal, fused = _ort(q, optimize=False), _ort(q, optimize=True)
    off_by_one = total = 0
    for seed in range(6):
        r = np.random.default_rng(100 + seed)
        x = (r.standard_normal(SHAPE) * r.uniform(0.5, 2.0)).astype("float32")
        got = lib.run({"x": x})
        for g, w in zip(got, literal.run(None, {"x": x})):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)
        for k, (g, w) in enumerate(zip(got, fused.run(None, {"x": x}))):
            if k == 0:  # the float logits: one output step at most
                step = _output_scale(q)
                assert np.max(np.abs(g - w)) <= step * 1.0001
                continue
            diff = np.abs(g.astype(np.int32) - w.astype(np.int32))
            assert diff.max() <= 1, f"output {k}: {diff.max()} steps from the fused integer path"
            off_by_one += int((diff > 0).sum())
            total += diff.size
    assert off_by_one <= total // 1000, f"{off_by_one} of {total} quantized values differ"


def _output_scale(q) -> float:
    dq = next(n for n in q.graph.node if n.output[0] == "logits")
    init = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    return float(init[dq.input[1]])


@pytest.mark.parametrize("per_channel", [False, True])
def test_fused_qdq_cnn_matches_onnxruntime_integer_path(tmp_path, per_channel):
    """DQ -> Conv -> Q as QLinearConv: bit-exact with onnxruntime's own fusion."""
    import ember
    from ember.frontend.onnx_import.qdq_fuse import fuse_qdq

    q = _quantize(_float_cnn(np.random.default_rng(0)), tmp_path, per_channel)
    fq = fuse_qdq(q)
    ops = [n.op_type for n in fq.graph.node]
    assert ops.count("QLinearConv") == 2 and "Conv" not in ops
    assert [n.op_type for n in q.graph.node].count("Conv") == 2  # the input is left alone
    lib = ember.compile(fq)
    literal, fused = _ort(q, optimize=False), _ort(q, optimize=True)
    for seed in range(6):
        r = np.random.default_rng(100 + seed)
        x = (r.standard_normal(SHAPE) * r.uniform(0.5, 2.0)).astype("float32")
        got = lib.run({"x": x})
        for g, w in zip(got, fused.run(None, {"x": x})):
            np.testing.assert_array_equal(g, w)
        for k, (g, w) in enumerate(zip(got, literal.run(None, {"x": x}))):
            if k:
                assert np.abs(g.astype(np.int32) - w.astype(np.int32)).max() <= 1


@pytest.mark.nvrtc
def test_qdq_cnn_on_cuda_emulated(tmp_path, monkeypatch):
    """The QDQ graph and its fused form for target="cuda", run in the SIMT emulator."""
    pytest.importorskip("cuda")
    import ember
    from ember.frontend.onnx_import.qdq_fuse import fuse_qdq

    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    q = _quantize(_float_cnn(np.random.default_rng(0)), tmp_path, per_channel=True)
    x = np.random.default_rng(5).standard_normal(SHAPE).astype("float32")
    for model, ref in [(q, _ort(q, optimize=False)), (fuse_qdq(q), _ort(q, optimize=True))]:
        got = ember.compile(model, target="cuda").run({"x": x})
        for g, w in zip(got, ref.run(None, {"x": x})):
            np.testing.assert_array_equal(g, w)
