"""Real architectures end to end: ResNet-18, MobileNetV2 and a 4-layer BERT-style encoder
(``frontend/testing/zoo.py``, seeded random weights) compiled for llvm and compared with
onnxruntime; the same models compiled for CUDA through NVRTC.

Inputs are small (32x32 images, 16 tokens) to keep the suite fast; the layer structure
is the full one. ``benchmarks/bench_models.py`` runs them at full size.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.frontend.testing import zoo

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

MODELS = {
    "resnet18": lambda rng: zoo.resnet18(rng, batch=2, size=32),
    "mobilenet_v2": lambda rng: zoo.mobilenet_v2(rng, batch=1, size=32),
    "bert": lambda rng: zoo.bert_encoder(rng, batch=2, seq=16, layers=4, hidden=64, heads=4),
}


def _reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# ResNet-18 against onnxruntime on the CPU: tests/frontend/test_alter_conv_layout.py
# (test_resnet18_quick_matches_onnxruntime, every conv blocked); here it is compiled for CUDA
@pytest.mark.parametrize("name", [n for n in MODELS if n != "resnet18"])
def test_model_matches_onnxruntime(name):
    model, feeds = MODELS[name](np.random.default_rng(11))
    lib = ember.compile(model, target="llvm")
    for got, want in zip(lib.run(feeds), _reference(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    # batch norms are folded into their convolutions and elementwise tails fused
    assert not any(n.op == "batch_norm" for n in lib.graph.nodes)
    assert len(lib.steps) < len(model.graph.node)


@pytest.mark.nvrtc
@pytest.mark.parametrize("name", list(MODELS))
def test_model_compiles_for_cuda(name):
    pytest.importorskip("cuda")
    model, _ = MODELS[name](np.random.default_rng(11))
    lib = ember.compile(model, target="cuda -arch=sm_80")
    sources = [
        st.kernel.module.get_source("ptx") for st in lib.steps if hasattr(st.kernel, "module")
    ]
    assert sources and all(".entry" in s for s in sources)


@pytest.mark.nvrtc
@pytest.mark.parametrize("name", ["mlp", "conv_block"])
def test_small_models_run_in_the_cuda_emulator(name, monkeypatch):
    """The MLP and a conv block compiled for CUDA run in the SIMT emulator (race checks on)
    and match onnxruntime."""
    pytest.importorskip("cuda")
    from ember.frontend.testing.models import mlp, small_cnn

    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    rng = np.random.default_rng(12)
    if name == "mlp":
        model, feeds = mlp(rng, batch=5, sizes=(37, 48, 10))
    else:
        model, feeds = small_cnn(rng, batch=1, h=11, w=9)
    lib = ember.compile(model, target="cuda -arch=sm_80")
    for got, want in zip(lib.run(feeds), _reference(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
