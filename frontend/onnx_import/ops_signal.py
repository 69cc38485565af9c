"""ONNX signal processing: DFT, STFT, the Hann, Hamming and Blackman windows, MelWeightMatrix.

Everything here has static sizes: a transform length, a window size, a frame step are
read with ``ctx.constant`` (fed at run time, the model is compiled per value), so each op
becomes either a constant or a fixed chain of ordinary Ember ops. The windows and the mel
filter bank depend on nothing but those sizes and are computed here in numpy, in float64,
and cast once. A DFT of length ``L`` along one axis is a linear map, so it is one matmul
with a constant matrix: the transform axis is moved next to the trailing (real, imaginary)
axis, the two are flattened into one of ``N·C`` entries (``C`` = 1 for real input, 2 for
complex), and a real ``(N·C, K·C_out)`` matrix holding the cosines and sines (with zero
padding or truncation to ``L``, the one-sided half, the inverse's ``1/L`` and the
Hermitian weights of an inverse real FFT folded in) maps them to the output bins. That is
O(N·L) work instead of an FFT's O(L log L), a fair trade for the short transforms models
use (speech frames of a few hundred samples), and it runs on the matmul schedules every
target already has. STFT frames the signal with one gather and reuses the same matrix,
with a constant window folded into it. Semantics follow ONNX's reference implementation
(``onnx/reference/ops/op_dft.py`` and friends), including its defaults: the inverse
real transform's ``dft_length`` of ``2·(n - 1)``, Hamming's ``α = 25/46``, and the mel
scale's ``num_mel_bins + 2`` steps.
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.ops_broadcast import onnx_dtype
from ember.frontend.onnx_import.registry import converter

# Entries of the constant DFT matrix above which a transform is refused: 2**27 float32s
# (512 MiB) is a complex transform of about 5800 points, far past what a model's frames use.
MAX_MATRIX_ENTRIES = 1 << 27


def _scalar(ctx: ConvertContext, i: int, what: str) -> float | int:
    """Input ``i`` as one number (a size, a rate); it must be known at compile time."""
    data = np.asarray(ctx.constant(i)).reshape(-1)
    if data.size != 1:
        raise ArgumentError(f"{ctx.op_type}: {what} must be a scalar, got {data.size} values")
    return data[0].item()


def _scalar_int(ctx: ConvertContext, i: int, what: str) -> int:
    return int(_scalar(ctx, i, what))


def _check_float(ctx: ConvertContext, i: int) -> None:
    dtype = ctx.type(i).dtype
    if dtype not in ("float16", "float32", "float64"):
        raise ArgumentError(f"{ctx.op_type}: input of type {dtype} is not supported, only floats")


def _output_dtype(ctx: ConvertContext) -> np.dtype:
    code = int(ctx.attr("output_datatype", 1))
    return np.dtype(onnx_dtype(code, f"{ctx.op_type} 'output_datatype'"))


# ---- the DFT as a matrix -----------------------------------------------------------------


def _phase(rows: int, cols: int, length: int) -> np.ndarray:
    """2π·(r·c mod L)/L for every (r, c): the product reduced exactly in integers first, so
    long transforms lose no precision to large angles."""
    r = np.arange(rows, dtype=np.int64)[:, None]
    c = np.arange(cols, dtype=np.int64)[None, :]
    return 2.0 * np.pi * ((r * c) % length) / length


def dft_matrix(
    n_in: int,
    channels: int,
    length: int,
    inverse: bool,
    onesided: bool,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """The real matrix ``M`` with ``y = x @ M`` for ``x`` of ``n_in`` samples × ``channels``
    (1: real, 2: real and imaginary, interleaved) flattened, ``y`` the output bins ×
    (real, imaginary) flattened, or for an inverse one-sided transform ``length`` real
    samples. Samples past ``length`` are dropped and missing ones count as zero; ``weights``
    (a window) scales each input sample."""
    used = min(n_in, length)
    if inverse and onesided:  # irfft: the missing half is the conjugate mirror of the given one
        used = min(n_in, length // 2 + 1)
        angle = _phase(used, length, length)  # (bin k, sample t)
        k = np.arange(used)
        mirror = np.where((k == 0) | (2 * k == length), 1.0, 2.0)[:, None] / length
        m = np.zeros((n_in, channels, length, 1))
        m[:used, 0, :, 0] = mirror * np.cos(angle)
        if channels == 2:
            m[:used, 1, :, 0] = -mirror * np.sin(angle)
    else:
        k_out = length // 2 + 1 if onesided and not inverse else length
        sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
        angle = sign * _phase(used, k_out, length)  # (sample n, bin k)
        cos, sin = scale * np.cos(angle), scale * np.sin(angle)
        m = np.zeros((n_in, channels, k_out, 2))
        m[:used, 0, :, 0], m[:used, 0, :, 1] = cos, sin  # x_re·e^{iθ}
        if channels == 2:
            m[:used, 1, :, 0], m[:used, 1, :, 1] = -sin, cos  # i·x_im·e^{iθ}
    if weights is not None:
        m *= np.asarray(weights, dtype=np.float64).reshape(n_in, 1, 1, 1)
    return m.reshape(n_in * channels, -1)


def _dft_along(
    ctx: ConvertContext,
    x: str,
    axis: int,
    length: int,
    inverse: bool,
    onesided: bool,
    weights: np.ndarray | None = None,
) -> str:
    """``x`` (static, last axis the real/imaginary one) transformed along ``axis``."""
    t = ctx.type_of(x)
    dims, rank = t.dims, t.ndim
    n_in, channels = dims[axis], dims[-1]
    k_out = length // 2 + 1 if onesided and not inverse else length
    c_out = 1 if inverse and onesided else 2
    if n_in * channels * k_out * c_out > MAX_MATRIX_ENTRIES:
        raise ArgumentError(
            f"{ctx.op_type}: a transform of {n_in} samples to {k_out} bins is not supported "
            f"(Ember computes it as a matmul with a {n_in * channels}×{k_out * c_out} matrix)"
        )
    perm = (*(d for d in range(rank - 1) if d != axis), axis, rank - 1)
    if perm != tuple(range(rank)):
        x = ctx.emit1("transpose", [x], {"perm": perm})
    rest = tuple(dims[p] for p in perm[:-2])
    rows = int(np.prod(rest, dtype=np.int64))
    flat = ctx.emit1("reshape", [x], {"shape": (rows, n_in * channels)})
    matrix = dft_matrix(n_in, channels, length, inverse, onesided, weights)
    y = ctx.emit1("matmul", [flat, ctx.const(matrix.astype(t.dtype))])
    y = ctx.emit1("reshape", [y], {"shape": (*rest, k_out, c_out)})
    if perm != tuple(range(rank)):
        y = ctx.emit1("transpose", [y], {"perm": tuple(int(p) for p in np.argsort(perm))})
    return y


def _dft(ctx: ConvertContext, axis: int) -> list[str]:
    t = ctx.type(0)
    if not t.is_static:
        raise ArgumentError(f"DFT: an input of symbolic shape {t} is not supported")
    if t.ndim < 2 or t.dims[-1] not in (1, 2):
        raise ArgumentError(f"DFT: the input's last axis must be 1 (real) or 2 (complex), got {t}")
    _check_float(ctx, 0)
    if not (-t.ndim <= axis <= -2 or 0 <= axis <= t.ndim - 2):
        raise ArgumentError(f"DFT: axis {axis} is not a signal axis of the {t.ndim}-D input")
    axis %= t.ndim
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    n = t.dims[axis]
    if ctx.has_input(1):
        length = _scalar_int(ctx, 1, "dft_length")
    else:
        length = 2 * (n - 1) if inverse and onesided else n
    if length < 1:
        raise ArgumentError(f"DFT: dft_length must be positive, got {length}")
    return [_dft_along(ctx, ctx.input(0), axis, length, inverse, onesided)]


@converter("DFT", since=17, until=19)
def dft_17(ctx: ConvertContext) -> list[str]:
    """ONNX DFT before opset 20: the axis is an attribute (default 1)."""
    return _dft(ctx, int(ctx.attr("axis", 1)))


@converter("DFT", since=20)
def dft_20(ctx: ConvertContext) -> list[str]:
    """ONNX DFT from opset 20: the axis is an optional input (default -2)."""
    return _dft(ctx, _scalar_int(ctx, 2, "axis") if ctx.has_input(2) else -2)


@converter("STFT", since=17)
def stft(ctx: ConvertContext) -> list[str]:
    """ONNX STFT: frames of the window's size every ``frame_step`` samples (the last ones
    zero-padded), windowed, each a DFT of ``frame_length`` along the frame."""
    t = ctx.type(0)
    if not t.is_static or t.ndim != 3 or t.dims[-1] not in (1, 2):
        raise ArgumentError(f"STFT: signal must be static (batch, length, 1 or 2), got {t}")
    _check_float(ctx, 0)
    size = t.dims[1]
    step = _scalar_int(ctx, 1, "frame_step")
    window = ctx.input(2) if ctx.has_input(2) else None
    if window is not None and (not ctx.type(2).is_static or ctx.type(2).ndim != 1):
        raise ArgumentError(f"STFT: window must be 1-D, got {ctx.type(2)}")
    if ctx.has_input(3):
        length = _scalar_int(ctx, 3, "frame_length")
    else:
        length = ctx.type(2).dims[0] if window is not None else size
    width = ctx.type(2).dims[0] if window is not None else length
    frames = 1 + (size - length) // step if step > 0 and length > 0 else 0
    if frames < 1 or width < 1:
        raise ArgumentError(
            f"STFT: frame_step {step} and frame_length {length} give no frame of {size} samples"
        )
    x = ctx.input(0)
    span = (frames - 1) * step + width
    if span > size:  # frames running off the end read zeros
        pads = (0, 0, 0, 0, span - size, 0)
        x = ctx.emit1("pad", [x], {"pads": pads, "mode": "constant", "value": 0.0})
    starts = np.arange(frames, dtype=np.int64)[:, None] * step
    index = ctx.const(starts + np.arange(width, dtype=np.int64)[None, :])
    x = ctx.emit1("gather", [x, index], {"axis": 1})  # (batch, frames, width, channels)
    weights = ctx.value_of(window) if window is not None else None
    if window is not None and weights is None:  # a run-time window: multiply before the DFT
        shaped = ctx.emit1("reshape", [window], {"shape": (1, 1, width, 1)})
        x = ctx.emit1("multiply", [x, shaped])
    onesided = bool(ctx.attr("onesided", 1))
    return [_dft_along(ctx, x, 2, length, False, onesided, weights)]


# ---- constants ---------------------------------------------------------------------------


def cosine_window(size: int, periodic: bool, coefficients: tuple[float, ...]) -> np.ndarray:
    """Σ_j (-1)^j a_j cos(2π j n / N) for n < size, N = size (periodic) or size - 1
    (symmetric; a symmetric window of one point is 0/0, NaN, as ONNX's function body
    computes it)."""
    denominator = size if periodic else size - 1
    n = np.arange(size, dtype=np.float64)
    out = np.zeros(size)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j, a in enumerate(coefficients):
            out += (-1) ** j * a * np.cos(2.0 * np.pi * j * n / denominator)
    return out


def _window(ctx: ConvertContext, coefficients: tuple[float, ...]) -> list[str]:
    size = _scalar_int(ctx, 0, "size")
    if size < 0:
        raise ArgumentError(f"{ctx.op_type}: size must not be negative, got {size}")
    periodic = bool(ctx.attr("periodic", 1))
    with np.errstate(invalid="ignore"):
        data = cosine_window(size, periodic, coefficients).astype(_output_dtype(ctx))
    return [ctx.const(data)]


@converter("HannWindow", since=17)
def hann_window(ctx: ConvertContext) -> list[str]:
    """ONNX HannWindow: sin²(πn/N) = 1/2 - 1/2·cos(2πn/N)."""
    return _window(ctx, (0.5, 0.5))


@converter("HammingWindow", since=17)
def hamming_window(ctx: ConvertContext) -> list[str]:
    """ONNX HammingWindow: α - (1 - α)·cos(2πn/N) with ONNX's α = 25/46, not the 0.54
    of numpy's and torch's."""
    return _window(ctx, (25.0 / 46.0, 21.0 / 46.0))


@converter("BlackmanWindow", since=17)
def blackman_window(ctx: ConvertContext) -> list[str]:
    """ONNX BlackmanWindow: 0.42 - 0.5·cos(2πn/N) + 0.08·cos(4πn/N)."""
    return _window(ctx, (0.42, 0.5, 0.08))


def mel_weight_matrix(
    bins: int,
    dft_length: int,
    sample_rate: float,
    lower: float,
    upper: float,
    edge_dtype: np.dtype | type = np.float64,
) -> np.ndarray:
    """(dft_length // 2 + 1, bins) triangular filters, peak 1, their edges ``bins + 2``
    points spaced evenly in mel from ``lower`` (one step per point, so the last edge falls
    one step short of ``upper``, as ONNX's reference has it) and snapped down to DFT bins.
    The mel range and step are computed in ``edge_dtype``, the hertz inputs' type, the rest
    in float64, as the reference does: an edge that lands near a bin boundary then snaps to
    the same bin."""
    f = np.dtype(edge_dtype).type
    mel_low, mel_high = (f(2595) * np.log10(f(1) + f(x) / f(700)) for x in (lower, upper))
    step = (mel_high - mel_low) / f(bins + 2)
    mel = np.arange(bins + 2) * np.float64(step) + np.float64(mel_low)
    hertz = 700.0 * (np.power(10.0, mel / 2595.0) - 1.0)
    edges = ((dft_length + 1) * hertz // sample_rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, bins))
    if edges.min() < 0 or edges[:-1].max() >= out.shape[0] or edges[-1] > out.shape[0]:
        raise ArgumentError(
            f"MelWeightMatrix: band edges {lower}..{upper} Hz fall outside the "
            f"{out.shape[0]} DFT bins of a length-{dft_length} DFT at {sample_rate} Hz"
        )
    for i in range(bins):
        left, center, right = (int(e) for e in edges[i : i + 3])
        if center == left:
            out[center, i] = 1.0
        else:
            rise = np.arange(left, center + 1)
            out[rise, i] = (rise - left) / (center - left)
        if right > center:
            fall = np.arange(center, right)
            out[fall, i] = (right - fall) / (right - center)
    return out


@converter("MelWeightMatrix", since=17)
def mel_weight_matrix_17(ctx: ConvertContext) -> list[str]:
    """ONNX MelWeightMatrix: a constant computed from its (compile-time) scalar inputs."""
    bins = _scalar_int(ctx, 0, "num_mel_bins")
    dft_length = _scalar_int(ctx, 1, "dft_length")
    sample_rate = float(_scalar(ctx, 2, "sample_rate"))
    if bins < 1 or dft_length < 1 or sample_rate <= 0:
        raise ArgumentError(
            f"MelWeightMatrix: num_mel_bins {bins}, dft_length {dft_length} and sample_rate "
            f"{sample_rate} must be positive"
        )
    lower = float(_scalar(ctx, 3, "lower_edge_hertz"))
    upper = float(_scalar(ctx, 4, "upper_edge_hertz"))
    edge_dtype = np.result_type(ctx.constant(3), ctx.constant(4))
    data = mel_weight_matrix(bins, dft_length, sample_rate, lower, upper, edge_dtype)
    return [ctx.const(data.astype(_output_dtype(ctx)))]
