"""MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv through Ember vs onnxruntime.

The int32 accumulators must be exact, and the requantized 8-bit outputs equal
onnxruntime's bit for bit: both compute ``float(acc) * (a_scale * b_scale / y_scale)``
in float32, round half to even, add the zero point and saturate. Data is random over
the whole 8-bit range; shapes are odd; zero points per tensor, per row/column/channel.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.frontend.ops.quant_models import check_exact, node_model, random_q, random_zp
from tests.nightly import examples, sample_in_ci

SETTINGS = settings(
    max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _int_matmul_reference(a, b, a_zp, b_zp):
    """numpy in int64: an independent check of the int32 accumulator."""
    return ((a.astype(np.int64) - a_zp) @ (b.astype(np.int64) - b_zp)).astype(np.int32)


@pytest.mark.parametrize("ta,tb", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")])
@pytest.mark.parametrize(
    "sa,sb", [((5, 13), (13, 7)), ((2, 3, 9), (9, 5)), ((2, 1, 4, 6), (3, 6, 5))]
)
def test_matmul_integer(rng, ta, tb, sa, sb):
    a, b = random_q(rng, sa, ta), random_q(rng, sb, tb)
    consts = {"za": random_zp(rng, (), ta), "zb": random_zp(rng, (), tb)}
    (y,) = check_exact(
        node_model("MatMulInteger", {"a": a, "b": b}, consts, opset=10), {"a": a, "b": b}
    )
    np.testing.assert_array_equal(y, _int_matmul_reference(a, b, consts["za"], consts["zb"]))


def test_matmul_integer_per_column_b_zero_point(rng):
    a, b = random_q(rng, (6, 11), "uint8"), random_q(rng, (11, 9), "uint8")
    consts = {"za": random_zp(rng, (), "uint8"), "zb": random_zp(rng, (9,), "uint8")}
    check_exact(node_model("MatMulInteger", {"a": a, "b": b}, consts, opset=10), {"a": a, "b": b})


def test_matmul_integer_per_row_a_zero_point(rng):
    """Per-row A zero points (onnxruntime takes only a scalar, so numpy is the reference)."""
    import ember

    a, b = random_q(rng, (7, 5), "int8"), random_q(rng, (5, 4), "int8")
    za, zb = random_zp(rng, (7,), "int8"), random_zp(rng, (), "int8")
    model = node_model("MatMulInteger", {"a": a, "b": b}, {"za": za, "zb": zb}, opset=10)
    (y,) = ember.compile(model).run({"a": a, "b": b})
    np.testing.assert_array_equal(y, _int_matmul_reference(a, b, za[:, None], zb))


def test_matmul_integer_without_zero_points(rng):
    a, b = random_q(rng, (4, 9), "uint8"), random_q(rng, (9, 3), "int8")
    check_exact(node_model("MatMulInteger", {"a": a, "b": b}, opset=10), {"a": a, "b": b})


def test_matmul_integer_only_b_zero_point(rng):
    """A hole for a_zero_point: the converter fills in a zero of A's type."""
    a, b = random_q(rng, (3, 8), "uint8"), random_q(rng, (8, 5), "uint8")
    model = node_model(
        "MatMulInteger",
        {"a": a, "b": b},
        {"zb": random_zp(rng, (), "uint8")},
        order=["a", "b", "", "zb"],
        opset=10,
    )
    check_exact(model, {"a": a, "b": b})


CONV_CASES = [
    ((1, 3, 9, 11), (4, 3, 3, 3), {}),
    ((2, 3, 10, 7), (5, 3, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 4, 8, 9), (6, 2, 3, 3), {"group": 2, "dilations": [2, 1], "pads": [2, 1, 2, 1]}),
    ((1, 3, 7, 10), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((2, 3, 17), (4, 3, 5), {"pads": [2, 1], "strides": [2]}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
@pytest.mark.parametrize("tx,tw", [("uint8", "uint8"), ("uint8", "int8")])
def test_conv_integer(rng, xs, ws, attrs, tx, tw):
    """Padded taps read the input zero point, so they add nothing to the accumulator."""
    sample_in_ci(xs, ws, attrs, tx, tw)
    x = random_q(rng, xs, tx)
    consts = {
        "w": random_q(rng, ws, tw),
        "zx": random_zp(rng, (), tx),
        "zw": random_zp(rng, (), tw),
    }
    check_exact(node_model("ConvInteger", {"x": x}, consts, opset=10, **attrs), {"x": x})


def test_conv_integer_without_zero_points(rng):
    x = random_q(rng, (1, 2, 6, 5), "uint8")
    consts = {"w": random_q(rng, (3, 2, 2, 2), "uint8")}
    check_exact(node_model("ConvInteger", {"x": x}, consts, opset=10, pads=[1, 1, 1, 1]), {"x": x})


def _qparams(rng, n_w, ta, tw, ty, per_channel):
    return {
        "sa": np.array(rng.uniform(0.01, 0.05), "float32"),
        "za": random_zp(rng, (), ta),
        "sw": rng.uniform(0.005, 0.03, size=(n_w,) if per_channel else ()).astype("float32"),
        "zw": (
            random_zp(rng, (n_w,), tw)
            if per_channel and tw == "uint8"
            else np.zeros((n_w,) if per_channel else (), tw)
        ),
        "sy": np.array(rng.uniform(0.05, 0.3), "float32"),
        "zy": random_zp(rng, (), ty),
    }


def _qlinear_conv(rng, xs, ws, attrs, tx, tw, ty, per_channel, bias):
    x = random_q(rng, xs, tx)
    p = _qparams(rng, ws[0], tx, tw, ty, per_channel)
    consts = {**p, "w": random_q(rng, ws, tw)}
    order = ["x", "sa", "za", "w", "sw", "zw", "sy", "zy"]
    if bias:
        consts["b"] = rng.integers(-5000, 5000, size=ws[0]).astype("int32")
        order.append("b")
    return node_model("QLinearConv", {"x": x}, consts, order=order, opset=10, **attrs), {"x": x}


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
@pytest.mark.parametrize(
    "tx,tw,ty", [("uint8", "uint8", "uint8"), ("uint8", "int8", "uint8"), ("int8", "int8", "int8")]
)
def test_qlinear_conv(rng, xs, ws, attrs, tx, tw, ty):
    sample_in_ci(xs, ws, attrs, tx, tw, ty)
    model, feeds = _qlinear_conv(rng, xs, ws, attrs, tx, tw, ty, per_channel=False, bias=True)
    check_exact(model, feeds)


@pytest.mark.parametrize("bias", [False, True])
def test_qlinear_conv_per_channel_weights(rng, bias):
    model, feeds = _qlinear_conv(
        rng,
        (1, 4, 9, 8),
        (6, 2, 3, 3),
        {"group": 2, "pads": [1, 1, 1, 1]},
        "uint8",
        "int8",
        "uint8",
        True,
        bias,
    )
    check_exact(model, feeds)


def _qlinear_matmul(rng, sa, sb, ta, tb, ty, per_column):
    a, b = random_q(rng, sa, ta), random_q(rng, sb, tb)
    p = _qparams(rng, sb[-1], ta, tb, ty, per_column)
    consts = {**p, "b": b}
    order = ["a", "sa", "za", "b", "sw", "zw", "sy", "zy"]
    return node_model("QLinearMatMul", {"a": a}, consts, order=order, opset=10), {"a": a}


@pytest.mark.parametrize(
    "ta,tb,ty", [("uint8", "uint8", "uint8"), ("uint8", "int8", "uint8"), ("int8", "int8", "int8")]
)
@pytest.mark.parametrize("sa,sb", [((5, 13), (13, 7)), ((2, 3, 9), (9, 5)), ((3, 4, 6), (3, 6, 5))])
def test_qlinear_matmul(rng, ta, tb, ty, sa, sb):
    model, feeds = _qlinear_matmul(rng, sa, sb, ta, tb, ty, per_column=False)
    check_exact(model, feeds)


def test_qlinear_matmul_per_column_b(rng):
    model, feeds = _qlinear_matmul(rng, (7, 10), (10, 6), "uint8", "int8", "uint8", per_column=True)
    check_exact(model, feeds)


def test_qlinear_matmul_against_numpy(rng):
    """The requantization formula written out in numpy (float32 steps as onnxruntime's)."""
    import ember

    model, feeds = _qlinear_matmul(rng, (6, 9), (9, 4), "uint8", "uint8", "uint8", per_column=False)
    init = {t.name: __import__("onnx").numpy_helper.to_array(t) for t in model.graph.initializer}
    acc = _int_matmul_reference(feeds["a"], init["b"], init["za"], init["zw"])
    mult = (init["sa"] * init["sw"]) / init["sy"]
    want = np.clip(np.rint(acc.astype(np.float32) * mult) + init["zy"], 0, 255).astype("uint8")
    (y,) = ember.compile(model).run(feeds)
    np.testing.assert_array_equal(y, want)


@SETTINGS
@given(
    st.integers(1, 9),
    st.integers(1, 17),
    st.integers(1, 9),
    st.sampled_from(["uint8", "int8"]),
    st.integers(0, 999),
)
def test_qlinear_matmul_space(m, k, n, tb, seed):
    rng = np.random.default_rng(seed)
    model, feeds = _qlinear_matmul(rng, (m, k), (k, n), "uint8", tb, "uint8", per_column=False)
    check_exact(model, feeds)


@SETTINGS
@given(
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 2),
    st.integers(0, 1),
    st.integers(3, 8),
    st.integers(0, 999),
)
def test_qlinear_conv_space(k, stride, dil, pad, size, seed):
    rng = np.random.default_rng(seed)
    attrs = {
        "kernel_shape": [k, k],
        "strides": [stride, 1],
        "dilations": [dil, dil],
        "pads": [pad] * 4,
    }
    if (k - 1) * dil + 1 > size + 2 * pad:
        return
    model, feeds = _qlinear_conv(
        rng, (1, 3, size, size + 1), (2, 3, k, k), attrs, "uint8", "int8", "uint8", False, True
    )
    check_exact(model, feeds)


def test_conv_integer_per_channel_weight_zero_point(rng):
    """Per-output-channel weight zero points (onnxruntime's ConvInteger takes a scalar): the
    reference is onnxruntime's float Conv of the shifted operands, exact because every sum
    stays below 2**24."""
    import ember
    from tests.frontend.onnx_models import run_ort, single_node

    x = random_q(rng, (2, 3, 7, 6), "uint8")
    w = random_q(rng, (4, 3, 3, 3), "uint8")
    zx, zw = random_zp(rng, (), "uint8"), random_zp(rng, (4,), "uint8")
    attrs = {"pads": [1, 0, 1, 2], "strides": [2, 1]}
    model = node_model("ConvInteger", {"x": x}, {"w": w, "zx": zx, "zw": zw}, opset=10, **attrs)
    (got,) = ember.compile(model).run({"x": x})
    xf = (x.astype(np.int32) - zx).astype(np.float32)
    wf = (w.astype(np.int32) - zw[:, None, None, None]).astype(np.float32)
    (want,) = run_ort(single_node("Conv", {"x": xf}, {"w": wf}, **attrs), {"x": xf})
    np.testing.assert_array_equal(got, want.astype(np.int32))
