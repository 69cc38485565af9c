"""ONNX Adagrad, Adam, Momentum (``ai.onnx.preview.training``), TensorScatter, Swish and
Binarizer (``ai.onnx.ml``) on random data with odd sizes.

onnxruntime has no optimizer steps, so they are checked against the formulas of their
ONNX definitions written out below in float64 numpy, over several (X, G, [V,] H) groups,
with the learning rate and step count fed at run time (one compile serves every step).
TensorScatter, Swish and float32 Binarizer are checked against onnxruntime; Binarizer on
other dtypes (onnxruntime has float only), and TensorScatter's negative write indices
(onnxruntime refuses them), against numpy; a linear write off the cache is refused at
run time, as onnxruntime refuses it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember
from tests.frontend.ops.shape_models import check

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

TRAINING = "ai.onnx.preview.training"


def _model(
    op: str,
    inputs: dict[str, np.ndarray],
    outputs: dict[str, np.ndarray],
    domain: str,
    consts: tuple[str, ...] = (),
    version: int = 1,
    **attrs: Any,
):
    """One ``op`` node of ``domain`` at opset ``version``; outputs typed like the example
    arrays given, inputs named in ``consts`` become initializers."""

    def info(name: str, a: np.ndarray):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape
        )

    node = helper.make_node(op, list(inputs), list(outputs), domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        "test",
        [info(k, v) for k, v in inputs.items() if k not in consts],
        [info(k, v) for k, v in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in inputs.items() if k in consts],
    )
    opsets = [helper.make_opsetid(domain, version)]
    if domain:
        opsets.append(helper.make_opsetid("", 17))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def _f(rng, *shape, dtype=np.float32, positive=False):
    a = rng.uniform(0.1, 2.0, shape) if positive else rng.uniform(-2.0, 2.0, shape)
    a = np.where(np.abs(a) < 0.05, 0.3, a)  # never zero
    return a.astype(dtype)


SHAPES = [(3, 5), (7,), (2, 1, 3)]


def _groups(rng, states: str, dtype) -> dict[str, list[np.ndarray]]:
    """X, G and each state (V, H) for every shape in SHAPES; squared-gradient states positive."""
    out = {"X": [_f(rng, *s, dtype=dtype) for s in SHAPES]}
    out["G"] = [_f(rng, *s, dtype=dtype) for s in SHAPES]
    for k in states:
        out[k] = [_f(rng, *s, dtype=dtype, positive=(k == "H")) for s in SHAPES]
    return out


def _as_stored(attrs: dict[str, Any]) -> dict[str, Any]:
    """Attributes as the model holds them: floats rounded to float32."""
    return {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in attrs.items()}


def _run_steps(op, groups, out_kinds, attrs, steps, reference, dtype, consts=()):
    """Compile ``op`` over ``groups`` once and check it at every (R, T) in ``steps``."""
    names = list(groups)
    inputs: dict[str, np.ndarray] = {"R": np.array(0.3, np.float32), "T": np.array(1, np.int64)}
    for k in names:
        for i, a in enumerate(groups[k]):
            inputs[f"{k}{i}"] = a
    outputs = {f"{k}{i}_new": groups[k][i] for k in out_kinds for i in range(len(SHAPES))}
    if consts:
        inputs["R"], inputs["T"] = np.array(steps[0][0], np.float32), np.array(steps[0][1])
    model = _model(op, inputs, outputs, TRAINING, consts, **attrs)
    lib = ember.compile(model, target="llvm")
    for r, t in steps:
        feeds = dict(inputs, R=np.array(r, np.float32), T=np.array(t, np.int64))
        got = lib.run({k: v for k, v in feeds.items() if k not in consts})
        want: dict[str, list[np.ndarray]] = {k: [] for k in out_kinds}
        for i in range(len(SHAPES)):
            arrays = (groups[k][i].astype(np.float64) for k in names)
            one = reference(float(np.float32(r)), t, *arrays, **_as_stored(attrs))
            for k, w in zip(out_kinds, one):
                want[k].append(w)
        flat = [w for k in out_kinds for w in want[k]]
        assert len(got) == len(flat)
        tol = 1e-5 if dtype == np.float32 else 1e-10
        for g, w in zip(got, flat):
            assert g.dtype == dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def _adagrad(r, t, x, g, h, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0):
    rate = r / (1 + t * decay_factor)
    g = norm_coefficient * x + g
    h = h + g * g
    return x - rate * g / (np.sqrt(h) + epsilon), h


def _adam(r, t, x, g, v, h, alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0,
          norm_coefficient_post=0.0):  # fmt: skip
    g = norm_coefficient * x + g
    v = alpha * v + (1 - alpha) * g
    h = beta * h + (1 - beta) * g * g
    rate = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
    x = x - rate * v / (np.sqrt(h) + epsilon)
    return (1 - norm_coefficient_post) * x, v, h


def _momentum(r, t, x, g, v, alpha, beta, mode, norm_coefficient):
    g = norm_coefficient * x + g
    v = alpha * v + (beta if t > 0 else 1.0) * g
    if mode == "nesterov":
        return x - r * (g + alpha * v), v
    return x - r * v, v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "attrs", [{}, {"decay_factor": 0.3, "epsilon": 0.01, "norm_coefficient": 0.2}]
)
def test_adagrad_matches_its_definition(rng, dtype, attrs):
    groups = _groups(rng, "H", dtype)
    steps = [(0.3, 0), (0.17, 5)]
    _run_steps("Adagrad", groups, "XH", attrs, steps, _adagrad, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"alpha": 0.8, "beta": 0.7, "epsilon": 0.02, "norm_coefficient": 0.1},
        {"alpha": 0.95, "beta": 0.85, "norm_coefficient_post": 0.05},
    ],
)
def test_adam_matches_its_definition(rng, dtype, attrs):
    groups = _groups(rng, "VH", dtype)
    steps = [(0.3, 0), (0.2, 1), (0.11, 7)]  # T = 0: no bias correction
    _run_steps("Adam", groups, "XVH", attrs, steps, _adam, dtype)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_momentum_matches_its_definition(rng, mode, dtype):
    attrs = {"alpha": 0.85, "beta": 0.6, "mode": mode, "norm_coefficient": 0.05}
    groups = _groups(rng, "V", dtype)
    steps = [(0.3, 0), (0.13, 4)]  # T = 0: the gradient counts whole
    _run_steps("Momentum", groups, "XV", attrs, steps, _momentum, dtype)


def test_optimizer_with_constant_rate_and_step(rng):
    """R and T as initializers fold into the graph and give the same numbers."""
    attrs = {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.01}
    groups = _groups(rng, "V", np.float32)
    _run_steps("Momentum", groups, "XV", attrs, [(0.25, 3)], _momentum, np.float32, ("R", "T"))


def test_optimizer_group_count_must_fit():
    x = np.ones((3,), np.float32)
    inputs = {"R": np.array(0.1, np.float32), "T": np.array(1, np.int64), "X": x, "G": x}
    model = _model("Adagrad", inputs, {"X_new": x}, TRAINING)
    with pytest.raises(ember.ArgumentError, match="Adagrad: 4 inputs"):
        ember.compile(model, target="llvm")


def test_momentum_mode_must_be_known():
    x = np.ones((3,), np.float32)
    inputs = {"R": np.array(0.1, np.float32), "T": np.array(1, np.int64), "X": x, "G": x, "V": x}
    attrs = {"alpha": 0.9, "beta": 0.5, "mode": "heavy", "norm_coefficient": 0.0}
    model = _model("Momentum", inputs, {"X_new": x, "V_new": x}, TRAINING, **attrs)
    with pytest.raises(ember.ArgumentError, match="mode 'heavy'"):
        ember.compile(model, target="llvm")


# ---- TensorScatter ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "cache, length, axis, mode, starts",
    [
        ((3, 2, 7, 5), 3, -2, "linear", [0, 4, 2]),
        ((3, 2, 7, 5), 3, -2, "circular", [5, 6, 13]),  # wraps past the end, and twice round
        ((5, 3, 3), 2, 1, "circular", [0, 1, 2, 3, 4]),  # more batches than cache positions
        ((3, 5, 7, 2), 4, 2, "linear", [1, 3, 0]),  # a sequence axis with two axes after it
        ((3, 7), 7, 1, "circular", [2, 0, 6]),  # the update fills the whole cache
        ((3, 4, 5), 2, -2, "linear", None),  # no write indices: every batch starts at 0
    ],
)
def test_tensor_scatter_matches_onnxruntime(rng, cache, length, axis, mode, starts):
    past = _f(rng, *cache)
    shape = list(cache)
    shape[axis] = length
    slots = [("past", past), ("update", _f(rng, *shape))]
    if starts is not None:
        slots.append(("write", np.array(starts, np.int64)))
    check("TensorScatter", slots, opset=24, axis=axis, mode=mode)


def test_tensor_scatter_negative_start_counts_from_the_end(rng):
    """As numpy indexing in ONNX's reference does (onnxruntime refuses these)."""
    past, update = _f(rng, 2, 3, 6, 5), _f(rng, 2, 3, 4, 5)
    starts = np.array([-2, -6], np.int64)
    want = past.copy()
    for b in range(2):
        for j in range(4):
            want[b, :, starts[b] + j] = update[b, :, j]
    model = _model(
        "TensorScatter",
        {"past": past, "update": update, "write": starts},
        {"present": past},
        "",
        version=24,
    )
    got = ember.compile(model, target="llvm").run({"past": past, "update": update, "write": starts})
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize("starts", [[0, 3], [5, 0], [-7, 1], [2, 40]])
def test_tensor_scatter_refuses_a_write_off_the_cache(rng, starts):
    """Linear mode: a write index whose rows would leave the cache (a start past
    ``size - length``, or before ``-size``) is an error at run time, as onnxruntime
    makes it (where a gather of the rows would drop them), and the model still runs
    good indices afterwards."""
    past, update = _f(rng, 2, 3, 6, 5), _f(rng, 2, 3, 4, 5)
    bad = np.array(starts, np.int64)
    model = _model(
        "TensorScatter",
        {"past": past, "update": update, "write": bad},
        {"present": past},
        "",
        version=24,
    )
    lib = ember.compile(model, target="llvm")
    with pytest.raises(ember.ArgumentError, match="tensorscatter|TensorScatter"):
        lib.run({"past": past, "update": update, "write": bad})
    good = np.array([2, -6], np.int64)
    got = lib.run({"past": past, "update": update, "write": good})[0]
    want = past.copy()
    want[0, :, 2:6] = update[0]
    want[1, :, 0:4] = update[1]
    np.testing.assert_array_equal(got, want)


def test_tensor_scatter_refuses_a_batch_axis(rng):
    past = _f(rng, 4, 3)
    model = _model("TensorScatter", {"p": past, "u": past[:2]}, {"y": past}, "", version=24, axis=0)
    with pytest.raises(ember.ArgumentError, match="axis 0 is the batch axis"):
        ember.compile(model, target="llvm")


# ---- Swish, Binarizer ------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [1.0, 0.35, -1.7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_swish_matches_onnxruntime(rng, alpha, dtype):
    check("Swish", [("x", _f(rng, 3, 7, 5, dtype=dtype) * 4)], opset=24, alpha=alpha)


@pytest.mark.parametrize("threshold", [0.0, 0.37, -1.2])
def test_binarizer_matches_onnxruntime(rng, threshold):
    x = _f(rng, 3, 7, 5)
    x.flat[::11] = np.float32(threshold)  # equal to the threshold: not above it
    model = _model("Binarizer", {"x": x}, {"y": x}, "ai.onnx.ml", threshold=threshold)
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = ember.compile(model, target="llvm").run({"x": x})
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
@pytest.mark.parametrize("threshold", [2.0, 1.5, -2.5, 3e9, -3e9, float("nan")])
def test_binarizer_on_other_dtypes(rng, dtype, threshold):
    x = rng.integers(-4, 5, (3, 7, 5)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x += 0.5
    if np.dtype(dtype).itemsize == 8 and np.dtype(dtype).kind == "i":
        x[0, 0, :2] = [np.iinfo(np.int64).max, np.iinfo(np.int64).min]
    model = _model("Binarizer", {"x": x}, {"y": x}, "ai.onnx.ml", threshold=threshold)
    got = ember.compile(model, target="llvm").run({"x": x})[0]
    want = (x > np.float32(threshold)).astype(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)
