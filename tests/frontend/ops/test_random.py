"""ONNX's random ops (RandomUniform/Normal and their Like forms, Bernoulli, Multinomial).

No generator reproduces another's numbers, so the reference here is the distributions
themselves: Kolmogorov-Smirnov distances against the exact CDFs (uniform, normal),
frequencies against the probabilities (Bernoulli, Multinomial), neighbour correlations
near zero, and the seed's role (the same seed draws the same numbers, another seed
others). The thresholds are the tests' 0.1% critical values, and the seeds are fixed,
so a pass is reproducible.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

F32, F64, F16 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16


def _model(node, inputs=(), outputs=()):  # noqa: ANN001, ANN202
    graph = helper.make_graph([node], "g", list(inputs), list(outputs))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def _io(name: str, elem: int, shape: list[int]):  # noqa: ANN202
    return helper.make_tensor_value_info(name, elem, shape)


def _ks(sample: np.ndarray, cdf) -> float:  # noqa: ANN001
    """The Kolmogorov-Smirnov distance between ``sample`` and ``cdf``."""
    x = np.sort(sample.astype(np.float64).ravel())
    n = x.size
    f = cdf(x)
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def _ks_limit(n: int) -> float:
    return 1.95 / math.sqrt(n)  # the 0.1% critical value


_normal_cdf = np.vectorize(lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2))))


@pytest.mark.parametrize("elem,dtype", [(F32, np.float32), (F64, np.float64), (F16, np.float16)])
def test_uniform_draws_fill_their_range_evenly(elem, dtype):
    shape = [97, 211]  # odd sizes: the position counter crosses rows
    node = helper.make_node(
        "RandomUniform", [], ["y"], shape=shape, low=-2.0, high=5.0, seed=7.0, dtype=elem
    )
    (y,) = ember.compile(_model(node, outputs=[_io("y", elem, shape)])).run({})
    assert y.dtype == dtype and y.shape == tuple(shape)
    assert y.min() >= -2 and y.max() <= 5  # float16 rounding may reach the top
    assert _ks(y, lambda x: (x + 2) / 7) < _ks_limit(y.size) + (2e-3 if dtype == np.float16 else 0)
    flat = y.ravel().astype(np.float64)
    assert abs(np.corrcoef(flat[:-1], flat[1:])[0, 1]) < 0.02  # neighbours independent


def test_normal_draws_have_the_mean_scale_and_shape_asked():
    shape = [3, 20011]
    node = helper.make_node("RandomNormal", [], ["y"], shape=shape, mean=1.5, scale=0.25, seed=1.0)
    (y,) = ember.compile(_model(node, outputs=[_io("y", F32, shape)])).run({})
    z = (y.astype(np.float64) - 1.5) / 0.25
    assert np.isfinite(z).all()
    assert _ks(z, _normal_cdf) < _ks_limit(z.size)
    flat = z.ravel()
    assert abs(np.corrcoef(flat[:-1], flat[1:])[0, 1]) < 0.02


def test_like_forms_take_the_inputs_shape_and_dtype(rng):
    x = rng.standard_normal((5, 7, 9))
    inputs = [_io("x", F64, list(x.shape))]
    for op, extra in [("RandomUniformLike", {"low": 3.0, "high": 4.0}), ("RandomNormalLike", {})]:
        node = helper.make_node(op, ["x"], ["y"], seed=2.0, **extra)
        (y,) = ember.compile(_model(node, inputs, [_io("y", F64, list(x.shape))])).run([x])
        assert y.dtype == np.float64 and y.shape == x.shape and np.isfinite(y).all()
        node = helper.make_node(op, ["x"], ["y"], seed=2.0, dtype=F32, **extra)
        (y32,) = ember.compile(_model(node, inputs, [_io("y", F32, list(x.shape))])).run([x])
        assert y32.dtype == np.float32
    assert 3 <= y.min() or op != "RandomUniformLike"


def test_a_seed_fixes_the_draws_and_no_seed_draws_anew():
    def draws(**seed: float) -> np.ndarray:
        node = helper.make_node("RandomUniform", [], ["y"], shape=[64], **seed)
        return ember.compile(_model(node, outputs=[_io("y", F32, [64])])).run({})[0]

    same = draws(seed=3.0)
    np.testing.assert_array_equal(draws(seed=3.0), same)
    assert not np.array_equal(draws(seed=4.0), same)
    assert not np.array_equal(draws(), draws())


def test_bernoulli_follows_each_elements_probability(rng):
    p = np.concatenate([np.zeros(50), np.ones(50), np.full(40000, 0.3), [np.nan]]).astype(
        np.float32
    )
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=5.0, dtype=TensorProto.INT32)
    lib = ember.compile(
        _model(node, [_io("p", F32, [p.size])], [_io("y", TensorProto.INT32, [p.size])])
    )
    (y,) = lib.run([p])
    assert y.dtype == np.int32 and set(np.unique(y)) <= {0, 1}
    assert (y[:50] == 0).all() and (y[50:100] == 1).all() and y[-1] == 0  # NaN: never
    hits = y[100:-1]
    assert abs(hits.mean() - 0.3) < 3.3 * math.sqrt(0.3 * 0.7 / hits.size)
    # a run-time probability tensor: other values, other frequencies, same compiled model
    (y2,) = lib.run([np.full(p.size, 0.9, np.float32)])
    assert abs(y2.mean() - 0.9) < 0.01


def test_bernoulli_output_types(rng):
    p = rng.uniform(0, 1, (6, 5)).astype(np.float64)
    for elem, dtype in [
        (TensorProto.BOOL, np.bool_),
        (F64, np.float64),
        (TensorProto.UINT8, np.uint8),
    ]:
        node = helper.make_node("Bernoulli", ["p"], ["y"], seed=1.0, dtype=elem)
        model = _model(node, [_io("p", F64, [6, 5])], [_io("y", elem, [6, 5])])
        (y,) = ember.compile(model).run([p])
        assert y.dtype == dtype and set(np.unique(y.astype(np.int64))) <= {0, 1}


def test_multinomial_draws_classes_by_their_softmax():
    logits = np.log(np.array([[1, 2, 3, 4], [4, 3, 2, 1], [1e-4, 1, 1, 100]], np.float32))
    logits[1] += 500  # large logits: the weights are taken relative to the row's maximum
    n = 20000
    node = helper.make_node(
        "Multinomial", ["x"], ["y"], seed=9.0, sample_size=n, dtype=TensorProto.INT64
    )
    model = _model(node, [_io("x", F32, [3, 4])], [_io("y", TensorProto.INT64, [3, n])])
    (y,) = ember.compile(model).run([logits])
    assert y.dtype == np.int64 and y.min() >= 0 and y.max() <= 3
    for row, lg in zip(y, logits.astype(np.float64)):
        p = np.exp(lg - lg.max())
        p /= p.sum()
        freq = np.bincount(row, minlength=4) / n
        assert np.all(np.abs(freq - p) < 3.3 * np.sqrt(p * (1 - p) / n) + 1e-9), (freq, p)


def test_multinomial_defaults_and_one_class():
    node = helper.make_node("Multinomial", ["x"], ["y"], seed=1.0)  # int32, one sample
    model = _model(node, [_io("x", F32, [5, 1])], [_io("y", TensorProto.INT32, [5, 1])])
    (y,) = ember.compile(model).run([np.zeros((5, 1), np.float32) + 3])
    assert y.dtype == np.int32 and (y == 0).all()


@pytest.mark.parametrize(
    "node,inputs,why",
    [
        (helper.make_node("RandomUniform", [], ["y"], shape=[2, -1]), [], "negative size"),
        (
            helper.make_node("RandomNormal", [], ["y"], shape=[2], dtype=TensorProto.INT32),
            [],
            "floating point",
        ),
        (
            helper.make_node("Multinomial", ["x"], ["y"], sample_size=0),
            [_io("x", F32, [2, 3])],
            "one sample",
        ),
        (helper.make_node("Multinomial", ["x"], ["y"]), [_io("x", F32, [6])], "batch, classes"),
        (
            helper.make_node("Bernoulli", ["x"], ["y"]),
            [_io("x", TensorProto.INT32, [3])],
            "floating point",
        ),
    ],
)
def test_bad_attributes_are_clear_errors(node, inputs, why):
    model = _model(node, inputs, [_io("y", F32, [1])])
    with pytest.raises(ember.EmberError, match=why):
        ember.compile(model)


def test_cuda_draws_the_same_bits_as_the_cpu(monkeypatch):
    """Counter-based: the emulated CUDA kernel computes the CPU's draws bit for bit."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    p = np.random.default_rng(0).uniform(0, 1, (33, 17)).astype(np.float32)
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=3.0)
    model = _model(node, [_io("p", F32, [33, 17])], [_io("y", F32, [33, 17])])
    want = ember.compile(model, target="llvm").run([p])[0]
    got = ember.compile(model, target="cuda").run([p])[0]
    np.testing.assert_array_equal(got, want)
    assert 0.3 < want.mean() < 0.7


def test_folded_and_compiled_draws_agree():
    """Element ``i`` draws ``hash(key, i)`` wherever it is computed: small outputs are
    folded by the interpreter, large ones by a compiled kernel. Uniform draws agree bit
    for bit; normal ones to the last place of the math libraries' log and cos."""

    def draws(op: str, n: int) -> np.ndarray:
        node = helper.make_node(op, [], ["y"], shape=[n], seed=11.0)
        return ember.compile(_model(node, outputs=[_io("y", F32, [n])])).run({})[0]

    np.testing.assert_array_equal(draws("RandomUniform", 6000)[:100], draws("RandomUniform", 100))
    np.testing.assert_allclose(
        draws("RandomNormal", 6000)[:100], draws("RandomNormal", 100), rtol=1e-6, atol=1e-6
    )
