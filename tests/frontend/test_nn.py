"""``ember.frontend.nn`` models against numpy references written here from the weights,
and against onnxruntime on the traced ONNX model.

The numpy forward passes are independent of Ember and of the tracer: they read the
modules' parameters and compute what PyTorch's layers compute.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.frontend import nn

pytest.importorskip("onnx")
RTOL, ATOL = 1e-4, 1e-5


def _run(module: nn.Module, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    spec = {k: (v.shape, str(v.dtype)) for k, v in feeds.items()}
    return ember.compile(module.export(spec)).run(feeds)


def _ort(module: nn.Module, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    spec = {k: (v.shape, str(v.dtype)) for k, v in feeds.items()}
    proto = module.to_onnx(spec)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(module: nn.Module, feeds: dict[str, np.ndarray], want: np.ndarray) -> None:
    np.testing.assert_allclose(_ort(module, feeds)[0], want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(_run(module, feeds)[0], want, rtol=RTOL, atol=ATOL)


def np_linear(x, lin):
    y = x @ lin.weight.T
    return y + lin.bias if lin.has_bias else y


def np_layer_norm(x, ln):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + ln.eps) * ln.weight + ln.bias


def np_gelu(x):
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2.0)))


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_mha(x, m):
    b, s, e = x.shape
    h, d = m.num_heads, e // m.num_heads
    w, bias = m.in_proj_weight, m.in_proj_bias
    q, k, v = (
        (x @ w[i * e : (i + 1) * e].T + bias[i * e : (i + 1) * e])
        .reshape(b, s, h, d)
        .transpose(0, 2, 1, 3)
        for i in range(3)
    )
    ctx = np_softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)) @ v
    return np_linear(ctx.transpose(0, 2, 1, 3).reshape(b, s, e), m.out_proj)


class MLP(nn.Module):
    def __init__(self, sizes=(37, 64, 10)):
        super().__init__()
        self.fc1, self.act, self.fc2 = (
            nn.Linear(sizes[0], sizes[1]),
            nn.ReLU(),
            nn.Linear(*sizes[1:]),
        )

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_mlp_matches_numpy_and_onnxruntime():
    nn.manual_seed(1)
    model = MLP()
    x = np.random.default_rng(0).standard_normal((5, 37)).astype("float32")
    want = np_linear(np.maximum(np_linear(x, model.fc1), 0), model.fc2)
    _check(model, {"x": x}, want)


def test_linear_on_3d_input_and_residual_arithmetic():
    nn.manual_seed(2)

    class Res(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(24, 24, bias=True)

        def forward(self, x):
            return (self.lin(x) - x) * 0.5 + 1.0

    model = Res()
    x = np.random.default_rng(1).standard_normal((3, 7, 24)).astype("float32")
    _check(model, {"x": x}, (np_linear(x, model.lin) - x) * 0.5 + 1.0)


class TinyEncoder(nn.Module):
    """A pre-norm transformer encoder layer, as in BERT-style models."""

    def __init__(self, e=32, heads=4, hidden=64):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(e), nn.MultiheadAttention(e, heads, batch_first=True)
        self.ln2, self.fc1, self.act, self.fc2 = (
            nn.LayerNorm(e),
            nn.Linear(e, hidden),
            nn.GELU(),
            nn.Linear(hidden, e),
        )

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


def test_transformer_encoder_layer():
    nn.manual_seed(3)
    model = TinyEncoder()
    rng = np.random.default_rng(2)
    # non-trivial norms, so a LayerNorm that ignored its parameters would show
    model.load_state_dict(
        {
            "ln1.weight": rng.uniform(0.5, 1.5, 32),
            "ln1.bias": rng.standard_normal(32),
            "ln2.weight": rng.uniform(0.5, 1.5, 32),
            "ln2.bias": rng.standard_normal(32),
            "attn.in_proj_bias": rng.standard_normal(96) * 0.1,
        },
        strict=False,
    )
    x = rng.standard_normal((2, 9, 32)).astype("float32")
    h = x + np_mha(np_layer_norm(x, model.ln1), model.attn)
    f = np_linear(np_gelu(np_linear(np_layer_norm(h, model.ln2), model.fc1)), model.fc2)
    _check(model, {"x": x}, (h + f).astype("float32"))


def np_conv(x, conv):
    w = conv.weight
    ph, pw = conv.padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, _, hh, ww = xp.shape
    o, _, kh, kw = w.shape
    sh, sw = conv.stride
    oh, ow = (hh - kh) // sh + 1, (ww - kw) // sw + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i : i + sh * oh : sh, j : j + sw * ow : sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return (out + conv.bias[None, :, None, None]).astype(np.float32)


def test_conv_batchnorm_pool_classifier():
    nn.manual_seed(4)
    model = nn.Sequential(
        nn.Conv2d(3, 6, 3, stride=2, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(6 * 3 * 4, 5),
        nn.Softmax(-1),
    )
    rng = np.random.default_rng(3)
    bn = model.layers[1]
    bn.load_state_dict(
        {
            "weight": rng.uniform(0.5, 2, 6),
            "bias": rng.standard_normal(6),
            "running_mean": rng.standard_normal(6),
            "running_var": rng.uniform(0.5, 2, 6),
        }
    )
    x = rng.standard_normal((2, 3, 13, 15)).astype("float32")
    c = np_conv(x, model.layers[0])
    c = (c - bn.running_mean[:, None, None]) / np.sqrt(bn.running_var[:, None, None] + bn.eps)
    c = np.maximum(c * bn.weight[:, None, None] + bn.bias[:, None, None], 0)
    p = c[:, :, :6, :8].reshape(2, 6, 3, 2, 4, 2).max(axis=(3, 5))
    want = np_softmax(np_linear(p.reshape(2, -1), model.layers[5]))
    _check(model, {"x": x}, want.astype("float32"))


def test_embedding_takes_int64_ids():
    nn.manual_seed(5)
    emb = nn.Embedding(50, 16)
    ids = np.random.default_rng(4).integers(0, 50, size=(3, 11)).astype("int64")
    _check(emb, {"ids": ids}, emb.weight[ids])


def test_state_dict_names_and_errors():
    model = MLP()
    assert set(model.state_dict()) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    with pytest.raises(ember.ArgumentError, match="shape"):
        model.load_state_dict({**model.state_dict(), "fc1.bias": np.zeros(3)})
    with pytest.raises(ember.ArgumentError, match="unknown parameters"):
        model.load_state_dict({**model.state_dict(), "fc3.weight": np.zeros(3)})
    with pytest.raises(ember.ArgumentError, match="nn.Linear"):
        model.export({"x": (4, 36)})
    with pytest.raises(ember.ArgumentError, match="positive ints"):
        model.export({"x": (4, 0)})


def test_safetensors_weights(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    model = MLP()
    rng = np.random.default_rng(6)
    new = {k: rng.standard_normal(v.shape).astype("float32") for k, v in model.state_dict().items()}
    st.save_file(new, str(tmp_path / "w.safetensors"))
    model.load_safetensors(tmp_path / "w.safetensors")
    np.testing.assert_array_equal(model.fc2.weight, new["fc2.weight"])
