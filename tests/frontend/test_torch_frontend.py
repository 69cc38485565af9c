"""PyTorch programs into Ember: the ATen importer and the ``torch.compile`` backend, against
eager PyTorch on random inputs (skipped where torch is not installed)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember

torch = pytest.importorskip("torch", reason="the torch frontend needs PyTorch (CPU wheel)")
nn = torch.nn
from ember.frontend.torch import from_exported, from_module  # noqa: E402
from ember.torch_backend import STATS, ember_backend  # noqa: E402
from tests.nightly import examples  # noqa: E402


class ConvNet(nn.Module):
    """A ResNet-style block, a depthwise conv, pooling and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(8, 10)

    def forward(self, x):  # noqa: ANN001, ANN201
        x = torch.relu(self.bn(self.stem(x)))
        x = torch.relu(x + self.bn2(self.conv(x)))
        x = nn.functional.relu6(self.dw(self.pool(x)))
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x).softmax(-1)


class Encoder(nn.Module):
    """A BERT-style layer: multi-head self-attention, LayerNorm, a GELU feed-forward."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.att = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):  # noqa: ANN001, ANN201
        a, _ = self.att(x, x, x, need_weights=False)
        x = self.ln1(x + a)
        return self.ln2(x + self.ff(x))


class DecoderBlock(nn.Module):
    """A GPT-2-style block run as a decode step: past keys and values in, new ones out."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(
            nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d)
        )

    def forward(self, x, past_k, past_v):  # noqa: ANN001, ANN201
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        S = k.shape[2]
        att = (q @ k.transpose(-2, -1)) / (D // self.heads) ** 0.5
        causal = torch.ones(T, S, dtype=torch.bool).tril(S - T)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x)), k, v


class Tagger(nn.Module):
    """A two-layer LSTM and a classifier on its last step."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.fc(self.lstm(x)[0][:, -1])


class InvertedResiduals(nn.Module):
    """Two MobileNetV2 blocks: 1x1 expansion, 3x3 depthwise, 1x1 projection, ReLU6,
    the first with a residual add, the second with stride 2."""

    def __init__(self, c: int = 8, expand: int = 4) -> None:
        super().__init__()

        def block(stride: int) -> nn.Sequential:
            e = c * expand
            return nn.Sequential(
                nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), nn.ReLU6(),
                nn.Conv2d(e, e, 3, stride, 1, groups=e, bias=False), nn.BatchNorm2d(e),
                nn.ReLU6(), nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c),
            )  # fmt: skip

        self.a, self.b = block(1), block(2)

    def forward(self, x):  # noqa: ANN001, ANN201
        x = x + self.a(x)
        return self.b(x)


def _randomize(module: nn.Module) -> nn.Module:
    """Random running statistics (fresh ones are zeros and ones: a no-op batch norm)."""
    torch.manual_seed(0)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return module.eval()


def _eager(module: nn.Module, *args):  # noqa: ANN002, ANN202
    with torch.no_grad():
        return module(*args).numpy()


def test_import_ember_does_not_import_torch():
    code = "import sys, ember, ember.frontend; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# each model through torch.compile at two sizes: one compile per size, counted
MODELS = {
    "resnet-style cnn": (ConvNet, [(1, 3, 17, 19), (3, 3, 17, 19)]),
    "mobilenetv2 blocks": (InvertedResiduals, [(1, 8, 13, 11), (2, 8, 13, 11)]),
    "bert-style encoder": (Encoder, [(2, 1, 32), (2, 9, 32)]),
    "lstm tagger": (Tagger, [(3, 6, 8), (3, 2, 8)]),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_models_through_torch_compile_match_eager_at_each_size(name):
    make, shapes = MODELS[name]
    torch.manual_seed(len(name))
    model = _randomize(make())
    compiled = torch.compile(model, backend=ember_backend, options={"cache": False})
    before, eager_before = STATS["compiles"], STATS["eager graphs"]
    # the first size again: not compiled again, though Dynamo tries its newest graph first
    # (the one it made with the size symbolic): the backend finds the same traced content
    for shape in [*shapes, shapes[0]]:
        x = torch.randn(*shape)
        # Dynamo breaks the graph at an RNN module unless told to trace it (allow_rnn)
        with torch.no_grad(), torch._dynamo.config.patch(allow_rnn=True):
            got = compiled(x)
        np.testing.assert_allclose(got.numpy(), _eager(model, x), rtol=1e-4, atol=1e-5)
    assert STATS["compiles"] - before == len(shapes)
    assert STATS["eager graphs"] == eager_before  # Ember ran every graph


def test_decoder_step_with_a_kv_cache_matches_eager_as_the_cache_grows():
    """One new token against 1, 12 and 40 past positions, through ``torch.compile``: one
    compiled specialisation per cache length (the sizes Dynamo marks dynamic arrive as
    numbers), every output (the hidden state and the grown cache) as eager gives it."""
    torch.manual_seed(4)
    model = DecoderBlock().eval()
    compiled = torch.compile(model, backend=ember_backend)
    before = STATS["compiles"]
    for past in (1, 12, 40):
        x = torch.randn(1, 1, 32)
        pk, pv = torch.randn(1, 4, past, 8), torch.randn(1, 4, past, 8)
        with torch.no_grad():
            got, want = compiled(x, pk, pv), model(x, pk, pv)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5)
    assert STATS["compiles"] - before == 3


@pytest.mark.parametrize("kind", ["plain", "bool", "float", "causal"])
def test_scaled_dot_product_attention_is_one_fused_op(kind):
    """``F.scaled_dot_product_attention`` stays whole: Ember's ``attention`` op (boolean
    masks as 0 / -inf, ``is_causal`` as the upper triangle), as eager computes it."""
    F = nn.functional
    torch.manual_seed(7)
    q, k, v = torch.randn(2, 3, 7, 8), torch.randn(2, 3, 11, 8), torch.randn(2, 3, 11, 8)
    allowed = torch.rand(7, 11) > 0.3
    allowed[:, 0] = True
    extra = torch.randn(2, 1, 7, 11)
    fns = {
        "plain": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "bool": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=allowed),
        "float": lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=extra, scale=0.3
        ),
        "causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    lib = ember.compile(from_module(fns[kind], [q, k, v]), target="llvm")
    assert [n.op for n in lib.graph.nodes].count("attention") == 1
    got = lib.run([q.numpy(), k.numpy(), v.numpy()])[0]
    np.testing.assert_allclose(got, fns[kind](q, k, v).numpy(), rtol=1e-5, atol=1e-6)


def test_exported_program_imports_with_its_weights_as_constants():
    torch.manual_seed(2)
    model = _randomize(ConvNet())
    x = torch.randn(2, 3, 16, 16)
    graph = from_exported(torch.export.export(model, (x,)))
    assert [v.name for v in graph.inputs] and len(graph.params) >= 10
    lib = ember.compile(graph, target="llvm")
    np.testing.assert_allclose(lib.run([x.numpy()])[0], _eager(model, x), rtol=1e-4, atol=1e-5)


def test_an_exported_program_with_dynamic_shapes_compiles_per_size_within_its_range(tmp_path):
    """``ember.compile`` of a program exported with a dynamic batch: its symbol is the
    model's symbolic dim, each size traced and compiled once, the weights one copy for all
    sizes, and a size outside the exported range refused with it."""
    torch.manual_seed(7)
    model = _randomize(ConvNet())
    batch = torch.export.Dim("batch", min=2, max=6)
    x = torch.randn(3, 3, 12, 12)
    program = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
    lib = ember.compile(program, target="llvm")
    assert type(lib).__name__ == "DynamicModel"
    ((symbol, *rest),) = lib.input_shapes
    assert isinstance(symbol, str) and tuple(rest) == (3, 12, 12)
    for n in (2, 5, 2, 6):
        x = torch.randn(n, 3, 12, 12)
        np.testing.assert_allclose(lib.run([x.numpy()])[0], _eager(model, x), rtol=1e-4, atol=1e-5)
    assert sorted(dict(k)[symbol] for k in lib.specializations) == [2, 5, 6]
    two, five, _ = lib.specializations.values()
    shared = [n for n, p in two._params.items() if any(p is q for q in five._params.values())]
    assert len(shared) >= 4  # the conv and linear weights: one array for both sizes
    for n in (1, 7):
        with pytest.raises(ember.ArgumentError, match=rf"'{symbol}' is {n}.*\[2, 6\]"):
            lib.run([np.random.rand(n, 3, 12, 12).astype(np.float32)])
    with pytest.raises(ember.ArgumentError, match="must have shape"):
        lib.run([np.random.rand(2, 3, 12, 13).astype(np.float32)])
    with pytest.raises(ember.ArgumentError, match="torch source cannot be exported"):
        lib.export(tmp_path / "model.ember")  # a loaded file could not trace new sizes
    static = ember.compile(torch.export.export(model, (x,)), target="llvm")
    np.testing.assert_allclose(static.run([x.numpy()])[0], _eager(model, x), rtol=1e-4, atol=1e-5)
    by_keyword = torch.export.export(model, (), {"x": x})
    with pytest.raises(ember.ArgumentError, match=r"keyword example inputs \(x\).*positional"):
        ember.compile(by_keyword, target="llvm")


def test_sizes_dynamo_makes_symbolic_are_the_dynamic_models_dims():
    """After a size change Dynamo captures the graph again with the size a ``SymInt``; the
    backend runs that graph as a DynamicModel whose dim is that symbol, one compile per
    new size (the first size, compiled for the static graph, is shared)."""
    backends = []

    def spy(gm, example_inputs):  # noqa: ANN001, ANN202
        backends.append(ember_backend(gm, example_inputs, options={"cache": False}))
        return backends[-1]

    class Head(nn.Module):  # a class of its own: Dynamo keeps its dynamic marks per code
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 5)

        def forward(self, x):  # noqa: ANN001, ANN201
            return torch.softmax(self.fc(x), -1) * x.shape[0]

    torch.manual_seed(8)
    model = Head().eval()
    compiled = torch.compile(model, backend=spy)
    before = STATS.copy()
    for n in (2, 3, 7, 2, 3):
        x = torch.randn(n, 8)
        with torch.no_grad():
            np.testing.assert_allclose(compiled(x).numpy(), _eager(model, x), rtol=1e-5, atol=1e-6)
    static, symbolic = backends
    assert static.model is None and len(static.compiled) == 1
    (shape,) = symbolic.model.input_shapes
    assert isinstance(shape[0], str) and shape[1] == 8
    assert sorted(dict(k)[shape[0]] for k in symbolic.model.specializations) == [2, 3, 7]
    assert STATS["compiles"] - before["compiles"] == 3
    assert STATS["shared"] - before["shared"] == 1


class _Mixer(nn.Module):
    """Sizes flow through a reshape, a reduction over the symbolic axis and a softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(6), nn.Linear(6, 6)

    def forward(self, x):  # noqa: ANN001, ANN201
        b, t, c = x.shape
        y = torch.softmax(self.fc(self.norm(x)), -1) + x.mean(1, keepdim=True)
        return y.reshape(b * t, c).relu()


_MIXER = _randomize(_Mixer()).eval()
_MIXED = torch.compile(_MIXER, backend=ember_backend, dynamic=True, options={"cache": False})


@settings(max_examples=examples(8), deadline=None, derandomize=True)
@given(batch=st.integers(2, 9), steps=st.integers(2, 13))
def test_random_sizes_through_one_symbolic_graph_match_eager(batch, steps):
    """Random batch and sequence sizes through one ``dynamic=True`` graph: each binding of
    its symbols compiles once and matches eager (the sizes start at 2: Dynamo gives 0 and
    1 graphs of their own)."""
    x = torch.randn(batch, steps, 6)
    with torch.no_grad():
        got = _MIXED(x)
    np.testing.assert_allclose(got.numpy(), _eager(_MIXER, x), rtol=1e-5, atol=1e-6)


def test_dynamic_true_passes_module_floats_as_tensors_and_still_compiles():
    """Under ``torch.compile(dynamic=True)`` Dynamo passes a module's floats (the layer
    norms' eps, the attention's dropout rate) as 0-dim tensors that the graph reads with
    ``.item()``; the backend fixes them at their values (one specialisation per value),
    and the first graph is already symbolic."""
    backends = []

    def spy(gm, example_inputs):  # noqa: ANN001, ANN202
        backends.append(ember_backend(gm, example_inputs, options={"cache": False}))
        return backends[-1]

    torch.manual_seed(9)
    model = _randomize(Encoder()).eval()
    compiled = torch.compile(model, backend=spy, dynamic=True)
    for shape in [(2, 5, 32), (3, 7, 32), (2, 5, 32)]:
        x = torch.randn(*shape)
        with torch.no_grad():
            np.testing.assert_allclose(compiled(x).numpy(), _eager(model, x), rtol=1e-4, atol=1e-5)
    (shape,) = backends[0].model.input_shapes
    assert all(isinstance(d, str) for d in shape[:2]) and shape[2] == 32
    assert len(backends[0].model.specializations) == 2


def test_a_call_that_would_need_gradients_warns_once_that_ember_gives_none():
    """Ember compiles for inference: called with gradients on and weights that want them,
    the results are right but carry no gradient, and the backend says so once per graph
    instead of letting a training loop get no gradients silently."""

    class Probe(nn.Module):  # a class of its own: no graph of another test is reused
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):  # noqa: ANN001, ANN201
            return self.fc(x).tanh()

    torch.manual_seed(10)
    model = Probe()
    compiled = torch.compile(model, backend=ember_backend, options={"cache": False})
    x = torch.randn(2, 4)
    with pytest.warns(UserWarning, match="carry no gradient"):
        got = compiled(x)
    want = model(x).detach().numpy()
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-5, atol=1e-6)
    assert not got.requires_grad
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per graph
        compiled(x)


def test_unsupported_ops_are_reported_at_once_with_their_source_lines():
    class Odd(nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            return torch.cumsum(torch.relu(x), 0) + torch.fft.fft(x).real

    with pytest.raises(ember.UnsupportedOperatorError) as info:
        from_module(Odd(), [torch.randn(4, 8)])
    text = str(info.value)
    assert "aten.cumsum" in text and "aten._fft_r2c" in text
    assert "test_torch_frontend.py" in text  # the line of the model that called it


def test_compile_backend_specialises_per_shape_and_matches_eager():
    torch.manual_seed(3)
    model = Encoder().eval()
    compiled = torch.compile(model, backend=ember_backend)
    before = STATS["compiles"]
    for shape in [(2, 5, 32), (2, 5, 32), (1, 7, 32), (3, 4, 32)]:
        x = torch.randn(*shape)
        with torch.no_grad():
            got = compiled(x)
        assert isinstance(got, torch.Tensor) and got.shape == shape
        np.testing.assert_allclose(got.numpy(), _eager(model, x), rtol=1e-4, atol=1e-5)
    assert STATS["compiles"] - before == 3  # three distinct shapes, the repeat reused


def test_weights_dynamo_lifts_into_inputs_are_compiled_as_constants():
    """Dynamo passes parameters and buffers as graph inputs; the backend freezes them, so
    the compiled model takes the caller's input alone and its batch norms fold."""
    backends = []

    def spy(gm, example_inputs):  # noqa: ANN001, ANN202
        backends.append(ember_backend(gm, example_inputs))
        return backends[-1]

    torch.manual_seed(6)
    model = _randomize(ConvNet())
    x = torch.randn(1, 3, 12, 12)
    with torch.no_grad():
        got = torch.compile(model, backend=spy)(x)
    np.testing.assert_allclose(got.numpy(), _eager(model, x), rtol=1e-4, atol=1e-5)
    # static, or symbolic where an earlier test's sizes made Dynamo mark ConvNet's dynamic
    dynamic = backends[0].model
    (lib,) = (dynamic.specializations if dynamic else backends[0].compiled).values()
    assert len(lib.input_names) == 1
    assert not [n for n in lib.graph.nodes if n.op == "batch_norm"]


def test_the_backend_is_reachable_by_name():
    pytest.importorskip("torch._dynamo")
    from ember.torch_backend import register

    register()
    model = nn.Linear(4, 3).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        got = torch.compile(model, backend="ember")(x)
    np.testing.assert_allclose(got.numpy(), _eager(model, x), rtol=1e-5, atol=1e-6)


def test_a_graph_with_an_op_ember_lacks_runs_eagerly_and_says_which():
    class Odd(nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            return torch.cumsum(torch.relu(x), 1) * 2

    model = Odd()
    x = torch.randn(3, 5)
    eager_before = STATS["eager graphs"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(model, backend=ember_backend)(x)
    np.testing.assert_allclose(got.numpy(), _eager(model, x), rtol=1e-6)
    assert STATS["eager graphs"] == eager_before + 1
    assert any("aten.cumsum" in str(w.message) for w in caught)


def test_an_index_out_of_range_is_a_clear_error_naming_the_node():
    model = nn.Embedding(10, 4).eval()
    lib = ember.compile(from_module(model, [torch.tensor([[1, 2]])]), target="llvm")
    with pytest.raises(ember.ArgumentError, match="PyTorch node 'embedding'.*99"):
        lib.run([np.array([[1, 99]])])


def test_unknown_options_and_devices_are_refused():
    with pytest.raises(ember.ArgumentError, match="unknown options"):
        ember_backend(None, [], options={"mode": "fast"})
    with pytest.raises(ember.ArgumentError, match="use an llvm or cuda target"):
        ember_backend(None, [], options={"target": "opencl"})


def test_a_cuda_target_compiles_for_the_gpu_and_returns_on_the_inputs_device(monkeypatch):
    """``target="cuda"``: the graph's kernels are CUDA (run here by the emulator, on CPU
    tensors), and the outputs come back as tensors on the inputs' device."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    model = _randomize(nn.Sequential(nn.Linear(7, 5), nn.GELU(), nn.Linear(5, 3))).eval()
    x = torch.randn(2, 7)
    before = STATS["compiles"]
    with torch.no_grad():
        got = torch.compile(
            model, backend=ember_backend, options={"target": "cuda", "cache": False}
        )(x)
    assert got.device == x.device and STATS["compiles"] == before + 1
    np.testing.assert_allclose(got.numpy(), _eager(model, x), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_cuda_tensors_run_on_the_gpu_and_stay_there():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = _randomize(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())).eval().cuda()
    x = torch.randn(2, 3, 11, 9, device="cuda")
    with torch.no_grad():
        got = torch.compile(
            model, backend=ember_backend, options={"target": "cuda", "cache": False}
        )(x)
        want = model(x)
    assert got.device.type == "cuda"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_tune_budget_follows_mode_and_options():
    from ember.torch_backend import AUTOTUNE_TRIALS, _trials

    assert _trials(None, None) == 0 and _trials("reduce-overhead", None) == 0
    assert _trials("max-autotune", None) == AUTOTUNE_TRIALS
    assert _trials(None, 5) == 5 and _trials("max-autotune", 0) == 0
    assert _trials(None, True) == AUTOTUNE_TRIALS
    with pytest.raises(ember.ArgumentError, match="trial count"):
        _trials(None, -1)


def test_options_tune_tunes_the_graph_then_compiles_with_its_records(tmp_path, monkeypatch):
    """Every task (templates and fused groups) is tuned into the records file, the
    records that slow the graph are checked on the whole graph (timed briefly here), and
    the compiled graph uses them and matches eager."""
    import ember.graph.model_tuning as model_tuning

    checked = []
    original = model_tuning.check_records

    def quick_check(graph, log, tasks, target, **timing):  # noqa: ANN001, ANN003, ANN202
        checked.append((log, len(tasks)))
        return original(graph, log, tasks, target, blocks=2, block_s=0.005, confirm_blocks=2)

    monkeypatch.setattr(model_tuning, "check_records", quick_check)
    model = _randomize(
        nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3))
    ).eval()
    x = torch.randn(1, 3, 9, 9)
    records = tmp_path / "records.jsonl"
    before = STATS["tuned"]
    options = {"tune": 2, "records": str(records)}
    with torch.no_grad():
        got = torch.compile(model, backend=ember_backend, options=options)(x)
    np.testing.assert_allclose(got.numpy(), _eager(model, x), rtol=1e-4, atol=1e-5)
    assert STATS["tuned"] == before + 1
    # every measured pick is a record, kept or (when it slowed the graph) moved aside
    dropped = records.with_name(records.name + ".dropped")
    kept = records.read_text() if records.is_file() else ""
    assert (kept + (dropped.read_text() if dropped.is_file() else "")).strip()
    assert checked and checked[0][0] == str(records) and checked[0][1] >= 2


_CACHED_RUN = """
import json, sys, torch
from torch import nn
from ember.graph import model_cache
from ember.torch_backend import STATS, ember_backend
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 6, 3), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 7 * 7, 5)).eval()
x = torch.randn(2, 3, 9, 9)
with torch.no_grad():
    got = torch.compile(model, backend=ember_backend)(x)
    ok = bool(torch.allclose(got, model(x), rtol=1e-4, atol=1e-5))
print(json.dumps({"compiles": STATS["compiles"], **model_cache.STATS, "ok": ok}))
"""


def test_a_second_process_loads_the_compiled_graph_instead_of_compiling(tmp_path):
    """The disk cache keyed by the FX graph: the first process compiles and stores, the
    second loads (no trace, no compile) and gets the same numbers."""
    import json
    import os

    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path), "EMBER_DISK_CACHE": "1"}

    def run() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", _CACHED_RUN], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run()
    assert first["ok"] and first["compiles"] == 1 and first["stored"] == 1
    second = run()
    assert second["ok"] and second["compiles"] == 0 and second["hit"] == 1
    # a damaged entry is rebuilt, never loaded: tests/e2e/test_model_cache.py


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_the_encoder_layers_fused_fast_path_is_converted(monkeypatch, norm_first, activation):
    """Under Dynamo, ``nn.TransformerEncoderLayer`` in eval without grad calls
    ``aten._transformer_encoder_layer_fwd``; it compiles (no eager fallback) to the same
    numbers as eager at odd sizes (an even head count: PyTorch takes the fast path only
    then)."""
    from ember.frontend.torch import _aten_ops

    calls = []
    convert = _aten_ops.CONVERTERS["aten._transformer_encoder_layer_fwd"]
    monkeypatch.setitem(
        _aten_ops.CONVERTERS,
        "aten._transformer_encoder_layer_fwd",
        lambda *a, **k: (calls.append(1), convert(*a, **k))[1],
    )
    layer = nn.TransformerEncoderLayer(
        28, 4, 40, dropout=0.0, batch_first=True, norm_first=norm_first, activation=activation
    )
    layer = _randomize(layer).eval()
    x = torch.randn(3, 7, 28)
    eager_before = STATS["eager graphs"]
    with torch.no_grad():
        got = torch.compile(layer, backend=ember_backend)(x)
    np.testing.assert_allclose(got.numpy(), _eager(layer, x), rtol=1e-4, atol=1e-5)
    assert calls and STATS["eager graphs"] == eager_before
