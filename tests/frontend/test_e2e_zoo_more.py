"""More architectures end to end (``frontend/testing/zoo_cnn.py``, ``zoo_transformer.py``,
``zoo_audio.py``): each builder's quick variant compiled for llvm and compared with
onnxruntime on random inputs; the GPT-2-style decode step through its symbolic cache
length at two lengths; the STFT front end's DFT kernels against onnxruntime's STFT.

Quick variants keep every block kind and operator pattern of the full model with tiny
widths; ``benchmarks/bench_models.py`` runs the full sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.frontend.testing import zoo_audio, zoo_cnn, zoo_transformer
from ember.graph.dynamic_model import DynamicModel
from tests.nightly import nightly_param

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

BUILDERS = {
    **zoo_cnn.BUILDERS,
    **{k: v for k, v in zoo_transformer.BUILDERS.items() if k != "gpt2_decode"},  # below
    **zoo_audio.BUILDERS,
}


def _reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)


NIGHTLY = {"resnet50", "squeezenet", "bert_base"}  # 5-20 s each; their block kinds are tested
# elsewhere (ResNet-18's residual blocks, Concat of convs, test_e2e_zoo's BERT encoder) and the
# nightly run (EMBER_NIGHTLY=1) has them


@pytest.mark.parametrize("name", [nightly_param(n) if n in NIGHTLY else n for n in BUILDERS])
def test_quick_model_matches_onnxruntime(name):
    model, feeds = BUILDERS[name](np.random.default_rng(5), quick=True)
    want = _reference(model, feeds)
    assert max(float(np.std(w)) for w in want) > 1e-2  # activations neither vanish nor saturate
    _check(ember.compile(model, target="llvm").run(feeds), want)


def test_gpt2_decode_step_runs_any_cache_length():
    """The cache's sequence dim stays symbolic: one compiled model runs at two lengths, the
    logits match onnxruntime and each ``present`` is the past with the new token appended."""
    rng = np.random.default_rng(6)
    model, feeds = zoo_transformer.gpt2_decode(rng, quick=True)
    lib = ember.compile(model, target="llvm")
    assert isinstance(lib, DynamicModel)
    assert lib.symbols == [zoo_transformer.PAST]
    for past in (3, 8):
        step = zoo_transformer.decode_inputs(feeds, past, rng)
        got, want = lib.run(step), _reference(model, step)
        _check(got, want)
        present = got[1]  # layer 0's keys
        assert present.shape[2] == past + 1
        np.testing.assert_array_equal(present[:, :, :past], step["past_key_values.0.key"])


def test_gpt2_decode_step_appends_inside_its_attention():
    """On the CPU each layer's two cache concats join its attention (``fuse_cache_append``):
    one ``cached_attention`` node a layer writes ``present``, no concat is left, and every
    output matches onnxruntime's, the past part of each cache bit for bit."""
    rng = np.random.default_rng(9)
    model, feeds = zoo_transformer.gpt2_decode(rng, quick=True)
    lib = ember.compile(model, target="llvm")
    step = zoo_transformer.decode_inputs(feeds, 11, rng)
    sizes, _ = lib.bind(step)
    ops = [n.op for n in lib.specialize(dict(sizes)).graph.nodes]
    assert ops.count("cached_attention") == 2 and "concat" not in ops and "attention" not in ops
    got = lib.run(step)
    _check(got, _reference(model, step))
    names = [o.name for o in model.graph.output]
    for name, value in zip(names[1:], got[1:]):
        past = step[name.replace("present", "past_key_values")]
        np.testing.assert_array_equal(value[:, :, :11], past)


def test_attention_is_written_as_exporters_write_it():
    """Q K^T as MatMul over a Transpose(0, 1, 3, 2), then Div, Add (GPT-2's mask), Softmax
    and MatMul: the pattern an attention fusion matches."""
    model, _ = zoo_transformer.gpt2_decode(np.random.default_rng(0), quick=True)
    by_output = {o: n for n in model.graph.node for o in n.output}
    softmaxes = [n for n in model.graph.node if n.op_type == "Softmax"]
    assert len(softmaxes) == 2  # one per layer
    for sm in softmaxes:
        add = by_output[sm.input[0]]
        div = by_output[add.input[0]]
        qk = by_output[div.input[0]]
        k_t = by_output[qk.input[1]]
        assert (add.op_type, div.op_type, qk.op_type) == ("Add", "Div", "MatMul")
        assert k_t.op_type == "Transpose" and list(k_t.attribute[0].ints) == [0, 1, 3, 2]


def test_dft_conv_front_end_matches_onnxruntime_stft():
    """The Conv with DFT kernels computes what ONNX's STFT does (independent reference)."""
    conv, feeds = zoo_audio.mel_spectrogram(np.random.default_rng(7), quick=True)
    stft, _ = zoo_audio.mel_spectrogram_stft(np.random.default_rng(7), quick=True)
    np.testing.assert_allclose(
        _reference(conv, feeds)[0], _reference(stft, feeds)[0], rtol=1e-4, atol=1e-4
    )


def test_stft_front_end_compiles():
    """The mel front end as exporters write it with ONNX's STFT, against onnxruntime."""
    model, feeds = zoo_audio.mel_spectrogram_stft(np.random.default_rng(8), quick=True)
    _check(ember.compile(model, target="llvm").run(feeds), _reference(model, feeds))


def test_mel_filterbank_covers_the_band():
    """Each triangle peaks at 1 on its centre bin region and the filters tile the band."""
    fb = zoo_audio.mel_filterbank(512, 40, 16000)
    assert fb.shape == (257, 40)
    assert np.all(fb >= 0) and np.all(fb.max(axis=0) > 0.5)
    centres = fb.argmax(axis=0)
    assert np.all(np.diff(centres) >= 0)
