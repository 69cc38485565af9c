"""Audio models as exporters write them, with seeded random weights: a log-mel spectrogram
front end and a DS-CNN keyword-spotting network.

Ember has no ``STFT`` operator, so :func:`mel_spectrogram` writes the short-time Fourier
transform the way models meant for runtimes without it do: the waveform reflect-padded
by half a window (``center=True``), framed and transformed in one strided ``Conv`` whose
kernels are the Hann-windowed cosine and sine rows of the DFT matrix, the power
``re^2 + im^2``, a ``MatMul`` with a triangular mel filterbank and a ``Log``.
:func:`mel_spectrogram_stft` is the same front end with ONNX's ``STFT`` (opset 17), as
``torch.stft`` exports it, to show which runtimes take it. :func:`kws_dscnn` is the
DS-CNN of "Hello Edge" (Zhang et al., 2017): a strided conv over 49 frames of 10 MFCCs,
depthwise-separable blocks, average pooling and a 12-way classifier. Builders have the
catalog's signature ``builder(rng, quick) -> (model, inputs)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.frontend.testing.models import build_model
from ember.frontend.testing.zoo import _Builder


def hann(n: int) -> np.ndarray:
    """The periodic Hann window (``torch.hann_window``'s default)."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def mel_filterbank(n_fft: int, n_mels: int, rate: int) -> np.ndarray:
    """``[n_fft // 2 + 1, n_mels]`` triangular filters spaced evenly on the HTK mel scale
    from 0 Hz to the Nyquist frequency."""
    mel = np.linspace(0.0, 2595 * np.log10(1 + rate / 2 / 700), n_mels + 2)
    edges = 700 * (10 ** (mel / 2595) - 1)
    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)[:, None]
    lo, mid, hi = edges[:-2], edges[1:-1], edges[2:]
    return np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))


def _dft_kernels(n_fft: int) -> np.ndarray:
    """``[2 * bins, 1, n_fft]`` Conv kernels: windowed cos rows, then windowed -sin rows."""
    k = np.arange(n_fft // 2 + 1)[:, None]
    angle = 2 * np.pi * k * np.arange(n_fft) / n_fft
    rows = np.concatenate([np.cos(angle), -np.sin(angle)]) * hann(n_fft)
    return rows[:, None, :].astype("float32")


def _channels(b: _Builder, x: str, lo: int, hi: int) -> str:
    """``x[:, lo:hi]`` as a Slice with constant bounds."""
    bounds = [b.const(np.array([v], "int64"), "bound") for v in (lo, hi, 1)]
    return b.node("Slice", [x, *bounds])


def _log_mel(b: _Builder, power: str, n_fft: int, n_mels: int, rate: int) -> str:
    """[1, frames, bins] power -> [1, frames, n_mels] log-mel."""
    fb = b.const(mel_filterbank(n_fft, n_mels, rate).astype("float32"), "mel_fb")
    mel = b.node("MatMul", [power, fb])
    return b.node("Log", [b.node("Max", [mel, b.const(np.array(1e-10, "float32"), "eps")])])


def _waveform(rng: np.random.Generator, samples: int) -> np.ndarray:
    """Noise around a few tones, at the level of normalized speech."""
    t = np.arange(samples) / 16000
    tones = sum(np.sin(2 * np.pi * f * t) for f in (220.0, 440.0, 1250.0))
    return (0.1 * tones + 0.05 * rng.standard_normal(samples))[None].astype("float32")


def mel_spectrogram_sized(
    rng: np.random.Generator,
    samples: int = 16000,
    n_fft: int = 400,
    hop: int = 160,
    n_mels: int = 80,
    rate: int = 16000,
) -> tuple[Any, dict]:
    """Log-mel spectrogram of ``[1, samples]`` audio (Whisper's n_fft 400, hop 160, 80 mels
    at 16 kHz by default): STFT as a strided Conv with DFT kernels; ``[1, frames, n_mels]``
    out."""
    b = _Builder(rng)
    bins = n_fft // 2 + 1
    x = b.node("Unsqueeze", ["waveform", b.const(np.array([1], "int64"), "axes")])
    half = n_fft // 2
    pads = b.const(np.array([0, 0, half, 0, 0, half], "int64"), "pads")
    x = b.node("Pad", [x, pads], mode="reflect")
    kernels = b.const(_dft_kernels(n_fft), "dft")
    spec = b.node("Conv", [x, kernels], kernel_shape=[n_fft], strides=[hop])  # [1, 2 bins, frames]
    re, im = (_channels(b, spec, lo, lo + bins) for lo in (0, bins))
    power = b.node("Add", [b.node("Mul", [re, re]), b.node("Mul", [im, im])])
    power = b.node("Transpose", [power], perm=[0, 2, 1])
    out = _log_mel(b, power, n_fft, n_mels, rate)
    wave = _waveform(rng, samples)
    return build_model(b.nodes, {"waveform": wave}, [out], b.weights), {"waveform": wave}


def mel_spectrogram(rng: np.random.Generator, quick: bool = False) -> tuple[Any, dict]:
    """Log-mel of one second of 16 kHz audio (quick: 400 samples, n_fft 32, hop 8, 8
    mels)."""
    if quick:
        return mel_spectrogram_sized(rng, 400, n_fft=32, hop=8, n_mels=8)
    return mel_spectrogram_sized(rng)


def mel_spectrogram_stft(rng: np.random.Generator, quick: bool = False) -> tuple[Any, dict]:
    """:func:`mel_spectrogram` with ONNX's STFT operator (one-sided, Hann window)."""
    samples, n_fft, hop, n_mels = (400, 32, 8, 8) if quick else (16000, 400, 160, 80)
    b = _Builder(rng)
    half = b.const(np.array([0, n_fft // 2, 0, n_fft // 2], "int64"), "pads")
    x = b.node("Pad", ["waveform", half], mode="reflect")  # center=True
    x = b.node("Unsqueeze", [x, b.const(np.array([2], "int64"), "axes")])
    step = b.name("hop")
    b.weights[step] = np.array(hop, "int64")  # a scalar (``const`` makes arrays 1-d)
    window = b.const(hann(n_fft).astype("float32"), "window")
    spec = b.node("STFT", [x, step, window], onesided=1)  # [1, frames, bins, 2]
    last = b.const(np.array([-1], "int64"), "axes")
    power = b.node("ReduceSum", [b.node("Mul", [spec, spec]), last], keepdims=0)
    out = _log_mel(b, power, n_fft, n_mels, 16000)
    wave = _waveform(rng, samples)
    return build_model(b.nodes, {"waveform": wave}, [out], b.weights), {"waveform": wave}


def kws_dscnn_sized(
    rng: np.random.Generator,
    frames: int = 49,
    coeffs: int = 10,
    channels: int = 64,
    blocks: int = 4,
    classes: int = 12,
) -> tuple[Any, dict]:
    """DS-CNN keyword spotting on ``[1, 1, frames, coeffs]`` MFCCs: a 10x4 stride-2 conv
    with TensorFlow's SAME padding (more at the end), ``blocks`` depthwise 3x3 +
    pointwise 1x1 blocks (batch norm, ReLU), global average pool, a dense layer."""
    b = _Builder(rng)
    w = rng.standard_normal((channels, 1, 10, 4)) * np.sqrt(2.0 / 40)
    out_h, out_w = (frames + 1) // 2, (coeffs + 1) // 2
    pad_h, pad_w = max(0, (out_h - 1) * 2 + 10 - frames), max(0, (out_w - 1) * 2 + 4 - coeffs)
    pads = [pad_h // 2, pad_w // 2, pad_h - pad_h // 2, pad_w - pad_w // 2]
    w_name = b.const(w.astype("float32"), "w")
    x = b.node("Conv", ["mfcc", w_name], kernel_shape=[10, 4], strides=[2, 2], pads=pads)
    x = b.node("Relu", [x])
    for _ in range(blocks):
        x = b.node("Relu", [b.conv_bn(x, channels, channels, 3, groups=channels)])
        x = b.node("Relu", [b.conv_bn(x, channels, channels, 1)])
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    fc = (rng.standard_normal((classes, channels)) / np.sqrt(channels)).astype("float32")
    bias = b.const(np.zeros(classes, "float32"), "fb")
    logits = b.node("Gemm", [x, b.const(fc, "fc"), bias], transB=1)
    mfcc = rng.standard_normal((1, 1, frames, coeffs)).astype("float32")
    return build_model(b.nodes, {"mfcc": mfcc}, [logits], b.weights), {"mfcc": mfcc}


def kws_dscnn(rng: np.random.Generator, quick: bool = False) -> tuple[Any, dict]:
    """DS-CNN (small: 64 channels, 4 blocks) on 49x10 MFCCs (quick: 16 channels, 2 blocks,
    25 frames)."""
    if quick:
        return kws_dscnn_sized(rng, frames=25, channels=16, blocks=2)
    return kws_dscnn_sized(rng)


BUILDERS = {"mel_spectrogram": mel_spectrogram, "kws_dscnn": kws_dscnn}
"""This module's models by name, each ``builder(rng, quick) -> (model, inputs)``; the STFT
variant is left out (Ember has no STFT)."""
