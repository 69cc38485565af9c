"""NaN in the selecting operators, on ``llvm`` and on ``cuda`` in the emulator (issue 22).

Random rows with NaN planted, a row of NaN only, a row without NaN, ±Inf and repeated
values. TopK is checked against onnxruntime (NaN ordered above every number). For the
max/min reductions, MaxPool and ArgMax/ArgMin, onnxruntime's own answer depends on where
a NaN sits (``ReduceMax([nan, 1, 2])`` is NaN, ``ReduceMax([1, nan, 2])`` is 2), so the
reference is numpy's (NaN propagates, ``argmax`` points at the first NaN), which is what
ONNX's reference implementation computes; onnxruntime is still checked on the rows where
its answer does not depend on the position (no NaN, or NaN only). See
``ember/tir/topi/nan_order.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from tests.frontend.onnx_models import run_ort, single_node
from tests.nightly import sample_in_ci

TARGETS = ["llvm", "cuda"]


def _run(model, inputs: dict, target: str, monkeypatch) -> list[np.ndarray]:
    if target == "cuda":
        pytest.importorskip("cuda")
        monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    return ember.compile(model, target=target).run(inputs)


def _rows_with_nan(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    """``rows`` x ``n`` floats: row 0 without NaN, row 1 only NaN, the rest with NaN, ±Inf
    and a repeated value planted at random places."""
    x = rng.standard_normal((rows, n)).astype("float32")
    for r in range(2, rows):
        x[r, rng.choice(n, size=1 + r % 3, replace=False)] = np.nan
        x[r, rng.integers(n)] = [np.inf, -np.inf][r % 2]
        a, b = rng.choice(n, size=2, replace=False)
        x[r, a] = x[r, b]
    x[0, rng.integers(n)] = -np.inf
    x[1] = np.nan
    return x


def _assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)  # NaN equals NaN here; -0.0 equals 0.0


# -- item 1 / 27: TopK ------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("k", [1, 4, 8, 9, 11])  # above topk.SELECT_MAX_K (8): ranking
def test_item_01_topk_with_nan_matches_onnxruntime(rng, monkeypatch, target, largest, k):
    sample_in_ci(target, largest, k)
    x = _rows_with_nan(rng, 6, 11)
    x[3, :4] = [1.0, -1.0, np.nan, 2.0]  # the row
    model = single_node(
        "TopK", {"x": x}, {"k": np.array([k], np.int64)}, n_outputs=2, largest=largest, axis=-1
    )
    want = run_ort(model, {"x": x})
    got = _run(model, {"x": x}, target, monkeypatch)
    assert ((got[1] >= 0) & (got[1] < x.shape[1])).all(), got[1]
    _assert_same(got[0], want[0])
    _assert_same(got[1], want[1])


@pytest.mark.parametrize("target", TARGETS)
def test_item_01_topk_nan_middle_axis_matches_onnxruntime(rng, monkeypatch, target):
    x = np.stack([_rows_with_nan(rng, 5, 3).T for _ in range(2)])  # (2, 3, 5), axis 1 of 3
    model = single_node("TopK", {"x": x}, {"k": np.array([3], np.int64)}, n_outputs=2, axis=1)
    want = run_ort(model, {"x": x})
    got = _run(model, {"x": x}, target, monkeypatch)
    _assert_same(got[0], want[0])
    _assert_same(got[1], want[1])


# -- item 1 / 27: ArgMax, ArgMin ---------------------------------------------------------------


def _numpy_arg(x: np.ndarray, kind: str, last: bool) -> np.ndarray:
    """numpy's argmax/argmin along the last axis (the first NaN wins), or the last index of
    the extreme with ``last`` (numpy on the reversed row)."""
    fn = np.argmax if kind == "max" else np.argmin
    if not last:
        return fn(x, axis=-1)
    return x.shape[-1] - 1 - fn(x[..., ::-1], axis=-1)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_item_27_argmax_argmin_with_nan_stay_in_range(rng, monkeypatch, target, op, last):
    x = _rows_with_nan(rng, 7, 5)
    model = single_node(op, {"x": x}, axis=1, keepdims=0, select_last_index=last)
    got = _run(model, {"x": x}, target, monkeypatch)[0]
    assert got.dtype == np.int64 and ((got >= 0) & (got < x.shape[1])).all(), got
    _assert_same(got, _numpy_arg(x, op[3:].lower(), bool(last)))
    # onnxruntime agrees where its answer does not depend on the NaN's position: the row
    # without NaN, and the row of NaN only but for select_last_index (it answers 0 there)
    want = run_ort(model, {"x": x})[0]
    _assert_same(got[: 1 if last else 2], want[: 1 if last else 2])


# -- item 28: max/min reductions, MaxPool, GlobalMaxPool propagate NaN -------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_item_28_reduce_max_min_propagate_nan(rng, monkeypatch, target, op):
    x = _rows_with_nan(rng, 5, 9).reshape(5, 3, 3)
    axes = np.array([1, 2], np.int64)
    model = single_node(op, {"x": x}, {"axes": axes}, opset=18, keepdims=1)
    got = _run(model, {"x": x}, target, monkeypatch)[0]
    want = (np.max if op == "ReduceMax" else np.min)(x, axis=(1, 2), keepdims=True)
    _assert_same(got, want)
    _assert_same(got[:2], run_ort(model, {"x": x})[0][:2])


def _max_pool_reference(x: np.ndarray, k: int, s: int, p: int) -> np.ndarray:
    """Max over each window of the unpadded input (padding never wins); NaN propagates."""
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.empty((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            y0, x0 = max(i * s - p, 0), max(j * s - p, 0)
            win = x[:, :, y0 : i * s - p + k, x0 : j * s - p + k]
            out[:, :, i, j] = win.max(axis=(2, 3))
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("k", "s", "p"), [(3, 2, 1), (2, 1, 0)])
def test_item_28_max_pool_propagates_nan(rng, monkeypatch, target, k, s, p):
    x = rng.standard_normal((1, 3, 7, 9)).astype("float32")
    x[0, 0, rng.integers(7, size=4), rng.integers(9, size=4)] = np.nan
    x[0, 1, 2:5, 3:6] = np.nan  # windows of NaN only
    x[0, 2, 1, :] = -np.inf
    x[0, 2, 4, 4] = np.inf
    model = single_node("MaxPool", {"x": x}, kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p])
    got = _run(model, {"x": x}, target, monkeypatch)[0]
    _assert_same(got, _max_pool_reference(x, k, s, p))


@pytest.mark.parametrize("target", TARGETS)
def test_item_28_max_pool_indices_point_at_the_nan(rng, monkeypatch, target):
    x = rng.standard_normal((1, 2, 5, 6)).astype("float32")
    x[0, 0, rng.integers(5, size=3), rng.integers(6, size=3)] = np.nan
    x[0, 1, :3, :3] = np.nan
    model = single_node(
        "MaxPool", {"x": x}, n_outputs=2, kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]
    )
    values, indices = _run(model, {"x": x}, target, monkeypatch)
    _assert_same(values, _max_pool_reference_pads(x))
    assert ((indices >= 0) & (indices < x.size)).all(), indices
    _assert_same(x.ravel()[indices], values)


def _max_pool_reference_pads(x: np.ndarray) -> np.ndarray:
    """2x2 windows, stride 2, padded by one row and column at the end."""
    padded = np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 0)), constant_values=-np.inf)
    n, c, h, w = padded.shape
    return padded.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


@pytest.mark.parametrize("target", TARGETS)
def test_item_28_global_max_pool_propagates_nan(rng, monkeypatch, target):
    x = rng.standard_normal((2, 3, 5, 3)).astype("float32")
    x[0, 1, 4, 2] = np.nan
    x[1, 2] = np.nan
    x[1, 0, 0, 0] = np.inf
    model = single_node("GlobalMaxPool", {"x": x})
    got = _run(model, {"x": x}, target, monkeypatch)[0]
    _assert_same(got, x.max(axis=(2, 3), keepdims=True))


def test_item_28_blocked_max_pool_after_conv_propagates_nan(rng):
    """Conv -> Sqrt -> MaxPool: on llvm the pool runs on the conv's blocked NCHW[c] layout
    (``max_pool_nchwc``); Sqrt of the negative outputs plants NaN in most windows."""
    from onnx import helper

    from tests.frontend.onnx_models import make_model

    x = rng.standard_normal((1, 16, 9, 9)).astype("float32")
    w = (rng.standard_normal((32, 16, 1, 1)) * 0.3).astype("float32")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Sqrt", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2]),
    ]
    model = make_model(nodes, {"x": x}, ["y"], {"w": w})
    got = ember.compile(model, target="llvm").run({"x": x})[0]
    with np.errstate(invalid="ignore"):
        r = np.sqrt(np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x))
    want = _max_pool_reference(r, 3, 2, 0)
    assert 0 < np.isnan(want).sum() < want.size
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # NaN where want has NaN


@pytest.mark.parametrize("target", TARGETS)
def test_item_27_float16_nan_topk_argmin_reduce_max(rng, monkeypatch, target):
    """float16 takes the same rules (``isnan`` of a half, in float on CUDA)."""
    x = _rows_with_nan(rng, 5, 6).astype(np.float16)
    k = np.array([6], np.int64)
    model = single_node("TopK", {"x": x}, {"k": k}, n_outputs=2, largest=0, axis=-1)
    got, want = _run(model, {"x": x}, target, monkeypatch), run_ort(model, {"x": x})
    _assert_same(got[0], want[0])
    _assert_same(got[1], want[1])
    model = single_node("ArgMin", {"x": x}, axis=1, keepdims=0)
    _assert_same(_run(model, {"x": x}, target, monkeypatch)[0], np.argmin(x, axis=1))
    model = single_node("ReduceMax", {"x": x}, {"axes": np.array([1], np.int64)}, opset=18)
    _assert_same(_run(model, {"x": x}, target, monkeypatch)[0], x.max(axis=1, keepdims=True))


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_item_27_nan_kernels_compile_with_nvrtc(rng, tmp_path, dtype):
    """The printed CUDA of the NaN-aware kernels (isnan of a half, NaN constants in TopK's
    identity) compiles: exporting builds every kernel's cubin with NVRTC."""
    pytest.importorskip("cuda")
    from onnx import helper

    from tests.frontend.onnx_models import make_model

    x = rng.standard_normal((1, 2, 5, 6)).astype(dtype)
    nodes = [
        helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=0),
        helper.make_node("ArgMin", ["x"], ["a"], axis=3),
        helper.make_node("ReduceMax", ["x", "axes"], ["r"]),
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2]),
        helper.make_node("Softmax", ["x"], ["s"]),
    ]
    inits = {"k": np.array([3], np.int64), "axes": np.array([2, 3], np.int64)}
    model = make_model(nodes, {"x": x}, ["v", "i", "a", "r", "p", "s"], inits, opset=18)
    ember.compile(model, target="cuda").export(tmp_path / "nan.ember", archs=["sm_80"])
    assert (tmp_path / "nan.ember").stat().st_size > 0


# -- item 1: Scatter max/min and DynamicQuantizeLinear ---------------------------------------


def _scatter_case(rng: np.random.Generator, op: str) -> tuple[dict, tuple, np.ndarray]:
    """Data (5, 7) with NaN, ±inf planted, and updates (with NaN) that never land on
    ``data[:3, 6]`` (duplicates included, one on a NaN of the data): those keep their NaN,
    -inf and +inf. Returns the model inputs, numpy's index for ``ufunc.at`` and the
    updates."""
    data = rng.standard_normal((5, 7)).astype(np.float32)
    data[:3, 6] = [-np.inf, np.nan, np.inf]
    data[4, 2] = np.nan
    if op == "ScatterElements":
        idx = rng.integers(0, 6, size=(5, 4))
        idx[4, 0] = 2
        upd = rng.standard_normal((5, 4)).astype(np.float32)
        upd[rng.integers(5), rng.integers(4)] = np.nan
        upd[3, :2], idx[3, :2] = [np.nan, 9.0], [2, 2]  # a NaN and a number on one element
        rows = np.broadcast_to(np.arange(5)[:, None], idx.shape)
        return {"d": data, "i": idx, "u": upd}, (rows, idx), upd
    idx = rng.integers(3, 5, size=(6, 1))
    idx[:2] = 4  # two rows of updates on row 4
    upd = rng.standard_normal((6, 7)).astype(np.float32)
    upd[0, 1], upd[rng.integers(2, 6), rng.integers(7)] = np.nan, np.nan
    return {"d": data, "i": idx, "u": upd}, (idx[:, 0],), upd


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
@pytest.mark.parametrize("reduction", ["max", "min"])
def test_item_01_scatter_max_min_propagate_nan(rng, monkeypatch, target, op, reduction):
    inputs, where, upd = _scatter_case(rng, op)
    attrs = {"axis": 1} if op == "ScatterElements" else {}
    model = single_node(op, inputs, opset=18, reduction=reduction, **attrs)
    want = inputs["d"].copy()
    (np.maximum if reduction == "max" else np.minimum).at(want, where, upd)
    got = _run(model, inputs, target, monkeypatch)[0]
    _assert_same(got, want)
    assert np.isnan(got[1, 6]) and got[0, 6] == -np.inf and got[2, 6] == np.inf
    # where no NaN is involved onnxruntime agrees (its NaN result depends on update order)
    ort = run_ort(model, inputs)[0]
    clean = ~np.isnan(want)
    np.testing.assert_array_equal(got[clean], ort[clean])


def _reference_dql(x: np.ndarray) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    model = single_node("DynamicQuantizeLinear", {"x": x}, n_outputs=3, opset=11)
    with np.errstate(invalid="ignore"):
        return ReferenceEvaluator(model).run(None, {"x": x})


@pytest.mark.parametrize("target", TARGETS)
def test_item_01_dynamic_quantize_linear_nan(rng, monkeypatch, target):
    def run(x: np.ndarray) -> list[np.ndarray]:
        model = single_node("DynamicQuantizeLinear", {"x": x}, n_outputs=3, opset=11)
        return _run(model, {"x": x}, target, monkeypatch)

    x = rng.standard_normal((3, 17)).astype(np.float32)
    x[1, 5] = np.nan
    y, scale, zp = run(x)  # a NaN range: scale NaN, zero point 255, every value 0
    assert np.isnan(scale) and zp == 255 and y.dtype == np.uint8 and not y.any()
    for g, w in zip((y, scale, zp), _reference_dql(x)):
        _assert_same(g, w)
    # onnxruntime where its SIMD min/max see the NaN (the last of 8), and where it cannot
    # depend on position (no NaN; an infinite range)
    for x in (
        np.append(rng.standard_normal(7), np.nan).astype(np.float32),
        rng.standard_normal((2, 9)).astype(np.float32),
        np.array([-np.inf, 1.5, 2.0, -0.5], np.float32),
        np.array([1.0, np.inf, -2.0], np.float32),
    ):
        model = single_node("DynamicQuantizeLinear", {"x": x}, n_outputs=3, opset=11)
        for g, w in zip(run(x), run_ort(model, {"x": x})):
            _assert_same(g, w)


@pytest.mark.nvrtc
def test_item_01_scatter_and_dynamic_quantize_compile_with_nvrtc(rng, tmp_path):
    """The NaN-propagating scatter reductions and DynamicQuantizeLinear compile to cubins."""
    pytest.importorskip("cuda")
    from onnx import helper

    from tests.frontend.onnx_models import make_model

    inputs, _, _ = _scatter_case(rng, "ScatterElements")
    nodes = [
        helper.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=1, reduction="max"),
        helper.make_node("ScatterND", ["d", "n", "v"], ["t"], reduction="min"),
        helper.make_node("DynamicQuantizeLinear", ["d"], ["y", "ys", "yz"]),
    ]
    inits = {"n": np.array([[4], [1]], np.int64), "v": inputs["d"][:2] + 1}
    model = make_model(nodes, inputs, ["s", "t", "y", "ys", "yz"], inits, opset=18)
    ember.compile(model, target="cuda").export(tmp_path / "nan.ember", archs=["sm_80"])
    assert (tmp_path / "nan.ember").stat().st_size > 0
