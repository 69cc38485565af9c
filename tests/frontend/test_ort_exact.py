"""The signed twin that makes onnxruntime an exact 8-bit reference (tests/frontend/ort_exact).

Each twin is run by onnxruntime on every host and checked against numpy in int64, so a
wrong shift, a zero point left at its uint8 default or an output not shifted back fails
here, not only on the hosts that need the twin.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from tests.frontend import ort_exact  # noqa: E402
from tests.frontend.onnx_models import make_model  # noqa: E402


def _twin_run(model, feeds):  # noqa: ANN001, ANN202
    return ort_exact._TwinSession(model, None, ["CPUExecutionProvider"]).run(None, feeds)


def _saturating(rng: np.random.Generator, m: int, k: int, n: int):  # noqa: ANN202
    """Operands whose neighbouring products sum past int16 (255 * 127 * 2 > 32767)."""
    a = rng.integers(200, 256, (m, k), dtype=np.uint8)
    b = rng.integers(100, 128, (k, n), dtype=np.int8)
    b[:, ::3] = -b[:, ::3]
    return a, b


@pytest.mark.parametrize("zero_points", [False, True])
def test_matmul_integer_twin_is_exact(rng, zero_points) -> None:
    a, b = _saturating(rng, 5, 24, 7)
    consts = {"b": b}
    names = ["a", "b"]
    za = zb = 0
    if zero_points:
        za, zb = np.array(17, np.uint8), np.array(-3, np.int8)
        consts |= {"za": za, "zb": zb}
        names += ["za", "zb"]
    model = make_model([helper.make_node("MatMulInteger", names, ["y"])], {"a": a}, ["y"], consts)
    want = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
    (got,) = _twin_run(model, {"a": a})
    np.testing.assert_array_equal(got, want)


def test_onnxruntime_u8s8_saturates_where_the_flag_says() -> None:
    """Why the twin exists: the plain session's answer is wrong exactly where the flag is
    set (a host without VNNI), and right elsewhere."""
    a = np.full((1, 2), 255, np.uint8)
    b = np.full((2, 1), 127, np.int8)
    model = make_model(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], {"a": a}, ["y"], {"b": b}
    )
    plain = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = plain.run(None, {"a": a})
    assert (int(got[0, 0]) != 2 * 255 * 127) == ort_exact.U8S8_SATURATES
    (exact,) = ort_exact.run(model, {"a": a})
    assert int(exact[0, 0]) == 2 * 255 * 127


def test_quantize_defaults_and_uint8_outputs_shift_back(rng) -> None:
    """QuantizeLinear and DequantizeLinear without zero points (uint8 0 by default), a
    uint8 graph output, and DynamicQuantizeLinear's computed zero point feeding a product."""
    x = (rng.standard_normal((4, 9)) * 3).astype(np.float32)
    b = rng.integers(-128, 128, (9, 5), dtype=np.int8)
    s = np.array(0.03, np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s"], ["d"]),
        helper.make_node("Transpose", ["q"], ["qt"]),
        helper.make_node("DynamicQuantizeLinear", ["x"], ["dq", "ds", "dz"]),
        helper.make_node("MatMulInteger", ["dq", "b", "dz"], ["y"]),
    ]
    outs = ["q", "d", "qt", "dq", "dz", "y"]
    model = make_model(nodes, {"x": x}, outs, {"s": s, "b": b})
    q, d, qt, dq, dz, y = _twin_run(model, {"x": x})
    want_q = np.clip(np.rint(x / s), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(qt, want_q.T)
    np.testing.assert_array_equal(d, want_q.astype(np.float32) * s)
    # DynamicQuantizeLinear alone multiplies nothing: the plain session's values are exact
    plain = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _, _, _, plain_dq, plain_dz, _ = plain.run(None, {"x": x})
    assert dq.dtype == dz.dtype == np.uint8
    np.testing.assert_array_equal(dq, plain_dq)
    np.testing.assert_array_equal(dz, plain_dz)
    np.testing.assert_array_equal(y, (dq.astype(np.int64) - dz) @ b.astype(np.int64))


def test_an_op_the_shift_would_change_is_refused() -> None:
    a = np.arange(6, dtype=np.uint8).reshape(2, 3)
    model = make_model(
        [helper.make_node("Cast", ["a"], ["y"], to=TensorProto.FLOAT)], {"a": a}, ["y"]
    )
    with pytest.raises(NotImplementedError, match="Cast"):
        ort_exact.signed_twin(model)
