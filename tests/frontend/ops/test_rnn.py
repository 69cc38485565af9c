"""LSTM, GRU and RNN against onnxruntime: directions, optional inputs, attributes, opsets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from tests.frontend.onnx_models import check_against_ort, helper, make_model, run_ort, single_node
from tests.nightly import examples, sample_in_ci

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _inputs(
    rng: np.random.Generator,
    op: str,
    t: int,
    b: int,
    i: int,
    h: int,
    dirs: int,
    *,
    bias: bool = True,
    lens: np.ndarray | None = None,
    initial: bool = False,
    peep: bool = False,
    layout: int = 0,
) -> dict[str, np.ndarray]:
    """Named inputs in ONNX's order; absent optional ones are omitted here and named ""
    in the node by :func:`_node_inputs`."""
    g = GATES[op]

    def arr(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    x_shape = (b, t, i) if layout else (t, b, i)
    state_shape = (b, dirs, h) if layout else (dirs, b, h)
    out = {"X": arr(*x_shape, scale=1.0), "W": arr(dirs, g * h, i), "R": arr(dirs, g * h, h)}
    if bias:
        out["B"] = arr(dirs, 2 * g * h)
    if lens is not None:
        out["sequence_lens"] = lens.astype(np.int32)
    if initial:
        out["initial_h"] = arr(*state_shape)
        if op == "LSTM":
            out["initial_c"] = arr(*state_shape)
    if peep:
        out["P"] = arr(dirs, 3 * h)
    return out


ORDER = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]


def _model(op: str, inputs: dict[str, np.ndarray], n_out: int, opset: int = 22, **attrs):
    names = ORDER[:7] if op != "LSTM" else ORDER
    names = names[: max(names.index(k) for k in inputs) + 1]
    node_inputs = [k if k in inputs else "" for k in names]
    outs = ["Y", "Y_h", "Y_c"][:n_out]
    node = helper.make_node(op, node_inputs, outs, name=f"{op.lower()}_node", **attrs)
    return make_model([node], inputs, outs, opset=opset)


def _check(op: str, inputs: dict[str, np.ndarray], n_out: int, **attrs) -> None:
    check_against_ort(_model(op, inputs, n_out, **attrs), inputs, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_directions_all_outputs(op: str, direction: str) -> None:
    sample_in_ci(op, direction)
    rng = np.random.default_rng(1)
    dirs = 2 if direction == "bidirectional" else 1
    inputs = _inputs(rng, op, 5, 3, 7, 5, dirs, initial=True, peep=op == "LSTM")
    n_out = 3 if op == "LSTM" else 2
    _check(op, inputs, n_out, hidden_size=5, direction=direction)


def test_bidirectional_lstm_odd_sequence() -> None:
    rng = np.random.default_rng(2)
    inputs = _inputs(rng, "LSTM", 7, 2, 3, 6, 2, initial=True)
    _check("LSTM", inputs, 3, hidden_size=6, direction="bidirectional")


@pytest.mark.parametrize("lens", [(5, 2, 4, 1), (3, 0, 5, 2)], ids=["short", "empty_row"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_runtime_sequence_lens(op: str, direction: str, lens: tuple[int, ...]) -> None:
    """Rows shorter than T keep their state; a row of length 0 ends with zero states."""
    sample_in_ci(op, direction, lens)
    rng = np.random.default_rng(3)
    dirs = 2 if direction == "bidirectional" else 1
    lens = np.array(lens)
    inputs = _inputs(rng, op, 5, 4, 3, 4, dirs, lens=lens, initial=True)
    _check(op, inputs, 3 if op == "LSTM" else 2, hidden_size=4, direction=direction)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(lbr: int, direction: str) -> None:
    rng = np.random.default_rng(4)
    dirs = 2 if direction == "bidirectional" else 1
    inputs = _inputs(rng, "GRU", 6, 3, 5, 7, dirs, initial=True)
    _check("GRU", inputs, 2, hidden_size=7, direction=direction, linear_before_reset=lbr)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_layout_1(op: str) -> None:
    """Batch-first layout (opset 14); onnxruntime lacks it, so its reference is the
    layout-0 model on transposed inputs, with the outputs transposed back."""
    rng = np.random.default_rng(5)
    batch_first = _inputs(rng, op, 4, 3, 5, 3, 2, initial=True, layout=1)
    n_out = 3 if op == "LSTM" else 2
    attrs = {"hidden_size": 3, "direction": "bidirectional"}
    model = _model(op, batch_first, n_out, layout=1, **attrs)
    got = ember.compile(model).run(batch_first)
    time_first = {
        k: v.swapaxes(0, 1) if k != "W" and k != "R" and k != "B" else v
        for k, v in batch_first.items()
    }
    want = run_ort(_model(op, time_first, n_out, **attrs), time_first)
    np.testing.assert_allclose(got[0], want[0].transpose(2, 0, 1, 3), rtol=1e-4, atol=2e-5)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w.swapaxes(0, 1), rtol=1e-4, atol=2e-5)


def test_lstm_clip_input_forget_and_no_bias() -> None:
    rng = np.random.default_rng(6)
    inputs = _inputs(rng, "LSTM", 5, 2, 4, 5, 1, bias=False)
    inputs["X"] *= 4
    _check("LSTM", inputs, 3, hidden_size=5, clip=0.7, input_forget=1)


@pytest.mark.parametrize(
    ("op", "acts", "alpha", "beta"),
    [
        ("LSTM", ["HardSigmoid", "Tanh", "Elu"], [0.3, 0.7], [0.4]),
        ("LSTM", ["Sigmoid", "Softsign", "Softplus"], None, None),
        ("GRU", ["LeakyRelu", "ScaledTanh"], [0.1, 0.8], [1.2]),
        ("GRU", ["Sigmoid", "Relu", "HardSigmoid", "Tanh"], None, None),
        ("RNN", ["Affine"], [0.5], [0.1]),
        ("RNN", ["ThresholdedRelu"], [0.2], None),
    ],
)
def test_custom_activations(op: str, acts: list[str], alpha, beta) -> None:
    rng = np.random.default_rng(7)
    dirs = len(acts) // (3 if op == "LSTM" else 2 if op == "GRU" else 1)
    inputs = _inputs(rng, op, 4, 3, 5, 4, dirs)
    attrs = {"activations": acts}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    direction = "bidirectional" if dirs == 2 else "forward"
    _check(op, inputs, 2, hidden_size=4, direction=direction, **attrs)


@pytest.mark.parametrize("opset", [7, 14])
def test_older_opsets_and_only_y_h(opset: int) -> None:
    rng = np.random.default_rng(8)
    inputs = _inputs(rng, "GRU", 3, 2, 4, 3, 1)
    node = helper.make_node("GRU", list(inputs), ["", "Y_h"], hidden_size=3)
    check_against_ort(make_model([node], inputs, ["Y_h"], opset=opset), inputs, 1e-4, 2e-5)


def test_constant_weights_fold_into_one_cell_kernel() -> None:
    """Weights as initializers: transposes and bias sums fold; every step is a cell node."""
    rng = np.random.default_rng(9)
    inputs = _inputs(rng, "LSTM", 6, 2, 3, 4, 1)
    x = {"X": inputs.pop("X")}
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], hidden_size=4)
    model = make_model([node], x, ["Y"], initializers=inputs)
    graph = ember.frontend.from_onnx(model)
    ops = [n.op for n in graph.nodes]
    assert ops.count("lstm_cell") == 6 and "transpose" not in ops
    check_against_ort(model, x, rtol=1e-4, atol=2e-5)


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    op=st.sampled_from(["LSTM", "GRU", "RNN"]),
    t=st.integers(1, 4),
    b=st.integers(1, 3),
    i=st.integers(1, 5),
    h=st.integers(1, 5),
    direction=st.sampled_from(["forward", "reverse", "bidirectional"]),
    with_lens=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_property_shapes_and_directions(op, t, b, i, h, direction, with_lens, seed) -> None:
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    lens = rng.integers(1, t + 1, size=b) if with_lens else None
    inputs = _inputs(rng, op, t, b, i, h, dirs, lens=lens, initial=True)
    _check(op, inputs, 2, hidden_size=h, direction=direction)


@pytest.mark.parametrize(
    ("attrs", "phrase"),
    [
        ({"activations": ["Sigmoid", "Gelu"]}, "activation 'gelu' is not supported"),
        ({"activations": ["Sigmoid"]}, "'activations' has 1 entries"),
        ({"direction": "sideways"}, "unknown direction 'sideways'"),
        ({"clip": -1.0}, "clip must be positive"),
        ({"hidden_size": 9}, "hidden_size 9 does not match"),
    ],
)
def test_bad_attributes_raise(attrs: dict, phrase: str) -> None:
    rng = np.random.default_rng(10)
    inputs = _inputs(rng, "GRU", 3, 2, 4, 3, 1)
    attrs = {"hidden_size": 3, **attrs}
    node = helper.make_node("GRU", list(inputs), ["Y"], name="gru_bad", **attrs)
    model = make_model([node], inputs, ["Y"])
    with pytest.raises(ember.ArgumentError, match="gru_bad") as info:
        ember.frontend.from_onnx(model)
    assert phrase in str(info.value)


def test_symbolic_time_axis_is_rejected() -> None:
    rng = np.random.default_rng(11)
    inputs = _inputs(rng, "RNN", 3, 2, 4, 3, 1, bias=False)
    model = single_node("RNN", inputs, hidden_size=3)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "T"
    with pytest.raises(ember.ArgumentError, match="static 3-D float tensor"):
        ember.frontend.from_onnx(model)


@pytest.mark.nvrtc
def test_bidirectional_lstm_with_lens_on_cuda_emulated(monkeypatch) -> None:
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    rng = np.random.default_rng(12)
    inputs = _inputs(rng, "LSTM", 3, 2, 3, 4, 2, lens=np.array([3, 2]), initial=True, peep=True)
    model = _model("LSTM", inputs, 3, hidden_size=4, direction="bidirectional")
    got = ember.compile(model, target="cuda").run(inputs)
    for g, w in zip(got, run_ort(model, inputs)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_other_float_dtypes_follow_float32(dtype: str) -> None:
    """onnxruntime's CPU recurrent kernels take float32 only: the float32 run is the
    reference for a float64 / float16 model of the same layer."""
    rng = np.random.default_rng(13)
    inputs = _inputs(rng, "GRU", 4, 2, 3, 5, 2, lens=np.array([4, 3]), initial=True)
    attrs = {"hidden_size": 5, "direction": "bidirectional"}
    want = run_ort(_model("GRU", inputs, 2, **attrs), inputs)
    cast = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in inputs.items()}
    model = _model("GRU", cast, 2, **attrs)
    got = ember.compile(model).run(cast)
    tol = 1e-5 if dtype == "float64" else 2e-2
    for g, w in zip(got, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g.astype(np.float32), w, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("name", "shape", "phrase"),
    [("W", (1, 12, 5), "W has shape [1, 12, 5], expected [1, 12, 4]"),
     ("B", (1, 17), "B has shape [1, 17], expected [1, 24]"),
     ("initial_h", (1, 3, 3), "initial_h has shape [1, 3, 3], expected [1, 2, 3]")],
)  # fmt: skip
def test_bad_input_shapes_raise(name: str, shape: tuple[int, ...], phrase: str) -> None:
    rng = np.random.default_rng(14)
    inputs = _inputs(rng, "LSTM", 3, 2, 4, 3, 1, initial=True)
    inputs[name] = rng.standard_normal(shape).astype(np.float32)
    model = _model("LSTM", inputs, 1, hidden_size=3)
    with pytest.raises(ember.ArgumentError, match="ONNX node 'lstm_node'") as info:
        ember.frontend.from_onnx(model)
    assert phrase in str(info.value)


def test_long_sequence_concatenates_in_a_tree() -> None:
    rng = np.random.default_rng(15)
    inputs = _inputs(rng, "RNN", 70, 2, 3, 4, 2, lens=np.array([70, 41]))
    model = _model("RNN", inputs, 2, hidden_size=4, direction="bidirectional")
    widest = max(len(n.inputs) for n in ember.frontend.from_onnx(model).nodes if n.op == "concat")
    assert widest <= 32
    check_against_ort(model, inputs, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_constant_weights_odd_hidden_both_directions(op: str) -> None:
    """Weights as initializers, so each direction's input projection is a packed GEMM whose
    gate columns (4H = 148, 3H = 111) end inside a weight panel; hidden 37, 5 steps,
    batch 3, runtime lengths."""
    rng = np.random.default_rng(16)
    lens = np.array([5, 2, 4])
    inputs = _inputs(rng, op, 5, 3, 6, 37, 2, lens=lens, initial=True)
    inputs.pop("initial_c", None)
    feeds = {k: inputs.pop(k) for k in ("X", "sequence_lens")}
    names = [k if k in inputs or k in feeds else "" for k in ORDER[:6]]  # initial_h last
    node = helper.make_node(op, names, ["Y", "Y_h"], hidden_size=37, direction="bidirectional")
    model = make_model([node], feeds, ["Y", "Y_h"], initializers=inputs)
    assert "dense_packed" in [n.op for n in ember.compile(model).graph.nodes]
    check_against_ort(model, feeds, rtol=1e-4, atol=2e-5)
