"""Cast, CastLike, Dropout (inference), Identity and one-input Sum/Max/Min through Ember vs
onnxruntime; and the errors elementwise converters raise for inputs they cannot take."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from tests.frontend.onnx_models import check_against_ort, helper, make_model, single_node

DTYPES = [
    "float32", "float64", "float16", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool",
]  # fmt: skip
CODES = {d: helper.np_dtype_to_tensor_dtype(np.dtype(d)) for d in DTYPES}


def _source(rng, dtype, signed_ok):
    """Data every target type can hold: fractions to see float->int truncation, negatives
    only where both sides are signed, zeros to see bool conversion."""
    if dtype == "bool":
        return rng.random((3, 7)) < 0.5
    lo = -100 if signed_ok else 0
    x = rng.uniform(lo, 100, size=(3, 7))
    x[0, :2] = 0
    if not dtype.startswith("float"):
        x = np.trunc(x)
    return x.astype(dtype)


def _signed(d):
    return not d.startswith("uint") and d != "bool"


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", DTYPES)
def test_cast_pairs(rng, src, dst):
    x = _source(rng, src, _signed(src) and _signed(dst))
    check_against_ort(single_node("Cast", {"x": x}, opset=13, to=CODES[dst]), {"x": x})


@pytest.mark.parametrize("opset", [6, 9, 13, 19, 21])
def test_cast_opsets(rng, opset):
    x = rng.uniform(-50, 50, size=(2, 3, 5)).astype("float32")
    check_against_ort(single_node("Cast", {"x": x}, opset=opset, to=CODES["int32"]), {"x": x})


def test_cast_saturate_is_ignored_off_float8(rng):
    """saturate only concerns float8 targets (onnxruntime even refuses it elsewhere)."""
    x = rng.uniform(-50, 50, size=(3, 5)).astype("float32")
    model = single_node("Cast", {"x": x}, opset=19, to=CODES["int16"], saturate=0)
    (got,) = ember.compile(model, target="llvm").run({"x": x})
    np.testing.assert_array_equal(got, x.astype("int16"))


@pytest.mark.parametrize("src,dst", [("float32", "int64"), ("int32", "float16"), ("uint8", "bool")])
@pytest.mark.parametrize("opset", [15, 19, 21])
def test_cast_like(rng, src, dst, opset):
    x = _source(rng, src, False)
    like = np.zeros((1,), dtype=dst)
    model = single_node("CastLike", {"x": x, "like": like}, opset=opset)
    check_against_ort(model, {"x": x, "like": like})


def test_cast_to_same_type_is_a_copy(rng):
    x = rng.standard_normal((4, 5)).astype("float32")
    got = check_against_ort(single_node("Cast", {"x": x}, to=CODES["float32"]), {"x": x})
    np.testing.assert_array_equal(got[0], x)


# ---- Dropout ---------------------------------------------------------------------------


def _dropout(x, opset, mask=True, inits=None, feeds_extra=None, **attrs):
    names = ["x", *(inits or {}), *(feeds_extra or {})]
    outs = ["y", "mask"] if mask else ["y"]
    node = helper.make_node("Dropout", names, outs, name="dropout_node", **attrs)
    feeds = {"x": x, **(feeds_extra or {})}
    return make_model([node], feeds, outs, inits, opset), feeds


@pytest.mark.parametrize("opset", [7, 10, 12, 13, 22])
@pytest.mark.parametrize("mask", [False, True])
def test_dropout_inference(rng, opset, mask):
    x = rng.standard_normal((3, 4, 5)).astype("float32")
    attrs = {"ratio": 0.3} if opset < 12 else {}
    if opset == 7 and mask:  # neither onnx's shape inference nor onnxruntime takes this form
        return _check_dropout_7_mask(x)
    model, feeds = _dropout(x, opset, mask, **attrs)
    got = check_against_ort(model, feeds)
    np.testing.assert_array_equal(got[0], x)
    if mask and opset >= 12:
        assert got[1].dtype == np.bool_ and got[1].all()


def _check_dropout_7_mask(x):
    """Opset 7's mask has the input's type (zeros, as onnxruntime's later forms give)."""
    info = [helper.make_tensor_value_info(n, 1, x.shape) for n in ("x", "y", "mask")]
    node = helper.make_node("Dropout", ["x"], ["y", "mask"], name="dropout_node", ratio=0.2)
    graph = helper.make_graph([node], "g", info[:1], info[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    y, m = ember.compile(model, target="llvm").run({"x": x})
    np.testing.assert_array_equal(y, x)
    assert m.dtype == x.dtype and m.shape == x.shape and not m.any()


@pytest.mark.parametrize("training", [False, True])
def test_dropout_constant_training_mode(rng, training):
    """training_mode=False is inference; True with ratio 0 keeps everything too."""
    x = rng.standard_normal((2, 9)).astype("float32")
    inits = {"r": np.array(0.0 if training else 0.4, "float32"), "t": np.array(training)}
    model, feeds = _dropout(x, 13, True, inits)
    check_against_ort(model, feeds)


def test_dropout_runtime_ratio_in_inference(rng):
    x = rng.standard_normal((5, 3)).astype("float32")
    model, feeds = _dropout(x, 13, True, feeds_extra={"r": np.array(0.7, "float32")})
    check_against_ort(model, feeds)


# ---- Identity and one-input variadic ops -------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float16", "int8", "uint64", "bool"])
@pytest.mark.parametrize("opset", [13, 16, 21])
def test_identity_dtypes(rng, dtype, opset):
    x = _source(rng, dtype, True)
    check_against_ort(single_node("Identity", {"x": x}, opset=opset), {"x": x})


@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
def test_variadic_of_one(rng, op):
    x = rng.standard_normal((3, 1, 4)).astype("float32")
    got = check_against_ort(single_node(op, {"x": x}), {"x": x})
    np.testing.assert_array_equal(got[0], x)


# ---- errors --------------------------------------------------------------------------


def _model(op, inputs, inits=None, opset=17, **attrs):
    return single_node(op, inputs, inits, opset=opset, **attrs)


X = np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)
I32 = np.arange(12, dtype="int32").reshape(3, 4)
BAD = {
    "gelu_approximate": (_model("Gelu", {"x": X}, opset=20, approximate="fast"), "approximate"),
    "sin_of_int": (_model("Sin", {"x": I32}), "float"),
    "mod_float_fmod0": (_model("Mod", {"a": X, "b": X}), "fmod"),
    "bitshift_direction": (
        _model("BitShift", {"a": I32.astype("uint8"), "b": I32.astype("uint8")}, direction="UP"),
        "direction",
    ),
    "cast_to_string": (_model("Cast", {"x": X}, to=8), "STRING"),
    "cast_to_complex": (_model("Cast", {"x": X}, opset=19, to=14), "COMPLEX64"),
    "dropout_training": (
        _model("Dropout", {"x": X}, {"r": np.array(0.5, "float32"), "t": np.array(True)}),
        "training",
    ),
    "clip_vector_bound": (_model("Clip", {"x": X}, {"lo": np.zeros(2, "float32")}), "scalar"),
    "prelu_slope_grows_x": (_model("PRelu", {"x": X[:, :1]}, {"s": X}), "broadcast"),
    "where_float_condition": (_model("Where", {"c": X, "x": X, "y": X}), "bool"),
    "greater_mixed_dtypes": (_model("Greater", {"a": X, "b": I32}), "dtype"),
}


def test_dropout_training_mode_fed_at_run_time_is_checked_per_value():
    """``training_mode`` is compiled per value: false is inference, true is refused."""
    inputs = {"x": X, "r": np.array(0.5, "float32"), "t": np.array(True)}
    lib = ember.compile(_model("Dropout", inputs))
    with pytest.raises(ember.EmberError, match="training"):
        lib.run(inputs)
    np.testing.assert_array_equal(lib.run({**inputs, "t": np.array(False)})[0], X)


@pytest.mark.parametrize("case", sorted(BAD))
def test_errors_name_the_node(case):
    model, needle = BAD[case]
    with pytest.raises(ember.EmberError) as info:
        ember.compile(model, target="llvm")
    message = str(info.value)
    assert needle in message, message
    assert "_node" in message, message  # which ONNX node it was


# ---- constant folding ----------------------------------------------------------------

FOLD_CASES = {
    "pow": ([("Pow", ["a", "b"], {})], ["a", "b"]),
    "mod": ([("Mod", ["a", "b"], {"fmod": 0})], ["a", "b"]),
    "where": ([("Equal", ["a", "b"], {}), ("Where", ["n0", "a", "b"], {})], ["a", "b"]),
    "cast": ([("Cast", ["f"], {"to": 7})], ["f"]),
    "isnan": ([("IsNaN", ["f"], {}), ("Cast", ["n0"], {"to": 1})], ["f"]),
    "clip": ([("Clip", ["f", "lo", "hi"], {})], ["f", "lo", "hi"]),
    "gelu": ([("Gelu", ["f"], {"approximate": "tanh"})], ["f"]),
}


@pytest.mark.parametrize("case", sorted(FOLD_CASES))
def test_constant_inputs_fold(rng, case):
    """Ops whose inputs are all initializers fold at import (through the interpreter), as
    shape subgraphs need; the folded values match onnxruntime."""
    steps, used = FOLD_CASES[case]
    data = {
        "a": rng.integers(-9, 9, (3, 4)).astype("int64"),
        "b": rng.integers(1, 5, (4,)).astype("int64"),
        "f": rng.uniform(-2, 2, (3, 4)).astype("float32"),
        "lo": np.array(-0.5, "float32"),
        "hi": np.array(0.5, "float32"),
    }
    nodes = [
        helper.make_node(op, ins, [f"n{k}"], name=f"fold_{k}", **attrs)
        for k, (op, ins, attrs) in enumerate(steps)
    ]
    last = f"n{len(steps) - 1}"
    nodes += [
        helper.make_node("Cast", [last], ["c"], to=CODES["float32"]),
        helper.make_node("Add", ["x", "c"], ["y"], name="add_node"),
    ]
    x = rng.standard_normal((3, 4)).astype("float32")
    model = make_model(nodes, {"x": x}, ["y"], {k: data[k] for k in used}, opset=20)
    assert len(ember.frontend.from_onnx(model).nodes) == 1  # only the Add is left
    check_against_ort(model, {"x": x}, rtol=1e-6, atol=1e-6)


BIT_CASTS = [
    ("float32", "int32"),
    ("float32", "uint32"),
    ("int32", "float32"),
    ("float64", "int64"),
    ("int64", "float64"),
    ("float16", "int16"),
    ("uint16", "float16"),
    ("int8", "uint8"),
    ("bool", "uint8"),
]


def _bit_pattern_input(rng, dtype):
    """Random values plus the ones whose bits matter most: NaN, infinities, -0.0, the
    extreme integers."""
    if dtype == "bool":
        return rng.random(13) > 0.5
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(13).astype(dtype) * 100
        x[:4] = [np.nan, np.inf, -np.inf, -0.0]
        return x
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, 13, dtype=dtype, endpoint=True)
    x[:2] = [info.min, info.max]
    return x


@pytest.mark.parametrize("target", ["llvm", pytest.param("cuda", marks=pytest.mark.nvrtc)])
@pytest.mark.parametrize("src,dst", BIT_CASTS)
def test_bitcast_keeps_every_bit(rng, src, dst, target, monkeypatch):
    """ONNX BitCast (opset 26) against numpy's view of the same bytes; on cuda the kernel
    is compiled by NVRTC and run in the emulator."""
    if target == "cuda":
        pytest.importorskip("cuda")
        monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    x = _bit_pattern_input(rng, src)
    model = single_node("BitCast", {"x": x}, opset=26, to=CODES[dst])
    (got,) = ember.compile(model, target=target).run({"x": x})
    want = x.view(dst)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_bitcast_between_widths_is_refused(rng):
    node = helper.make_node("BitCast", ["x"], ["y"], to=CODES["int64"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", CODES["float32"], [4])],
        [helper.make_tensor_value_info("y", CODES["int64"], [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    with pytest.raises(ember.ArgumentError, match="bitcast: float32 to int64"):
        ember.compile(model)
