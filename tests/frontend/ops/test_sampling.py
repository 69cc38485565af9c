"""GridSample, AffineGrid, Col2Im and CenterCropPad against onnxruntime and against numpy
implementations written here from ONNX's operator descriptions.

GridSample is checked for every mode, padding mode and align_corners setting, with grids
that reach past the image, in 1 to 3 spatial dimensions; onnxruntime is a second
reference where it agrees with ONNX's (not for cubic sampling with border padding, where
it clamps each tap where ONNX clamps the coordinate, and not for 5-D cubic, which it
rejects). NaN and infinite coordinates must not read outside the image: the reference
interpreter and the CUDA emulator, which check every access, run that case.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.tir import interp
from ember.tir.topi.grid_sample import grid_sample
from tests.frontend.ops.shape_models import check, i64, node_model
from tests.nightly import examples, nightly_param

MODES = ("nearest", "linear", "cubic")
PADDINGS = ("zeros", "border", "reflection")
COMBOS = list(itertools.product(MODES, PADDINGS, (0, 1)))
# the 5-D and hostile-grid tests run half the combinations in CI (each mode and padding
# still, with one align_corners each) and every one nightly;
HALF_COMBOS = [c if k % 2 == 0 else nightly_param(*c) for k, c in enumerate(COMBOS)]
# the 4-D test the other half in CI, so each combination runs in one of the two
OTHER_HALF = [nightly_param(*c) if k % 2 == 0 else c for k, c in enumerate(COMBOS)]


# ---- a numpy GridSample -------------------------------------------------------------


def _keys(d: np.ndarray, a: float = -0.75) -> np.ndarray:
    """Keys' cubic convolution kernel at distance ``d``."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _fold(p: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Mirror positions about ``lo`` and ``hi`` until they lie between them."""
    span = hi - lo
    if span == 0:
        return np.full_like(p, lo)
    t = np.mod(p - lo, 2 * span)
    return lo + np.where(t > span, 2 * span - t, t)


def np_grid_sample(x, grid, mode, padding, align):
    """ONNX GridSample written directly: float32 coordinates (float64 for a float64 grid),
    every sample point at once."""
    n, c, *size = x.shape
    r = len(size)
    pts = grid.shape[1:-1]
    acc = np.float64 if x.dtype == np.float64 else np.float32
    cdt = np.float64 if grid.dtype == np.float64 else np.float32
    taps_per_axis = []
    for k, length in enumerate(size):
        g = grid[..., r - 1 - k].astype(cdt)
        if align:
            p = (g + 1) / 2 * cdt(length - 1)
        else:
            p = ((g + 1) * cdt(length) - 1) / 2
        if mode == "nearest":
            p = np.rint(p)
        lo, hi = (0.0, length - 1.0) if align else (-0.5, length - 0.5)
        outside = (p < lo) | (p > hi)
        if padding == "border":
            p = np.where(outside, np.clip(p, 0, length - 1), p)
        elif padding == "reflection":
            p = np.where(outside, _fold(p, lo, hi), p).astype(cdt)
        base = np.floor(p)
        s = (p - base).astype(acc)
        if mode == "nearest":
            offsets, weights = [0], [np.ones_like(s)]
        elif mode == "linear":
            offsets, weights = [0, 1], [1 - s, s]
        else:
            offsets = [-1, 0, 1, 2]
            weights = [_keys(s - o).astype(acc) for o in offsets]
        taps = []
        for o, w in zip(offsets, weights):
            i = base.astype(np.int64) + o
            inside = (i >= 0) & (i < length)
            if padding == "border":
                i = np.clip(i, 0, length - 1)
            elif padding == "reflection":
                i = _fold(i.astype(np.float64), lo, hi).astype(np.int64)
            taps.append((np.clip(i, 0, length - 1), inside if padding == "zeros" else None, w))
        taps_per_axis.append(taps)
    out = np.zeros((n, c, *pts), dtype=acc)
    batch = np.arange(n).reshape((n,) + (1,) * len(pts))
    for combo in itertools.product(*taps_per_axis):
        value = x[(batch, slice(None), *[t[0] for t in combo])]  # (n, *pts, c)
        value = np.moveaxis(value, -1, 1).astype(acc)
        w = np.ones((n, *pts), dtype=acc)
        for _, inside, wk in combo:
            w = w * wk if inside is None else w * np.where(inside, wk, 0)
        out += value * w[:, None]
    return out.astype(x.dtype)


def _gs_model(x, grid, mode, padding, align, opset=20):
    return node_model(
        "GridSample",
        [("x", x), ("grid", grid)],
        opset=opset,
        mode=mode,
        padding_mode=padding,
        align_corners=align,
    )


def _ember_gs(x, grid, mode, padding, align, target="llvm"):
    model = _gs_model(x, grid, mode, padding, align)
    return ember.compile(model, target=target).run({"x": x, "grid": grid})[0]


def _grid(rng, *shape, reach=1.6):
    """Normalised coordinates that go past the image (|v| > 1) on every side."""
    return rng.uniform(-reach, reach, shape).astype(np.float32)


# ---- GridSample ---------------------------------------------------------------------


@pytest.mark.parametrize("mode,padding,align", OTHER_HALF)
def test_grid_sample_4d(rng, mode, padding, align):
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = _grid(rng, 2, 4, 6, 2)
    got = _ember_gs(x, grid, mode, padding, align)
    np.testing.assert_allclose(got, np_grid_sample(x, grid, mode, padding, align), atol=2e-5)
    if not (mode == "cubic" and padding == "border"):
        slots = [("x", x), ("grid", grid)]
        check("GridSample", slots, opset=20, mode=mode, padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("mode,padding,align", HALF_COMBOS)
def test_grid_sample_5d(rng, mode, padding, align):
    x = rng.standard_normal((1, 2, 3, 5, 4)).astype(np.float32)
    grid = _grid(rng, 1, 2, 3, 5, 3)
    got = _ember_gs(x, grid, mode, padding, align)
    np.testing.assert_allclose(got, np_grid_sample(x, grid, mode, padding, align), atol=2e-5)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_opset16_names(rng, mode):
    """Opset 16 names the modes bilinear and bicubic (onnxruntime runs them at opset 16)."""
    x = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)
    grid = _grid(rng, 1, 3, 7, 2)
    slots = [("x", x), ("grid", grid)]
    check("GridSample", slots, opset=16, mode=mode, padding_mode="reflection", align_corners=0)


def test_grid_sample_1d_float64_and_integer_nearest(rng):
    x = rng.standard_normal((2, 3, 7))
    grid = rng.uniform(-1.3, 1.3, (2, 9, 1))
    for mode, padding in [("linear", "reflection"), ("cubic", "zeros")]:
        got = _ember_gs(x, grid, mode, padding, 0)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, np_grid_sample(x, grid, mode, padding, 0), atol=1e-9)
    xi = rng.integers(-50, 50, (1, 2, 4, 5)).astype(np.int32)
    gi = _grid(rng, 1, 3, 3, 2)
    got = _ember_gs(xi, gi, "nearest", "border", 1)
    np.testing.assert_array_equal(got, np_grid_sample(xi, gi, "nearest", "border", 1))


def test_grid_sample_identity_grid_from_affine_grid(rng):
    """AffineGrid of the identity, sampled linearly: the image itself (any align_corners)."""
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    theta = np.tile(np.eye(2, 3, dtype=np.float32), (2, 1, 1))
    for align in (0, 1):
        grid = _affine(theta, (2, 3, 5, 7), align)
        np.testing.assert_allclose(_ember_gs(x, grid, "linear", "zeros", align), x, atol=1e-5)


def _nasty_grid(rng):
    grid = _grid(rng, 1, 5, 6, 2)
    grid[0, 0, 0] = [np.nan, 0.2]
    grid[0, 0, 1] = [0.3, np.nan]
    grid[0, 1, 0] = [np.inf, 0.1]
    grid[0, 1, 1] = [-np.inf, -np.inf]
    grid[0, 2, 0] = [1e30, -1e30]
    grid[0, 2, 1] = [-3e9, 0.5]
    grid[0, 3, :2] = [[1e7, 1e7], [-9.5, 40.25]]
    return grid


def _check_nasty(x, grid, got, mode, padding, align):
    assert got.shape == (1, 2, 5, 6)
    finite = np.isfinite(grid).all(axis=-1)
    assert np.isfinite(got[:, :, finite[0]]).all()
    # Mirrored back from beyond 1e4 image widths, a float32 position keeps none of its digits.
    exact = finite & (np.abs(grid).max(axis=-1) < 1e4 if padding == "reflection" else True)
    want = np_grid_sample(x, np.where(np.isfinite(grid), grid, 0), mode, padding, align)
    np.testing.assert_allclose(got[:, :, exact[0]], want[:, :, exact[0]], atol=2e-5)
    if padding == "zeros":
        nan = np.isnan(grid).any(axis=-1)
        np.testing.assert_array_equal(got[:, :, nan[0]], 0)  # off the image, as in PyTorch


@pytest.mark.parametrize("mode,padding,align", HALF_COMBOS)
def test_grid_sample_nan_and_far_coordinates(rng, mode, padding, align):
    """NaN, infinite and huge coordinates: no crash, finite points still right."""
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    grid = _nasty_grid(rng)
    _check_nasty(x, grid, _ember_gs(x, grid, mode, padding, align), mode, padding, align)


@pytest.mark.parametrize("mode,padding,align", COMBOS)
def test_grid_sample_reads_stay_in_bounds(rng, mode, padding, align):
    """The reference interpreter checks every load, both sides of each select included (the
    CPU may evaluate both): bad coordinates read nothing outside the image."""
    X = te.placeholder((1, 2, 4, 5), name="X", dtype="float32")
    G = te.placeholder((1, 5, 6, 2), name="G", dtype="float32")
    Y = grid_sample(X, G, mode, padding, bool(align))
    func = ember.lower(te.create_schedule(Y.op), [X, G, Y])
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    grid = _nasty_grid(rng)
    got = np.zeros((1, 2, 5, 6), np.float32)
    interp.run(func, x, grid, got)
    _check_nasty(x, grid, got, mode, padding, align)


@pytest.mark.nvrtc
@pytest.mark.parametrize("mode,padding", [("cubic", "zeros"), ("linear", "reflection")])
def test_grid_sample_nan_coordinates_stay_in_bounds_on_cuda(rng, monkeypatch, mode, padding):
    """The emulator checks every load against its buffer: bad coordinates read nothing
    outside the image."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    grid = _nasty_grid(rng)
    got = _ember_gs(x, grid, mode, padding, 0, target="cuda")
    _check_nasty(x, grid, got, mode, padding, 0)


@settings(max_examples=examples(20), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    spatial=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    out=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    mode=st.sampled_from(MODES),
    padding=st.sampled_from(PADDINGS),
    align=st.sampled_from([0, 1]),
    reach=st.sampled_from([0.9, 1.5, 4.0]),
)
def test_grid_sample_property(seed, spatial, out, mode, padding, align, reach):
    """Random image sizes (1 included), grids and settings: numpy and Ember agree."""
    rng = np.random.default_rng(seed)
    r = len(spatial)
    out = (out * 3)[:r]
    x = rng.standard_normal((2, 2, *spatial)).astype(np.float32)
    grid = _grid(rng, 2, *out, r, reach=reach)
    got = _ember_gs(x, grid, mode, padding, align)
    np.testing.assert_allclose(got, np_grid_sample(x, grid, mode, padding, align), atol=5e-5)


def test_grid_sample_unsupported_forms(rng):
    x5 = rng.standard_normal((1, 1, 2, 3, 4)).astype(np.float32)
    g5 = _grid(rng, 1, 2, 2, 2, 3)
    model = _gs_model(x5, g5, "bilinear", "zeros", 0, opset=16)
    with pytest.raises(ember.ArgumentError, match="not supported before opset 20"):
        ember.compile(model)
    xi = rng.integers(0, 9, (1, 1, 3, 3)).astype(np.int32)
    model = _gs_model(xi, _grid(rng, 1, 2, 2, 2), "linear", "zeros", 0)
    with pytest.raises(ember.ArgumentError, match="not supported"):
        ember.compile(model)


# ---- AffineGrid ---------------------------------------------------------------------


def _affine(theta, size, align):
    """numpy AffineGrid: theta applied to each pixel's normalised (x, y[, z], 1)."""
    spatial = size[2:]
    axes = []
    for n in spatial:
        i = np.arange(n, dtype=np.float64)
        if align:
            axes.append(np.linspace(-1, 1, n) if n > 1 else np.array([-1.0]))
        else:
            axes.append((2 * i + 1) / n - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    points = np.stack([*reversed(mesh), np.ones(spatial)], axis=-1)  # (*spatial, r + 1)
    grid = np.einsum("nij,...j->n...i", theta.astype(np.float64), points)
    return grid.astype(theta.dtype)


@pytest.mark.parametrize("size", [(2, 3, 5, 7), (3, 1, 1, 4), (2, 2, 3, 5, 4)])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(rng, size, align):
    r = len(size) - 2
    theta = rng.standard_normal((size[0], r, r + 1)).astype(np.float32)
    slots = [("theta", theta), ("=size", i64(*size))]
    model = node_model("AffineGrid", slots, opset=20, align_corners=align)
    got = ember.compile(model).run({"theta": theta})[0]
    np.testing.assert_allclose(got, _affine(theta, size, align), rtol=1e-5, atol=1e-5)
    if not (align and 1 in size[2:]):  # one pixel: ONNX's reference puts it at -1, ORT at 0
        check("AffineGrid", slots, opset=20, align_corners=align)


def test_affine_grid_size_fed_at_run_time(rng):
    """The size may be a graph input: Ember compiles once per value."""
    theta = rng.standard_normal((2, 2, 3)).astype(np.float32)
    model = node_model("AffineGrid", [("theta", theta), ("size", i64(2, 3, 5, 7))], opset=20)
    lib = ember.compile(model)
    for size in [(2, 3, 5, 7), (2, 1, 3, 9)]:
        got = lib.run({"theta": theta, "size": i64(*size)})[0]
        np.testing.assert_allclose(got, _affine(theta, size, 0), rtol=1e-5, atol=1e-5)


# ---- Col2Im -------------------------------------------------------------------------


def np_col2im(cols, image, block, strides, pads, dilations):
    """Each column's block added back at its place in the (padded) image, then cropped."""
    n, ck, _ = cols.shape
    r = len(image)
    taps = int(np.prod(block))
    padded = [image[d] + pads[d] + pads[r + d] for d in range(r)]
    blocks = [(padded[d] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(r)]
    out = np.zeros((n, ck // taps, *padded), dtype=np.float64)
    cols = cols.reshape(n, ck // taps, *block, *blocks)
    for at in itertools.product(*[range(b) for b in blocks]):
        for tap in itertools.product(*[range(k) for k in block]):
            pos = tuple(at[d] * strides[d] + tap[d] * dilations[d] for d in range(r))
            out[(slice(None), slice(None), *pos)] += cols[(slice(None), slice(None), *tap, *at)]
    crop = tuple(slice(pads[d], pads[d] + image[d]) for d in range(r))
    return out[(slice(None), slice(None), *crop)].astype(cols.dtype)


COL2IM_CASES = [
    # image, block, strides, pads, dilations
    ((5, 7), (2, 3), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((7, 9), (3, 2), (2, 3), (1, 0, 2, 1), (1, 1)),
    ((9, 8), (3, 3), (2, 1), (1, 2, 0, 1), (2, 3)),
    ((11,), (3,), (3,), (2, 1), (2,)),
    ((3, 5, 4), (2, 3, 1), (1, 2, 1), (0, 1, 0, 1, 0, 0), (1, 1, 1)),
]


@pytest.mark.parametrize("image,block,strides,pads,dilations", COL2IM_CASES)
def test_col2im(rng, image, block, strides, pads, dilations):
    r = len(image)
    blocks = [
        (image[d] + pads[d] + pads[r + d] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
        for d in range(r)
    ]
    cols = rng.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(blocks))))
    cols = cols.astype(np.float32)
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dilations)}
    slots = [("cols", cols), ("=image", i64(*image)), ("=block", i64(*block))]
    model = node_model("Col2Im", slots, opset=18, **attrs)
    got = ember.compile(model).run({"cols": cols})[0]
    want = np_col2im(cols, image, block, strides, pads, dilations)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if r > 1:  # onnxruntime's Col2Im takes 2-D and 3-D images
        check("Col2Im", slots, opset=18, **attrs)


def test_col2im_rejects_a_wrong_block_count(rng):
    cols = rng.standard_normal((1, 6, 7)).astype(np.float32)
    slots = [("cols", cols), ("=image", i64(5, 7)), ("=block", i64(2, 3))]
    with pytest.raises(ember.ArgumentError, match="block positions"):
        ember.compile(node_model("Col2Im", slots, opset=18))


# ---- CenterCropPad ------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,target,axes",
    [
        ((5, 6, 7), (3, 9, 7), None),  # odd crop, odd pad, unchanged
        ((5, 6, 7), (8, 2), (0, -1)),
        ((9, 4, 3), (4, 11), (-3, 1)),
        ((2, 3, 5), (2, 3, 5), None),
    ],
)
def test_center_crop_pad(rng, shape, target, axes):
    x = rng.standard_normal(shape).astype(np.float32)
    attrs = {} if axes is None else {"axes": list(axes)}
    check("CenterCropPad", [("x", x), ("=shape", i64(*target))], opset=18, **attrs)


def test_center_crop_pad_integers(rng):
    x = rng.integers(1, 100, (4, 7)).astype(np.int64)
    got = check("CenterCropPad", [("x", x), ("=shape", i64(7, 4))], opset=18)[0]
    np.testing.assert_array_equal(got[1:5], x[:, 1:5])
    assert (got[[0, 5, 6]] == 0).all()
