"""DFT, STFT, the window functions and MelWeightMatrix against numpy's FFTs and window
formulas written out here (ONNX's periodic windows are numpy's symmetric ones of one more
point, cut short), on odd lengths that are not powers of two."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from tests.frontend.ops.shape_models import i64, node_model
from tests.nightly import examples, sample_in_ci

onnx = pytest.importorskip("onnx")


def _signal(rng: np.random.Generator, shape: tuple[int, ...], complex_: bool) -> np.ndarray:
    """Random data, never zero, with the trailing (real[, imaginary]) axis."""
    x = rng.uniform(0.5, 1.5, (*shape, 2 if complex_ else 1)) * rng.choice([-1, 1], (*shape, 1))
    return x.astype(np.float32)


def _as_complex(x: np.ndarray) -> np.ndarray:
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(complex)


def _np_axis(axis: int, x: np.ndarray) -> int:
    """ONNX's axis of ``x`` (counted with the trailing real/imaginary axis) in numpy's terms."""
    return axis % x.ndim


def _split(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


def _declare_output(model, elem_type: int, rank: int):
    """``model`` with its output declared of ``elem_type`` and ``rank`` unknown dims (what
    ONNX's shape inference leaves unset when a size is fed at run time)."""
    del model.graph.output[:]
    model.graph.output.append(onnx.helper.make_tensor_value_info("y0", elem_type, [None] * rank))
    return model


def _run(model, **feeds: np.ndarray) -> np.ndarray:
    (got,) = ember.compile(model, target="llvm").run(feeds)
    return got


def _dft(x, axis=None, length=None, opset=20, **attrs):
    """Ember's DFT of ``x``: the axis an input (opset 20) or attribute (17), dft_length
    a constant input when given."""
    slots: list = [("x", x), None if length is None else ("=n", i64(length))]
    if opset >= 20:
        slots.append(None if axis is None else ("=a", i64(axis)))
    elif axis is not None:
        attrs["axis"] = axis
    return _run(node_model("DFT", slots, opset=opset, **attrs), x=x)


@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2, -2, -3])
@pytest.mark.parametrize("length", [None, 5, 11])  # the axis as is, cut, zero-padded
def test_dft_matches_numpy_fft(rng, complex_, axis, length):
    sample_in_ci(complex_, axis, length)
    x = _signal(rng, (3, 7, 9), complex_)
    want = np.fft.fft(_as_complex(x), n=length, axis=_np_axis(axis, x))
    np.testing.assert_allclose(_dft(x, axis, length), _split(want), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("length", [None, 7, 13])
def test_rfft_is_the_first_half(rng, length):
    x = _signal(rng, (5, 9), False)
    want = np.fft.rfft(x[..., 0], n=length, axis=1)
    np.testing.assert_allclose(_dft(x, 1, length, onesided=1), _split(want), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("axis", [0, 1, -2])
@pytest.mark.parametrize("length", [None, 6, 9])
def test_inverse_dft_matches_numpy_ifft(rng, axis, length):
    x = _signal(rng, (5, 7), True)
    want = np.fft.ifft(_as_complex(x), n=length, axis=_np_axis(axis, x))
    got = _dft(x, axis, length, inverse=1)
    np.testing.assert_allclose(got, _split(want), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("length", [None, 9, 10, 15])  # default 2·(n-1), odd and even, padded
def test_irfft_of_a_one_sided_spectrum_is_real(rng, length):
    spectrum = _signal(rng, (3, 6), True)
    want = np.fft.irfft(_as_complex(spectrum), n=length, axis=1)
    got = _dft(spectrum, 1, length, inverse=1, onesided=1)
    np.testing.assert_allclose(got, want[..., None], rtol=1e-4, atol=1e-5)


def test_opset_17_takes_the_axis_as_an_attribute(rng):
    x = _signal(rng, (3, 7, 5), True)
    np.testing.assert_allclose(
        _dft(x, 2, opset=17), _split(np.fft.fft(_as_complex(x), axis=2)), rtol=1e-4, atol=1e-4
    )
    default = _dft(x, opset=17)  # axis 1 before opset 20, -2 from it
    np.testing.assert_allclose(default, _split(np.fft.fft(_as_complex(x), axis=1)), atol=1e-4)


def test_dft_length_fed_at_run_time_compiles_per_value(rng):
    x = _signal(rng, (2, 7), False)
    model = node_model("DFT", [("x", x), ("n", np.array(5, np.int64)), ("=a", i64(1))], opset=20)
    lib = ember.compile(model, target="llvm")
    for n in (5, 9):
        (got,) = lib.run({"x": x, "n": np.array(n, np.int64)})
        np.testing.assert_allclose(got, _split(np.fft.fft(x[..., 0], n=n, axis=1)), atol=1e-4)


@settings(max_examples=examples(12), deadline=None)
@given(
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    data=st.data(),
    complex_=st.booleans(),
    mode=st.sampled_from(["fft", "rfft", "ifft", "irfft"]),
)
def test_dft_property(shape, data, complex_, mode):  # noqa: ANN001
    """Any signal axis, transform length and direction agrees with numpy's FFTs."""
    axis = data.draw(st.integers(-len(shape) - 1, len(shape) - 1).filter(lambda a: a != -1))
    length = data.draw(st.one_of(st.none(), st.integers(1, 12)))
    rng = np.random.default_rng(sum(shape) * 31 + len(shape))
    x = _signal(rng, tuple(shape), complex_ or mode == "irfft")
    z, n, axis_np = _as_complex(x), length, _np_axis(axis, x)
    if mode == "fft":
        want, attrs = _split(np.fft.fft(z, n=n, axis=axis_np)), {}
    elif mode == "ifft":
        want, attrs = _split(np.fft.ifft(z, n=n, axis=axis_np)), {"inverse": 1}
    elif mode == "rfft":
        full = np.fft.fft(z, n=n, axis=axis_np)
        half = np.take(full, np.arange(full.shape[axis_np] // 2 + 1), axis=axis_np)
        want, attrs = _split(half), {"onesided": 1}
    else:
        if n is None and z.shape[axis_np] == 1:
            n = 1  # the default 2·(n-1) would be an empty transform
        want, attrs = np.fft.irfft(z, n=n, axis=axis_np)[..., None], {"inverse": 1, "onesided": 1}
    got = _dft(x, axis, n, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_dft_on_the_complex_axis_is_an_error(rng):
    x = _signal(rng, (3, 5), True)
    with pytest.raises(ember.ArgumentError, match="axis"):
        ember.compile(node_model("DFT", [("x", x), None, ("=a", i64(-1))], opset=20), target="llvm")


def _frames(signal: np.ndarray, step: int, length: int, width: int) -> np.ndarray:
    """(batch, frames, width): frames of ``width`` samples, zero past the end."""
    count = 1 + (signal.shape[1] - length) // step
    padded = np.pad(signal, ((0, 0), (0, width + step * count)))
    return np.stack([padded[:, f * step : f * step + width] for f in range(count)], axis=1)


@pytest.mark.parametrize("runtime_window", [False, True])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_with_a_window(rng, runtime_window, onesided):
    x = _signal(rng, (2, 53), False)
    window = rng.uniform(0.2, 1.0, 11).astype(np.float32)
    win_slot = ("w", window) if runtime_window else ("=w", window)
    model = node_model("STFT", [("x", x), ("=s", i64(5)), win_slot], onesided=onesided)
    feeds = {"x": x, **({"w": window} if runtime_window else {})}
    frames = _frames(x[..., 0], 5, 11, 11) * window
    spectrum = np.fft.rfft(frames, axis=2) if onesided else np.fft.fft(frames, axis=2)
    np.testing.assert_allclose(_run(model, **feeds), _split(spectrum), rtol=1e-4, atol=1e-4)


def test_stft_complex_signal_frame_length_and_window_size_differ(rng):
    """A 9-point window framed every 4 samples, each frame a DFT of 7 (cut to 7), the
    last frame running past the signal's end reading zeros."""
    x = _signal(rng, (1, 31), True)
    window = rng.uniform(0.2, 1.0, 9).astype(np.float32)
    slots = [("x", x), ("=s", i64(4)), ("=w", window), ("=n", i64(7))]
    got = _run(node_model("STFT", slots, onesided=0), x=x)
    frames = _frames(_as_complex(x), 4, 7, 9) * window
    np.testing.assert_allclose(got, _split(np.fft.fft(frames, n=7, axis=2)), atol=1e-4)


def test_stft_without_a_window_uses_frame_length(rng):
    x = _signal(rng, (3, 40), False)
    got = _run(node_model("STFT", [("x", x), ("=s", i64(3)), None, ("=n", i64(13))]), x=x)
    want = np.fft.rfft(_frames(x[..., 0], 3, 13, 13), axis=2)
    np.testing.assert_allclose(got, _split(want), rtol=1e-4, atol=1e-4)


def _cosine_sum(n: int, denominator: int, coefficients: tuple[float, ...]) -> np.ndarray:
    k = np.arange(n)
    return sum(
        (-1) ** j * a * np.cos(2 * np.pi * j * k / denominator) for j, a in enumerate(coefficients)
    )


WINDOWS = {
    "HannWindow": lambda n: np.hanning(n),
    "HammingWindow": lambda n: _cosine_sum(n, n - 1, (25 / 46, 21 / 46)),  # not numpy's 0.54
    "BlackmanWindow": lambda n: np.blackman(n),
}


@pytest.mark.parametrize("op", sorted(WINDOWS))
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [7, 13])
def test_windows(op, periodic, size):
    symmetric = WINDOWS[op]
    want = symmetric(size + 1)[:-1] if periodic else symmetric(size)
    model = node_model(op, [("=n", np.array(size, np.int32))], periodic=periodic)
    (got,) = ember.compile(model, target="llvm").run({})
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_window_output_datatype_double():
    double = onnx.TensorProto.DOUBLE
    model = node_model("HannWindow", [("=n", i64(9))], output_datatype=double)
    model = _declare_output(model, double, 1)
    (got,) = ember.compile(model, target="llvm").run({})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.hanning(10)[:-1], rtol=1e-12, atol=1e-12)


def test_window_size_fed_at_run_time_compiles_per_value():
    model = node_model("BlackmanWindow", [("n", np.array(7, np.int64))], periodic=0)
    model = _declare_output(model, onnx.TensorProto.FLOAT, 1)
    lib = ember.compile(model, target="llvm")
    for size in (7, 11):
        (got,) = lib.run({"n": np.array(size, np.int64)})
        np.testing.assert_allclose(got, np.blackman(size), atol=1e-6)


@pytest.mark.parametrize(
    "bins,length,rate,low,high",
    [(8, 16, 8192, 0.0, 4096.0), (13, 201, 16000, 125.0, 7600.0), (5, 63, 22050, 300.0, 5000.0)],
)
def test_mel_weight_matrix_matches_onnx_reference(bins, length, rate, low, high):
    from onnx.reference import ReferenceEvaluator

    slots = [
        ("=b", np.array(bins, np.int32)),
        ("=n", np.array(length, np.int32)),
        ("=r", np.array(rate, np.int32)),
        ("=lo", np.array(low, np.float32)),
        ("=hi", np.array(high, np.float32)),
    ]
    model = node_model("MelWeightMatrix", slots)
    (got,) = ember.compile(model, target="llvm").run({})
    (want,) = ReferenceEvaluator(model).run(None, {})
    assert got.shape == (length // 2 + 1, bins) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert np.allclose(got.max(axis=0), 1.0) and got.min() >= 0.0  # triangles peaking at 1
