"""Issue 22, items 3, 4, 5 and 17: ``ember.frontend.nn`` means what PyTorch means.

Every layer is built with PyTorch's arguments (mostly its defaults), exported, compiled
with ``ember.compile`` and run on random data of odd shapes. Each result is checked
against a numpy reference written here from PyTorch's documented formulas (no torch
needed), and, where torch is installed, against ``torch.nn`` itself with the same
constructor arguments and the Ember layer's state dict loaded strictly (so parameter
names and shapes must match PyTorch's too).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import ember
from ember.frontend import nn

pytest.importorskip("onnx")
RTOL, ATOL = 1e-4, 1e-5
RNG = np.random.default_rng(22)

# Inputs of odd sizes: NCHW images, (L, N, E) sequences, batch-first attention inputs, ids.
INPUTS = {
    "x4": RNG.standard_normal((2, 3, 11, 13)).astype(np.float32),
    "x3": RNG.standard_normal((5, 2, 12)).astype(np.float32),
    "qbf": RNG.standard_normal((2, 5, 12)).astype(np.float32),
    "kbf": RNG.standard_normal((2, 7, 8)).astype(np.float32),
    "vbf": RNG.standard_normal((2, 7, 10)).astype(np.float32),
    "ids": RNG.integers(0, 10, size=(3, 4)).astype(np.int64),
}
INPUTS["ids"][0, 0] = 8  # the padding row below
INPUTS["kpm"] = RNG.random((2, 7)) < 0.4  # key padding: True is not attended
INPUTS["kpm"][:, 0] = False  # every query keeps a key

# name: (class, args, kwargs, input keys). The same call builds the torch layer.
LAYERS = {
    "AvgPool2d_3_1_1": ("AvgPool2d", (3, 1, 1), {}, ("x4",)),
    "AvgPool2d_default_stride": ("AvgPool2d", (2,), {}, ("x4",)),
    "AvgPool2d_ceil": ("AvgPool2d", (3, 2, 1), {"ceil_mode": True}, ("x4",)),
    "AvgPool2d_ceil_no_pad": (
        "AvgPool2d",
        (3, 2, 1),
        {"ceil_mode": True, "count_include_pad": False},
        ("x4",),
    ),
    "AvgPool2d_divisor": ("AvgPool2d", ((2, 3),), {"divisor_override": 5, "padding": 1}, ("x4",)),
    "MaxPool2d_default": ("MaxPool2d", (2,), {}, ("x4",)),
    "MaxPool2d_dilated_ceil": (
        "MaxPool2d",
        (3, 2, 1),
        {"dilation": 2, "ceil_mode": True},
        ("x4",),
    ),
    "Conv2d_default": ("Conv2d", (3, 4, 3), {}, ("x4",)),
    "Conv2d_same_reflect_groups": (
        "Conv2d",
        (3, 6, 3),
        {"padding": "same", "dilation": 2, "groups": 3, "padding_mode": "reflect"},
        ("x4",),
    ),
    "Conv2d_replicate": (
        "Conv2d",
        (3, 4, (2, 3)),
        {"stride": 2, "padding": (1, 2), "padding_mode": "replicate", "bias": False},
        ("x4",),
    ),
    "Conv2d_circular": ("Conv2d", (3, 4, 3), {"padding": 2, "padding_mode": "circular"}, ("x4",)),
    "Conv2d_same_even": ("Conv2d", (3, 2, 4), {"padding": "same"}, ("x4",)),
    "LayerNorm_default": ("LayerNorm", (13,), {}, ("x4",)),
    "LayerNorm_2d_no_affine": ("LayerNorm", ((11, 13),), {"elementwise_affine": False}, ("x4",)),
    "LayerNorm_no_bias": ("LayerNorm", (13,), {"bias": False, "eps": 1e-3}, ("x4",)),
    "BatchNorm2d_default": ("BatchNorm2d", (3,), {}, ("x4",)),
    "BatchNorm2d_batch_stats": (
        "BatchNorm2d",
        (3,),
        {"affine": False, "track_running_stats": False},
        ("x4",),
    ),
    "GELU_default": ("GELU", (), {}, ("x4",)),
    "GELU_tanh": ("GELU", (), {"approximate": "tanh"}, ("x4",)),
    "LeakyReLU_default": ("LeakyReLU", (), {}, ("x4",)),
    "LeakyReLU_slope": ("LeakyReLU", (0.2,), {}, ("x4",)),
    "ReLU": ("ReLU", (), {}, ("x4",)),
    "Sigmoid": ("Sigmoid", (), {}, ("x4",)),
    "Tanh": ("Tanh", (), {}, ("x4",)),
    "Softmax_implicit_4d": ("Softmax", (), {}, ("x4",)),
    "Softmax_implicit_3d": ("Softmax", (), {}, ("x3",)),
    "Flatten_default": ("Flatten", (), {}, ("x4",)),
    "Flatten_0_2": ("Flatten", (0, 2), {}, ("x4",)),
    "Dropout_eval": ("Dropout", (), {}, ("x4",)),
    "Identity": ("Identity", (), {}, ("x4",)),
    "Linear_4d": ("Linear", (13, 5), {}, ("x4",)),
    "Embedding_padding_idx": ("Embedding", (10, 6), {"padding_idx": -2}, ("ids",)),
    "AdaptiveAvgPool2d_1": ("AdaptiveAvgPool2d", (1,), {}, ("x4",)),
    "AdaptiveAvgPool2d_5": ("AdaptiveAvgPool2d", (5,), {}, ("x4",)),
    "AdaptiveAvgPool2d_none": ("AdaptiveAvgPool2d", ((4, None),), {}, ("x4",)),
    "MultiheadAttention_default": ("MultiheadAttention", (12, 3), {}, ("x3", "x3", "x3")),
    "MultiheadAttention_kdim_batch_first": (
        "MultiheadAttention",
        (12, 4),
        {"kdim": 8, "vdim": 10, "batch_first": True, "bias": False},
        ("qbf", "kbf", "vbf", "kpm"),
    ),
}
# Arguments of the call (not inputs of the model): masks given as array data.
CALL_KWARGS = {
    "MultiheadAttention_default": {
        "attn_mask": np.triu(np.ones((5, 5), bool), 1),
        "is_causal": True,
    },
    "MultiheadAttention_kdim_batch_first": {
        "attn_mask": RNG.standard_normal((2 * 4, 5, 7)).astype(np.float32),
    },
}


def _make(name: str) -> nn.Module:
    cls, args, kwargs, _ = LAYERS[name]
    nn.manual_seed(sum(map(ord, name)))
    layer = getattr(nn, cls)(*args, **kwargs)
    rng = np.random.default_rng(len(name))
    # Non-trivial norms and statistics, so a layer that ignored a parameter would show.
    for pname, value in layer.state_dict().items():
        if pname.endswith(("running_var", "weight")) and cls in ("LayerNorm", "BatchNorm2d"):
            setattr(layer, pname, rng.uniform(0.5, 1.5, value.shape))
        elif pname.endswith(("running_mean", "bias")) and cls in ("LayerNorm", "BatchNorm2d"):
            setattr(layer, pname, rng.standard_normal(value.shape))
    return layer


class Zoo(nn.Module):
    """Every layer of LAYERS on the shared inputs, one (or two) outputs each."""

    def __init__(self) -> None:
        super().__init__()
        for name in LAYERS:
            setattr(self, name, _make(name))

    def forward(self, *xs):
        feeds = dict(zip(INPUTS, xs))
        outs = []
        for name, (_, _, _, keys) in LAYERS.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Softmax's implicit-dim warning
                y = getattr(self, name)(*(feeds[k] for k in keys), **CALL_KWARGS.get(name, {}))
            outs.extend(y if isinstance(y, tuple) else (y,))
        return tuple(outs)


@pytest.fixture(scope="module")
def zoo():
    """The zoo compiled once (a compile per layer would take too long), its outputs by layer."""
    model = Zoo()
    spec = {k: (v.shape, str(v.dtype)) for k, v in INPUTS.items()}
    flat = iter(ember.compile(model.export(spec)).run(dict(INPUTS)))
    results = {}
    for name, (cls, *_) in LAYERS.items():
        count = 2 if cls == "MultiheadAttention" else 1
        results[name] = [next(flat) for _ in range(count)]
    return model, results


# --- numpy references, from PyTorch's formulas ---------------------------------------------


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _pool_out(n, k, s, p, d, ceil):
    """PyTorch's pooling_output_shape."""
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def ref_max_pool(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    k, p, d = _pair(kernel), _pair(padding), _pair(dilation)
    s = k if stride is None else _pair(stride)
    n, c, h, w = x.shape
    oh, ow = (_pool_out(*a, ceil_mode) for a in zip((h, w), k, s, p, d))
    out = np.empty((n, c, oh, ow), x.dtype)
    for i in range(oh):
        rows = [i * s[0] - p[0] + t * d[0] for t in range(k[0])]
        rows = [r for r in rows if 0 <= r < h]
        for j in range(ow):
            cols = [j * s[1] - p[1] + t * d[1] for t in range(k[1])]
            cols = [q for q in cols if 0 <= q < w]
            out[:, :, i, j] = x[:, :, rows][:, :, :, cols].max(axis=(2, 3))
    return out


def ref_avg_pool(
    x,
    kernel,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    """PyTorch's avg_pool2d: the divisor is the window clipped to the padded input
    (count_include_pad) or to the input itself, unless divisor_override is given."""
    k, p = _pair(kernel), _pair(padding)
    s = k if stride is None else _pair(stride)
    n, c, h, w = x.shape
    oh, ow = (_pool_out(*a, 1, ceil_mode) for a in zip((h, w), k, s, p))
    out = np.empty((n, c, oh, ow), np.float64)
    for i in range(oh):
        hs = i * s[0] - p[0]
        he = min(hs + k[0], h + p[0])
        for j in range(ow):
            ws = j * s[1] - p[1]
            we = min(ws + k[1], w + p[1])
            pool_size = (he - hs) * (we - ws)
            h0, h1, w0, w1 = max(hs, 0), min(he, h), max(ws, 0), min(we, w)
            total = x[:, :, h0:h1, w0:w1].astype(np.float64).sum(axis=(2, 3))
            if divisor_override:
                div = divisor_override
            else:
                div = pool_size if count_include_pad else (h1 - h0) * (w1 - w0)
            out[:, :, i, j] = total / div
    return out


_NP_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def ref_conv(
    x, layer, kernel, stride=1, padding=0, dilation=1, groups=1, padding_mode="zeros", **_
):
    wt = layer.weight.astype(np.float64)
    k, s, d = _pair(kernel), _pair(stride), _pair(dilation)
    if padding == "same":
        tot = [dd * (kk - 1) for dd, kk in zip(d, k)]
        pads = ((tot[0] // 2, tot[0] - tot[0] // 2), (tot[1] // 2, tot[1] - tot[1] // 2))
    else:
        p = (0, 0) if padding == "valid" else _pair(padding)
        pads = ((p[0], p[0]), (p[1], p[1]))
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), *pads), mode=_NP_MODES[padding_mode])
    n, c, hh, ww = xp.shape
    o = wt.shape[0]
    oh = (hh - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (ww - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.zeros((n, o, oh, ow))
    cin, cout = c // groups, o // groups
    for g in range(groups):
        xs = xp[:, g * cin : (g + 1) * cin]
        for a in range(k[0]):
            for b in range(k[1]):
                patch = xs[
                    :,
                    :,
                    a * d[0] : a * d[0] + s[0] * (oh - 1) + 1 : s[0],
                    b * d[1] : b * d[1] + s[1] * (ow - 1) + 1 : s[1],
                ]
                wg = wt[g * cout : (g + 1) * cout, :, a, b]
                out[:, g * cout : (g + 1) * cout] += np.einsum("nchw,oc->nohw", patch, wg)
    if layer.state_dict().get("bias") is not None:
        out += layer.bias[None, :, None, None]
    return out


def ref_softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def ref_layer_norm(x, layer, normalized_shape, eps=1e-5, **_):
    axes = tuple(range(x.ndim - len(_pair_or_tuple(normalized_shape)), x.ndim))
    mu = x.mean(axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    sd = layer.state_dict()
    y = y * sd["weight"] if "weight" in sd else y
    return y + sd["bias"] if "bias" in sd else y


def _pair_or_tuple(v):
    return (v,) if isinstance(v, int) else tuple(v)


def ref_batch_norm(x, layer, num_features, eps=1e-5, track_running_stats=True, **_):
    sd = layer.state_dict()
    if track_running_stats:
        mean, var = sd["running_mean"], sd["running_var"]
    else:
        mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))  # the batch's, biased
    c = (1, num_features, 1, 1)
    y = (x - mean.reshape(c)) / np.sqrt(var.reshape(c) + eps)
    if "weight" in sd:
        y = y * sd["weight"].reshape(c) + sd["bias"].reshape(c)
    return y


def ref_gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def ref_adaptive(x, output_size):
    sizes = _pair(output_size) if not isinstance(output_size, tuple) else output_size
    n, c, h, w = x.shape
    oh, ow = (dim if o is None else o for o, dim in zip(sizes, (h, w)))
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return out


def ref_mha(layer, q, k, v, kpm=None, attn_mask=None, batch_first=False, **_):
    """F.multi_head_attention_forward without dropout; weights averaged over heads. Bool masks
    put -inf where True, float masks are added; attn_mask is (L, S) or (N*h, L, S)."""
    if not batch_first:
        q, k, v = (t.transpose(1, 0, 2) for t in (q, k, v))
    sd = layer.state_dict()
    e, h = layer.embed_dim, layer.num_heads
    d = e // h
    if "in_proj_weight" in sd:
        ws = [sd["in_proj_weight"][i * e : (i + 1) * e] for i in range(3)]
    else:
        ws = [sd["q_proj_weight"], sd["k_proj_weight"], sd["v_proj_weight"]]
    bs = [sd["in_proj_bias"][i * e : (i + 1) * e] if "in_proj_bias" in sd else 0 for i in range(3)]
    qh, kh, vh = (
        (t @ w.T + b).reshape(t.shape[0], t.shape[1], h, d).transpose(0, 2, 1, 3)
        for t, w, b in zip((q, k, v), ws, bs)
    )
    scores = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(d)
    n, _, length, s = scores.shape

    def canonical(mask):
        return np.where(mask, -np.inf, 0.0) if mask.dtype == bool else mask

    if attn_mask is not None:
        add = canonical(attn_mask)
        scores = scores + (add if add.ndim == 2 else add.reshape(n, h, length, s))
    if kpm is not None:
        scores = scores + canonical(kpm).reshape(n, 1, 1, s)
    attn = ref_softmax(scores, -1)
    ctx = (attn @ vh).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    out = ctx @ sd["out_proj.weight"].T + sd.get("out_proj.bias", 0)
    return (out if batch_first else out.transpose(1, 0, 2)), attn.mean(1)


def reference(name: str, layer: nn.Module) -> list[np.ndarray]:
    cls, args, kwargs, keys = LAYERS[name]
    xs = [INPUTS[k].astype(np.float64) if INPUTS[k].dtype.kind == "f" else INPUTS[k] for k in keys]
    x = xs[0]
    if cls == "AvgPool2d":
        return [ref_avg_pool(x, *args, **kwargs)]
    if cls == "MaxPool2d":
        return [ref_max_pool(x, *args, **kwargs)]
    if cls == "Conv2d":
        return [ref_conv(x, layer, *args[2:], **kwargs)]
    if cls == "LayerNorm":
        return [ref_layer_norm(x, layer, *args, **kwargs)]
    if cls == "BatchNorm2d":
        return [ref_batch_norm(x, layer, *args, **kwargs)]
    if cls == "GELU":
        return [ref_gelu(x, **kwargs)]
    if cls == "LeakyReLU":
        slope = args[0] if args else 0.01  # PyTorch's default negative_slope
        return [np.where(x > 0, x, slope * x)]
    simple = {
        "ReLU": lambda: np.maximum(x, 0),
        "Sigmoid": lambda: 1 / (1 + np.exp(-x)),
        "Tanh": lambda: np.tanh(x),
        "Dropout": lambda: x,  # evaluation mode
        "Identity": lambda: x,
    }
    if cls in simple:
        return [simple[cls]()]
    if cls == "Softmax":
        # PyTorch's _get_softmax_dim for dim=None: 0 for 0-, 1- and 3-D inputs, else 1
        dim = args[0] if args else (0 if x.ndim in (0, 1, 3) else 1)
        return [ref_softmax(x, dim)]
    if cls == "Flatten":
        start, end = (args + (1, -1)[len(args) :]) if args else (1, -1)
        end %= x.ndim
        return [x.reshape(*x.shape[:start], -1, *x.shape[end + 1 :])]
    if cls == "Linear":
        sd = layer.state_dict()
        return [x @ sd["weight"].T + sd.get("bias", 0)]
    if cls == "Embedding":
        return [layer.weight[x]]
    if cls == "AdaptiveAvgPool2d":
        return [ref_adaptive(x, *args)]
    if cls == "MultiheadAttention":
        return list(ref_mha(layer, *xs, **kwargs, **CALL_KWARGS.get(name, {})))
    raise AssertionError(f"no reference for {cls}")


# --- item 3: every layer against the numpy reference, and against torch ---------------------


def test_item_03_avgpool_counts_padding(zoo):
    """The reported case: nn.AvgPool2d(3, 1, 1) divides border windows by 9, as PyTorch."""
    model, results = zoo
    x = INPUTS["x4"].astype(np.float64)
    got = results["AvgPool2d_3_1_1"][0]
    corner = x[:, :, :2, :2].sum(axis=(2, 3)) / 9  # 4 real elements, 5 zero pads, all counted
    np.testing.assert_allclose(got[:, :, 0, 0], corner, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got, ref_avg_pool(x, 3, 1, 1), rtol=RTOL, atol=ATOL)
    assert model.AvgPool2d_3_1_1.count_include_pad is True


@pytest.mark.parametrize("name", list(LAYERS))
def test_item_03_layer_matches_pytorch_formula(zoo, name):
    model, results = zoo
    want = reference(name, getattr(model, name))
    got = results[name]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (name, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("name", list(LAYERS))
def test_item_03_layer_matches_torch(zoo, name):
    torch = pytest.importorskip("torch")
    model, results = zoo
    cls, args, kwargs, keys = LAYERS[name]
    tl = getattr(torch.nn, cls)(*args, **kwargs)
    state = {k: torch.from_numpy(np.array(v)) for k, v in getattr(model, name).state_dict().items()}
    tl.load_state_dict(state, strict=True)  # same names and shapes as PyTorch's
    tl.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kwargs = {
            k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
            for k, v in CALL_KWARGS.get(name, {}).items()
        }
        want = tl(*(torch.from_numpy(INPUTS[k]) for k in keys), **kwargs)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(results[name], want):
        np.testing.assert_allclose(g, w.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)


def test_item_03_initial_values_follow_pytorch():
    """The deterministic parts of PyTorch's initialisation, and its init bounds."""
    ln, bn = nn.LayerNorm(7), nn.BatchNorm2d(5)
    np.testing.assert_array_equal(ln.weight, 1)
    np.testing.assert_array_equal(ln.bias, 0)
    assert ln.eps == 1e-5 and bn.eps == 1e-5 and bn.momentum == 0.1
    np.testing.assert_array_equal(bn.running_var, 1)
    np.testing.assert_array_equal(bn.running_mean, 0)
    assert bn.num_batches_tracked.dtype == np.int64 and int(bn.num_batches_tracked) == 0
    emb = nn.Embedding(9, 4, padding_idx=-3)
    assert emb.padding_idx == 6
    np.testing.assert_array_equal(emb.weight[6], 0)
    assert np.all(emb.weight[:6] != 0)
    lin = nn.Linear(37, 5)
    assert np.abs(lin.weight).max() <= 1 / math.sqrt(37) and lin.has_bias
    mha = nn.MultiheadAttention(12, 3)
    assert mha.batch_first is False and mha.dropout == 0.0
    assert np.abs(mha.in_proj_weight).max() <= math.sqrt(6 / (12 + 36))
    np.testing.assert_array_equal(mha.in_proj_bias, 0)
    np.testing.assert_array_equal(mha.out_proj.bias, 0)
    assert nn.GELU().approximate == "none" and nn.LeakyReLU().negative_slope == 0.01
    assert nn.Dropout().p == 0.5 and nn.Softmax().dim is None
    assert (nn.Flatten().start_dim, nn.Flatten().end_dim) == (1, -1)
    pool = nn.MaxPool2d(3)
    assert pool.stride == (3, 3) and pool.ceil_mode is False and pool.dilation == (1, 1)
    conv = nn.Conv2d(4, 4, 3)
    assert conv.padding_mode == "zeros" and conv.dilation == (1, 1) and conv.groups == 1


def test_item_03_refuses_what_pytorch_refuses():
    with pytest.raises(ember.ArgumentError, match="padding"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")
    with pytest.raises(ember.ArgumentError, match="stride 1"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ember.ArgumentError, match="half"):
        nn.AvgPool2d(3, padding=2)
    with pytest.raises(ember.ArgumentError, match="positive int"):
        nn.AvgPool2d(2, divisor_override="3")
    with pytest.raises(ember.ArgumentError, match="positive int"):
        nn.AdaptiveAvgPool2d((2.5, 3))
    with pytest.raises(ember.ArgumentError, match="between 0 and 1"):
        nn.Dropout(1.5)
    with pytest.raises(ember.ArgumentError, match="not supported"):
        nn.MultiheadAttention(8, 2, add_bias_kv=True)
    with pytest.raises(ember.ArgumentError, match="padding_idx"):
        nn.Embedding(5, 3, padding_idx=5)
    with pytest.raises(ember.ArgumentError, match="is_causal needs attn_mask"):
        mha = nn.MultiheadAttention(8, 2)
        q = nn.Tensor(nn.tensor.Tracer(), "q", (3, 2, 8), "float32")
        mha(q, q, q, is_causal=True)
    lin = nn.Linear(2, 2)
    assert lin.eval() is lin and lin.training is False
    with pytest.raises(ember.ArgumentError, match="training mode"):
        lin.train()
    with pytest.raises(ember.ArgumentError, match="too large"):
        nn.Conv2d(1, 1, 3, padding=4, padding_mode="reflect").export({"x": (1, 1, 4, 9)})


# --- item 4: parameter assignment -------------------------------------------------------------


def test_item_04_assigned_parameters_are_exported_and_checked():
    rng = np.random.default_rng(4)
    lin = nn.Linear(7, 3)
    w = rng.standard_normal((3, 7))  # float64: converted as PyTorch's load_state_dict copies
    lin.weight = w
    b = rng.standard_normal(3).astype(np.float32)
    lin.bias = b
    x = rng.standard_normal((5, 7)).astype(np.float32)
    got = ember.compile(lin.export({"x": x.shape})).run({"x": x})[0]
    np.testing.assert_allclose(got, x @ w.T + b, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(lin.state_dict()["weight"], w.astype(np.float32))

    lin.bias = None  # as in PyTorch: no bias from now on
    x3 = rng.standard_normal((2, 5, 7)).astype(np.float32)
    got = ember.compile(lin.export({"x": x3.shape})).run({"x": x3})[0]
    np.testing.assert_allclose(got, x3 @ w.T, rtol=RTOL, atol=ATOL)
    assert "bias" not in lin.state_dict()
    lin.bias = b  # and back, with the shape remembered
    assert lin.has_bias

    for bad, phrase in [
        (np.zeros((7, 3), np.float32), "shape"),
        (np.zeros((3, 7), bool), "dtype bool"),
        (np.zeros((3, 7), np.int32), "dtype int32"),
        (np.full((3, 7), "a"), "dtype <U1"),
        ("weights", "dtype <U7"),
        ([[1.0, 2.0], [3.0]], "not an array"),
    ]:
        with pytest.raises(ember.ArgumentError, match=phrase) as info:
            lin.weight = bad
        assert "weight" in str(info.value)
    np.testing.assert_array_equal(lin.weight, w.astype(np.float32))  # unchanged by refusals

    seq = nn.Sequential(nn.Linear(7, 3))
    seq.extra = nn.Linear(3, 2)  # a child added, then one replaced: both in the state dict
    seq.extra = nn.Linear(3, 4, bias=False)
    assert set(seq.state_dict()) == {"0.weight", "0.bias", "extra.weight"}
    assert seq.state_dict()["extra.weight"].shape == (4, 3)
    with pytest.raises(ember.ArgumentError, match="child module"):
        seq.extra = 3
    seq.extra = None
    assert set(seq.state_dict()) == {"0.weight", "0.bias"}
    seq[0] = nn.Linear(7, 2, bias=False)  # replaced in place, used by the next export
    assert set(seq.state_dict()) == {"0.weight"}
    assert seq.to_onnx({"x": (1, 7)}).graph.output[0].type.tensor_type.shape.dim[1].dim_value == 2

    conv = nn.Sequential(nn.Conv2d(2, 3, 3))
    with pytest.raises(ember.ArgumentError, match=r"'0\.weight'.*shape"):
        conv.load_state_dict({"0.weight": np.zeros((3, 2, 3, 2)), "0.bias": np.zeros(3)})
    with pytest.raises(ember.ArgumentError, match="num_batches_tracked"):
        nn.BatchNorm2d(2).num_batches_tracked = np.array(1.5)


def test_item_04_torch_state_dict_and_parameters_load():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tl, lin = torch.nn.Linear(6, 4), nn.Linear(6, 4)
    lin.load_state_dict(tl.state_dict())
    np.testing.assert_array_equal(lin.bias, tl.bias.detach().numpy())
    lin.weight = tl.weight  # a Parameter that requires grad
    np.testing.assert_array_equal(lin.weight, tl.weight.detach().numpy())
    with pytest.raises(ember.ArgumentError, match="shape"):
        lin.weight = torch.nn.Linear(4, 6).weight


# --- item 5: dtype promotion and reflected operators ------------------------------------------


class Arith(nn.Module):
    """Every operator, forward and reflected, with Python numbers and tensors."""

    def forward(self, i, f, h):  # int64, float32, float16
        return (
            i * 0.5,  # float32, not truncated
            0.5 * i,
            1.0 / i,  # reflected true division
            i / i,  # integer true division -> float32
            i + 2,  # int stays int64
            3 - i,
            2**i,  # int ** int -> int64
            i**0.5,  # int ** float -> float32
            2.0**i,
            i // 3,  # floor, not truncation
            -7 // i,
            i % 3,
            -7 % i,
            i + f,  # int tensor + float tensor -> float32
            f - i,
            h * 2.5,  # a Python float does not widen float16
            h + f,  # float16 + float32 -> float32
            f % 0.75,
            2.0 % f,
            f // 0.3,
            -i,
            abs(f),
            np.float32(3.0) * f,  # numpy defers to the reflected operator
            f**2,
        )


def test_item_05_promotion_and_reflected_operators():
    rng = np.random.default_rng(5)
    i = rng.integers(-9, 10, size=(3, 5)).astype(np.int64)
    i[i == 0] = 4  # divisors
    f = rng.uniform(-3, 3, size=(3, 5)).astype(np.float32)
    h = rng.uniform(-3, 3, size=(1, 5)).astype(np.float16)
    spec = {"i": (i.shape, "int64"), "f": (f.shape, "float32"), "h": (h.shape, "float16")}
    outs = ember.compile(Arith().export(spec)).run({"i": i, "f": f, "h": h})
    fi = i.astype(np.float32)
    with np.errstate(invalid="ignore"):
        root = np.sqrt(fi)  # NaN for negative bases, as PyTorch's i ** 0.5
    # Expected values and dtypes by PyTorch's rules (written with numpy in float32)
    want = [
        (fi * 0.5, "float32"),
        (fi * 0.5, "float32"),
        (1.0 / fi, "float32"),
        (fi / fi, "float32"),
        (i + 2, "int64"),
        (3 - i, "int64"),
        (None, None),  # int ** int: checked below where the exponent is >= 0
        (root, "float32"),
        (np.float32(2.0) ** fi, "float32"),
        (np.floor_divide(i, 3), "int64"),
        (np.floor_divide(-7, i), "int64"),
        (np.mod(i, 3), "int64"),
        (np.mod(-7, i), "int64"),
        (fi + f, "float32"),
        (f - fi, "float32"),
        ((h * np.float16(2.5)), "float16"),
        (h.astype(np.float32) + f, "float32"),
        (f - np.floor(f / np.float32(0.75)) * np.float32(0.75), "float32"),
        (2.0 - np.floor(2.0 / f) * f, "float32"),
        (np.floor(f / np.float32(0.3)), "float32"),
        (-i, "int64"),
        (np.abs(f), "float32"),
        (3 * f, "float32"),
        (f * f, "float32"),
    ]
    assert len(outs) == len(want)
    for k, (got, (exp, dtype)) in enumerate(zip(outs, want)):
        if dtype is None:  # int ** int: exact where the exponent is >= 0
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got[i >= 0], 2 ** i[i >= 0])
            continue
        assert str(got.dtype) == dtype, (k, got.dtype, dtype)
        tol = 2e-3 if dtype == "float16" else RTOL
        np.testing.assert_allclose(got, exp, rtol=tol, atol=ATOL, err_msg=f"output {k}")
    # The reported case exactly
    np.testing.assert_array_equal(outs[0][:1, :2], fi[:1, :2] * 0.5)


def test_item_05_promotion_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(55)
    i = rng.integers(1, 10, size=(3, 5)).astype(np.int64)
    f = rng.uniform(0.5, 3, size=(3, 5)).astype(np.float32)
    h = rng.uniform(0.5, 3, size=(1, 5)).astype(np.float16)
    spec = {"i": (i.shape, "int64"), "f": (f.shape, "float32"), "h": (h.shape, "float16")}
    outs = ember.compile(Arith().export(spec)).run({"i": i, "f": f, "h": h})
    want = Arith().forward(*(torch.from_numpy(a) for a in (i, f, h)))
    for k, (got, exp) in enumerate(zip(outs, want)):
        assert str(got.dtype) == str(exp.dtype).replace("torch.", ""), k
        tol = 2e-3 if got.dtype == np.float16 else RTOL
        np.testing.assert_allclose(got, exp.numpy(), rtol=tol, atol=ATOL, err_msg=f"output {k}")


def test_item_05_refusals():
    t = nn.Tensor(nn.tensor.Tracer(), "x", (2,), "int64")
    with pytest.raises(ember.ArgumentError, match="negative"):
        t**-1
    with pytest.raises(ember.ArgumentError, match="not supported"):
        t * 1j
    with pytest.raises(ember.ArgumentError, match="not supported"):
        t + "a"


# --- item 17: bad export specs and state dicts --------------------------------------------------


def test_item_17_bad_specs_and_state_dicts_name_the_culprit():
    lin = nn.Linear(4, 2)
    cases = [
        ({"x": ((2, 4), "float99")}, "'x'.*float99"),
        ({"x": ((2, 4), "complex64")}, "'x'.*complex64"),
        ({"x": ((2, 4), "<U3")}, "'x'"),
        ({"x": 4}, "'x'.*shape"),
        ({"x": ((2, 4.0), "float32")}, "'x'.*shape"),
        ({"x": (2, True)}, "'x'.*shape"),
        ([("x", (2, 4))], "mapping"),
    ]
    for spec, phrase in cases:
        with pytest.raises(ember.ArgumentError, match=phrase):
            lin.export(spec)
    assert lin.export({"x": ((np.int64(3), 4), np.float32)}) is not None  # numpy spellings work

    good = lin.state_dict()
    before = {k: v.copy() for k, v in good.items()}
    for value, phrase in [
        (np.array(["a", "b"]), "'bias'.*<U1"),
        (np.array([b"a", b"b"]), "'bias'.*S1"),
        (np.array([None, 1.0], dtype=object), "'bias'.*object"),
        ([1.0, [2.0, 3.0]], "'bias'.*not an array"),
        (object(), "'bias'.*object"),
        (np.array([True, False]), "'bias'.*bool"),
    ]:
        fresh = {"weight": np.ones((2, 4)), "bias": value}  # weight valid, checked first
        with pytest.raises(ember.ArgumentError, match=phrase):
            lin.load_state_dict(fresh)
        for k, v in before.items():  # nothing half-loaded
            np.testing.assert_array_equal(lin.state_dict()[k], v)
    with pytest.raises(ember.ArgumentError, match="mapping"):
        lin.load_state_dict([("bias", np.zeros(2))])
