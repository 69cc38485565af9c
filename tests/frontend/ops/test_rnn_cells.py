"""The recurrent-step kernels (tir/topi/rnn.py) against numpy, one step at a time."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.frontend.graph import TensorType
from ember.graph.kernels import get_kernel
from tests.nightly import examples

NP_ACTS = {
    "relu": lambda x, a, b: np.maximum(x, 0),
    "tanh": lambda x, a, b: np.tanh(x),
    "sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "elu": lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)),
    "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "softplus": lambda x, a, b: np.logaddexp(0, x),
}


def _types(*arrays: np.ndarray) -> list[TensorType]:
    return [TensorType(a.shape, str(a.dtype)) for a in arrays]


@settings(max_examples=examples(12), deadline=None)
@given(
    act=st.sampled_from(sorted(NP_ACTS)),
    alpha=st.floats(0.1, 2.0),
    beta=st.floats(-1.0, 1.0),
    clip=st.sampled_from([0.0, 0.5, 3.0]),
    t=st.integers(0, 2),
    lens=st.booleans(),
    seed=st.integers(0, 99),
)
def test_rnn_step_each_activation(act, alpha, beta, clip, t, lens, seed) -> None:
    rng = np.random.default_rng(seed)
    b, h = 3, 5
    xp = (rng.standard_normal((3, b, h)) * 3).astype(np.float32)
    h0 = rng.standard_normal((b, h)).astype(np.float32)
    rt = rng.standard_normal((h, h)).astype(np.float32)
    tidx = np.array([t], np.int64)
    seq = np.array([3, 1, 2], np.int32)
    arrays = [xp, tidx, h0, rt] + ([seq] if lens else [])
    attrs = {"activations": ((act, alpha, beta),), "clip": clip}
    h1, y = get_kernel("rnn_cell", attrs, _types(*arrays)).run(arrays)
    pre = xp[t] + h0 @ rt
    if clip:
        pre = np.clip(pre, -clip, clip)
    want = NP_ACTS[act](pre.astype(np.float64), alpha, beta)
    live = (t < seq)[:, None] if lens else np.ones((b, 1), bool)
    np.testing.assert_allclose(h1, np.where(live, want, h0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y[0, 0], np.where(live, want, 0), rtol=1e-5, atol=1e-5)


def _sig(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("input_forget", [False, True])
def test_lstm_step_with_peepholes(input_forget: bool) -> None:
    rng = np.random.default_rng(1)
    b, h = 2, 3
    xp = rng.standard_normal((4, b, 4 * h)).astype(np.float32)
    h0, c0 = (rng.standard_normal((b, h)).astype(np.float32) for _ in range(2))
    rt = rng.standard_normal((h, 4 * h)).astype(np.float32)
    p = rng.standard_normal(3 * h).astype(np.float32)
    arrays = [xp, np.array([2], np.int64), h0, c0, rt, p]
    acts = (("sigmoid", 0.0, 0.0), ("tanh", 0.0, 0.0), ("tanh", 0.0, 0.0))
    attrs = {"activations": acts, "clip": 0.0, "input_forget": input_forget}
    h1, c1, y = get_kernel("lstm_cell", attrs, _types(*arrays)).run(arrays)
    g = xp[2] + h0 @ rt
    i = _sig(g[:, :h] + p[:h] * c0)
    f = 1 - i if input_forget else _sig(g[:, 2 * h : 3 * h] + p[2 * h :] * c0)
    c = f * c0 + i * np.tanh(g[:, 3 * h :])
    o = _sig(g[:, h : 2 * h] + p[h : 2 * h] * c)
    np.testing.assert_allclose(c1, c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h1, o * np.tanh(c), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y[0, 0], h1)


@pytest.mark.parametrize("lbr", [False, True])
def test_gru_step(lbr: bool) -> None:
    rng = np.random.default_rng(2)
    b, h = 3, 4
    xp = rng.standard_normal((2, b, 3 * h)).astype(np.float32)
    h0 = rng.standard_normal((b, h)).astype(np.float32)
    rt = rng.standard_normal((h, 3 * h)).astype(np.float32)
    rbh = rng.standard_normal(h).astype(np.float32)
    arrays = [xp, np.array([1], np.int64), h0, rt, rbh]
    acts = (("sigmoid", 0.0, 0.0), ("tanh", 0.0, 0.0))
    attrs = {"activations": acts, "clip": 0.0, "linear_before_reset": lbr}
    h1, y, _ = get_kernel("gru_cell", attrs, _types(*arrays)).run(arrays)
    x = xp[1]
    z = _sig(x[:, :h] + h0 @ rt[:, :h])
    r = _sig(x[:, h : 2 * h] + h0 @ rt[:, h : 2 * h])
    if lbr:
        cand = np.tanh(x[:, 2 * h :] + r * (h0 @ rt[:, 2 * h :] + rbh))
    else:
        cand = np.tanh(x[:, 2 * h :] + (r * h0) @ rt[:, 2 * h :] + rbh)
    np.testing.assert_allclose(h1, (1 - z) * cand + z * h0, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("time_axis", "batch_axis"), [(0, 1), (1, 0), (0, 2)])
def test_reverse_sequence(time_axis: int, batch_axis: int) -> None:
    rng = np.random.default_rng(3)
    shape = [5, 3, 2] if batch_axis != 2 else [5, 1, 3]
    shape[time_axis], shape[batch_axis] = 5, 3
    x = rng.standard_normal(shape).astype(np.float32)
    lens = np.array([5, 1, 3], np.int64)
    attrs = {"time_axis": time_axis, "batch_axis": batch_axis}
    (got,) = get_kernel("reverse_sequence", attrs, _types(x, lens)).run([x, lens])
    want = x.copy()
    for b, n in enumerate(lens):
        src = [slice(None)] * x.ndim
        src[batch_axis], src[time_axis] = b, slice(0, n)
        dst = list(src)
        want[tuple(dst)] = np.flip(x[tuple(src)], axis=time_axis - (batch_axis < time_axis))
    np.testing.assert_array_equal(got, want)
