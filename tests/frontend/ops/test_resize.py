"""Resize (opsets 10 to 19) and Upsample vs onnxruntime, and the tap tables vs a direct
per-element reading of the ONNX formulas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.tir.topi.resize import COORD_MODES, NEAREST_MODES, resize_taps
from tests.frontend.ops.shape_models import check, i64, node_model
from tests.nightly import examples, sample_in_ci


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def _scales(*values):
    return np.array(values, dtype=np.float32)


EMPTY = np.zeros(0, np.float32)
SPATIAL = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]


@pytest.mark.parametrize("coord", SPATIAL)
@pytest.mark.parametrize("nearest", NEAREST_MODES)
# Scales exact in float32 with whole resized lengths: where they are not, onnxruntime
# departs from ONNX's reference (which Ember follows, and the node tests check): it computes
# coordinates in float32 (1.5 / 0.6f - 0.5 is 2.0 there, 1.9999999 in float64, so floor
# picks another row) and align_corners divides by the integer length, not scale * length.
@pytest.mark.parametrize("scales", [(1, 1, 2.0, 3.0), (1, 1, 0.75, 1.5)])
def test_resize_nearest(rng, coord, nearest, scales):
    x = _f32(rng, 1, 2, 4, 6)
    slots = [("x", x), ("=roi", EMPTY), ("=sc", _scales(*scales))]
    check(
        "Resize",
        slots,
        opset=13,
        mode="nearest",
        coordinate_transformation_mode=coord,
        nearest_mode=nearest,
    )


@pytest.mark.parametrize("coord", SPATIAL)
@pytest.mark.parametrize("scales", [(1, 1, 2.0, 3.0), (1, 1, 0.5, 0.75), (1, 1, 1.5, 1.0)])
def test_resize_linear(rng, coord, scales):
    x = _f32(rng, 2, 3, 6, 4)
    slots = [("x", x), ("=roi", EMPTY), ("=sc", _scales(*scales))]
    check("Resize", slots, opset=13, mode="linear", coordinate_transformation_mode=coord, atol=1e-5)


@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("exclude", [0, 1])
def test_resize_cubic(rng, coord, exclude):
    x = _f32(rng, 1, 2, 5, 7)
    slots = [("x", x), ("=roi", EMPTY), ("=sc", _scales(1, 1, 1.6, 2.0))]
    attrs = {"coordinate_transformation_mode": coord, "exclude_outside": exclude}
    check("Resize", slots, opset=13, mode="cubic", cubic_coeff_a=-0.5, atol=1e-4, **attrs)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_sizes(rng, mode):
    x = _f32(rng, 2, 3, 7, 5)
    check(
        "Resize", [("x", x), None, None, ("=sz", i64(2, 3, 4, 9))], opset=13, mode=mode, atol=1e-4
    )


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_axes_and_aspect_policy_opset_18(rng, policy):
    x = _f32(rng, 1, 2, 6, 4)
    slots = [("x", x), None, None, ("=sz", i64(9, 9))]
    check("Resize", slots, opset=18, axes=[2, 3], keep_aspect_ratio_policy=policy, mode="linear")
    slots = [("x", x), None, ("=sc", _scales(2.0, 1.5))]
    check("Resize", slots, opset=18, axes=[3, -2], mode="nearest")


def test_resize_tf_crop_and_resize(rng):
    x = _f32(rng, 1, 1, 6, 5)
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], np.float32)
    slots = [("x", x), ("=roi", roi), None, ("=sz", i64(1, 1, 4, 6))]
    attrs = {"coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 2.5}
    check("Resize", slots, opset=13, mode="linear", **attrs)
    check("Resize", slots, opset=13, mode="nearest", **attrs)


def test_resize_half_pixel_symmetric_opset_19(rng):
    x = _f32(rng, 1, 2, 5, 6)
    slots = [("x", x), None, ("=sc", _scales(1, 1, 1.7, 0.8))]
    attrs = {"coordinate_transformation_mode": "half_pixel_symmetric"}
    check("Resize", slots, opset=19, mode="linear", **attrs)


def test_resize_opset_10_and_upsample(rng):
    x = _f32(rng, 1, 2, 3, 4)
    check("Resize", [("x", x), ("=sc", _scales(1, 1, 2, 3))], opset=10, mode="nearest")
    check("Resize", [("x", x), ("=sc", _scales(1, 1, 2, 1.5))], opset=10, mode="linear")
    check("Upsample", [("x", x), ("=sc", _scales(1, 1, 2, 3))], opset=9, mode="nearest")
    check("Upsample", [("x", x), ("=sc", _scales(1, 1, 3, 2))], opset=9, mode="linear")
    check("Upsample", [("x", x)], opset=7, mode="nearest", scales=[1.0, 1.0, 2.0, 2.0])


# Antialiasing: onnxruntime agrees with ONNX's reference except under align_corners
# (where it divides by the integer length, as above), which the reference checks.
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric"])
# a shrink on both axes; a heavy one (2-D cubic: 14 x 6 taps, split into one node per
# axis); a shrink and a stretch (the stretching axis keeps its plain filter)
@pytest.mark.parametrize("scales", [(1, 1, 0.6, 0.45), (1, 1, 0.3, 0.7), (1, 1, 1.5, 0.5)])
def test_resize_antialias_matches_onnxruntime(rng, mode, coord, scales):
    slots = [("x", _f32(rng, 1, 2, 9, 13)), None, ("=sc", _scales(*scales))]
    check(
        "Resize", slots, opset=18, mode=mode, antialias=1, coordinate_transformation_mode=coord,
        atol=1e-5,
    )  # fmt: skip


def _against_reference(x, slots, **attrs):
    from onnx.reference import ReferenceEvaluator

    model = node_model("Resize", [("x", x), *slots], opset=18, antialias=1, **attrs)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = ember.compile(model, target="llvm").run({"x": x})[0]
    return got, want


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("exclude", [0, 1])
def test_resize_antialias_sizes_and_align_corners_match_the_reference(rng, mode, exclude):
    x = _f32(rng, 2, 3, 11, 7)
    slots = [None, None, ("=sizes", i64(2, 3, 4, 3))]
    got, want = _against_reference(
        x, slots, mode=mode, coordinate_transformation_mode="align_corners",
        exclude_outside=exclude,
    )  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_resize_antialias_of_integers_matches_the_reference(rng):
    """uint8 images (one node whatever its tap count: no rounding between the axes)."""
    x = rng.integers(0, 256, (1, 3, 13, 10)).astype(np.uint8)
    slots = [None, ("=sc", _scales(1, 1, 0.3, 0.4))]
    got, want = _against_reference(x, slots, mode="cubic")
    assert got.dtype == want.dtype and np.abs(got.astype(int) - want.astype(int)).max() <= 1


@settings(max_examples=examples(30), deadline=None)
@given(st.integers(1, 20), st.floats(0.1, 1.5), st.sampled_from(["linear", "cubic"]))
def test_antialias_taps_property(n_in, scale, mode):
    """Weights sum to 1, indices stay in range, and each tap weighs what the stretched
    filter gives at its distance from the source coordinate."""
    n_out = max(int(np.floor(n_in * scale)), 1)
    taps = resize_taps(n_in, n_out, scale, mode, "asymmetric", antialias=True)
    assert taps.weight is not None
    np.testing.assert_allclose(taps.weight.sum(axis=1), 1.0, atol=1e-9)
    assert taps.index.min() >= 0 and taps.index.max() < n_in
    support = (1.0 if mode == "linear" else 2.0) / min(scale, 1.0)
    assert taps.index.shape[1] <= 2 * np.ceil(support) + 2


def test_resize_runtime_scales_compile_per_value(rng):
    check("Resize", [("x", _f32(rng, 1, 1, 4, 5)), None, ("sc", _scales(1, 1, 2, 1.5))], opset=13)


def _direct_nearest(n_in, n_out, scale, coord, nearest):
    """Each output position's source by the ONNX formulas, one position at a time."""
    out = []
    length = scale * n_in
    for x in range(n_out):
        if coord == "asymmetric":
            c = x / scale
        elif coord == "align_corners":
            c = 0.0 if length == 1 else x * (n_in - 1) / (length - 1)
        elif coord == "pytorch_half_pixel":
            c = -0.5 if length == 1 else (x + 0.5) / scale - 0.5
        else:
            c = (x + 0.5) / scale - 0.5
        frac = c - np.floor(c)
        if nearest == "floor":
            r = np.floor(c)
        elif nearest == "ceil":
            r = np.ceil(c)
        elif frac == 0.5:
            r = np.floor(c) if nearest == "round_prefer_floor" else np.ceil(c)
        else:
            r = np.round(c)
        out.append(int(min(max(r, 0), n_in - 1)))
    return out


@settings(max_examples=examples(40), deadline=None)
@given(
    st.integers(1, 12),
    st.floats(0.3, 4.0),
    st.sampled_from(SPATIAL),
    st.sampled_from(NEAREST_MODES),
)
def test_nearest_taps_property(n_in, scale, coord, nearest):
    n_out = max(int(np.floor(n_in * scale)), 1)
    taps = resize_taps(n_in, n_out, scale, "nearest", coord, nearest)
    assert taps.index[:, 0].tolist() == _direct_nearest(n_in, n_out, scale, coord, nearest)


@settings(max_examples=examples(30), deadline=None)
@given(st.integers(2, 10), st.floats(0.3, 4.0), st.sampled_from(["linear", "cubic"]))
def test_interpolating_taps_sum_to_one_and_stay_in_range(n_in, scale, mode):
    n_out = max(int(np.floor(n_in * scale)), 1)
    taps = resize_taps(n_in, n_out, scale, mode, "half_pixel")
    assert taps.weight is not None
    np.testing.assert_allclose(taps.weight.sum(axis=1), 1.0, atol=1e-9)
    assert taps.index.min() >= 0 and taps.index.max() < n_in


def test_coordinate_modes_are_all_known():
    for coord in COORD_MODES:
        resize_taps(4, 6, 1.5, "linear", coord, roi=(0.1, 0.9))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32"])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_integer_data_rounds_like_the_onnx_reference(rng, dtype, mode):
    """Integer outputs are rounded half to even and saturated, as ONNX's reference does
    (onnxruntime truncates, and has no cubic for integers), so the reference checks them."""
    sample_in_ci(dtype, mode)
    from onnx.reference import ReferenceEvaluator

    x = (rng.standard_normal((1, 2, 5, 4)) * 60 + 20).clip(-128, 255).astype(dtype)
    slots = [("x", x), None, ("=sc", _scales(1, 1, 1.6, 2.5))]
    model = node_model("Resize", slots, opset=13, mode=mode)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = ember.compile(model, target="llvm").run({"x": x})[0]
    assert got.dtype == want.dtype
    # Where the exact value is a half, float noise (ours, or the reference's) picks the side.
    xf = x.astype(np.float64)
    fmodel = node_model("Resize", [("x", xf), *slots[1:]], opset=13, mode=mode)
    exact = ReferenceEvaluator(fmodel).run(None, {"x": xf})[0]
    tie = np.abs(exact - np.floor(exact) - 0.5) < 1e-9
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert np.all(diff[~tie] == 0) and np.all(diff[tie] <= 1)
    assert (~tie).sum() > 0.9 * tie.size


def test_resize_roi_at_run_time_is_ignored_unless_cropping(rng):
    x = _f32(rng, 1, 1, 3, 4)
    roi = np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32)
    check("Resize", [("x", x), ("roi", roi), ("=sc", _scales(1, 1, 2, 2))], opset=13)
