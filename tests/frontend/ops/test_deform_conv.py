"""DeformConv against onnxruntime, ONNX's reference and a numpy one written here.

ONNX's reference and onnxruntime take 2-D images only; a numpy DeformConv written from
the operator's description (every tap at its moved position, read bilinearly, zero
outside the image, times its mask, then a grouped convolution sum) checks 1-D and 3-D
too, and a property test draws shapes, groups, offset groups, strides, pads and
dilations. Offsets reach well past the image so that taps fall off it, and some are
whole numbers (a tap exactly on a pixel). The CUDA emulator, which checks every load
against its buffer, runs NaN and huge offsets.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from tests.frontend.ops.shape_models import check, node_model
from tests.nightly import examples

onnx = pytest.importorskip("onnx")


def np_deform_conv(x, w, offset, bias, mask, strides, pads, dilations, group, offset_group):
    """ONNX DeformConv in float64 numpy, any number of spatial axes."""
    n, c, *size = x.shape
    r = len(size)
    oc, cg, *kernel = w.shape
    out = offset.shape[2:]
    taps = int(np.prod(kernel))
    off = offset.astype(np.float64).reshape(n, offset_group, *kernel, r, *out)
    msk = np.ones((n, offset_group * taps, *out)) if mask is None else mask.astype(np.float64)
    msk = msk.reshape(n, offset_group, *kernel, *out)
    cols = np.zeros((n, c, *kernel, *out))
    grid = np.indices((*kernel, *out))  # (2r, *kernel, *out)
    for b, ch in itertools.product(range(n), range(c)):
        g = ch // (c // offset_group)
        moved = np.moveaxis(off[b, g], r, 0)  # (r, *kernel, *out)
        pos = [
            grid[r + d] * strides[d] - pads[d] + grid[d] * dilations[d] + moved[d] for d in range(r)
        ]
        total = np.zeros((*kernel, *out))
        for corner in itertools.product((0, 1), repeat=r):
            weight = np.ones((*kernel, *out))
            inside = np.ones((*kernel, *out), bool)
            index = []
            for d in range(r):
                i = np.floor(pos[d]) + corner[d]
                weight = weight * (1 - np.abs(pos[d] - i))
                inside &= (i >= 0) & (i < size[d])
                index.append(np.clip(i, 0, size[d] - 1).astype(np.int64))
            total += np.where(inside, weight * x[b, ch][tuple(index)], 0.0)
        cols[b, ch] = total * msk[b, g]
    cols = cols.reshape(n, group, cg * taps, -1)
    wg = w.astype(np.float64).reshape(group, oc // group, cg * taps)
    y = np.einsum("gok,ngkp->ngop", wg, cols).reshape(n, oc, *out)
    if bias is not None:
        y = y + bias.reshape(oc, *(1,) * r)
    return y


def _out(size, kernel, strides, pads, dilations):
    r = len(size)
    return [
        (size[d] + pads[d] + pads[r + d] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1
        for d in range(r)
    ]


def _case(rng, n, c, oc, size, kernel, group, offset_group, strides, pads, dilations, reach=2.0):
    r = len(size)
    out = _out(size, kernel, strides, pads, dilations)
    taps = int(np.prod(kernel))
    x = rng.standard_normal((n, c, *size)).astype(np.float32)
    w = rng.standard_normal((oc, c // group, *kernel)).astype(np.float32)
    offset = (rng.uniform(-reach, reach, (n, offset_group * taps * r, *out))).astype(np.float32)
    offset.flat[::7] = np.round(offset.flat[::7])  # some taps land exactly on pixels
    bias = rng.standard_normal(oc).astype(np.float32)
    mask = rng.uniform(0.1, 1.0, (n, offset_group * taps, *out)).astype(np.float32)
    return x, w, offset, bias, mask


def _attrs(kernel, strides, pads, dilations, group, offset_group):
    return dict(
        kernel_shape=list(kernel), strides=list(strides), pads=list(pads),
        dilations=list(dilations), group=group, offset_group=offset_group,
    )  # fmt: skip


def _run(x, w, offset, bias, mask, target="llvm", **attrs):
    slots = [("x", x), ("w", w), ("offset", offset)]
    slots += [None if bias is None else ("b", bias), None if mask is None else ("mask", mask)]
    model = node_model("DeformConv", slots, opset=19, **attrs)
    feeds = {s[0]: s[1] for s in slots if s is not None}
    return ember.compile(model, target=target).run(feeds)[0]


CASES_2D = [
    # n, c, oc, size, kernel, group, offset_group, strides, pads, dilations
    (1, 3, 5, (7, 6), (3, 2), 1, 1, (1, 1), (1, 0, 1, 2), (1, 1)),
    (2, 4, 6, (6, 9), (2, 3), 2, 2, (2, 1), (0, 1, 1, 0), (1, 2)),
    (1, 6, 3, (5, 5), (3, 3), 3, 6, (1, 2), (2, 2, 2, 2), (2, 1)),
]


@pytest.mark.parametrize("case", CASES_2D)
@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv_2d_matches_onnxruntime(rng, case, with_mask):
    n, c, oc, size, kernel, group, og, strides, pads, dil = case
    x, w, offset, bias, mask = _case(rng, n, c, oc, size, kernel, group, og, strides, pads, dil)
    slots = [("x", x), ("w", w), ("offset", offset), ("b", bias)]
    if with_mask:
        slots.append(("mask", mask))
    attrs = _attrs(kernel, strides, pads, dil, group, og)
    got = check("DeformConv", slots, opset=19, rtol=1e-4, atol=1e-4, **attrs)[0]
    want = np_deform_conv(x, w, offset, bias, mask if with_mask else None, strides, pads, dil,
                          group, og)  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_deform_conv_2d_matches_the_onnx_reference(rng):
    from onnx.reference import ReferenceEvaluator

    x, w, offset, bias, mask = _case(
        rng, 2, 4, 4, (5, 7), (2, 2), 2, 2, (1, 2), (1, 1, 0, 1), (2, 1)
    )
    attrs = _attrs((2, 2), (1, 2), (1, 1, 0, 1), (2, 1), 2, 2)
    model = node_model(
        "DeformConv",
        [("x", x), ("w", w), ("offset", offset), ("b", bias), ("mask", mask)],
        opset=19,
        **attrs,
    )
    feeds = {"x": x, "w": w, "offset": offset, "b": bias, "mask": mask}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = ember.compile(model, target="llvm").run(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "size, kernel, strides, pads, dilations",
    [
        ((9,), (3,), (2,), (1, 2), (1,)),
        ((4, 5, 3), (2, 3, 2), (1, 2, 1), (0, 1, 1, 1, 0, 0), (1, 1, 2)),
    ],
)
def test_deform_conv_1d_and_3d_match_numpy(rng, size, kernel, strides, pads, dilations):
    x, w, offset, bias, mask = _case(rng, 2, 4, 3, size, kernel, 1, 2, strides, pads, dilations)
    attrs = _attrs(kernel, strides, pads, dilations, 1, 2)
    got = _run(x, w, offset, bias, mask, **attrs)
    want = np_deform_conv(x, w, offset, bias, mask, strides, pads, dilations, 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=examples(12), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    size=st.lists(st.integers(1, 6), min_size=1, max_size=2),
    kernel=st.lists(st.integers(1, 3), min_size=2, max_size=2),
    groups=st.sampled_from([(1, 1), (1, 3), (3, 1), (3, 3)]),
    stride=st.integers(1, 2),
    pad=st.integers(0, 2),
    dilation=st.integers(1, 2),
    reach=st.sampled_from([0.5, 3.0]),
    with_mask=st.booleans(),
)
def test_deform_conv_property(
    seed, size, kernel, groups, stride, pad, dilation, reach, with_mask
):  # fmt: skip
    """Random sizes (1 included), groups and offset groups of 3 channels, window settings."""
    rng = np.random.default_rng(seed)
    r = len(size)
    kernel = kernel[:r]
    strides, pads, dil = (stride,) * r, (pad,) * (2 * r), (dilation,) * r
    if min(_out(size, kernel, strides, pads, dil)) < 1:
        return
    group, og = groups
    x, w, offset, bias, mask = _case(rng, 1, 3, 6, size, kernel, group, og, strides, pads, dil,
                                     reach)  # fmt: skip
    mask = mask if with_mask else None
    got = _run(x, w, offset, bias, mask, **_attrs(kernel, strides, pads, dil, group, og))
    want = np_deform_conv(x, w, offset, bias, mask, strides, pads, dil, group, og)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _hostile_offsets(rng, x, w, size, kernel):
    out = _out(size, kernel, (1, 1), (0, 0, 0, 0), (1, 1))
    offset = rng.uniform(-1.5, 1.5, (1, 2 * int(np.prod(kernel)), *out)).astype(np.float32)
    offset.flat[::3] = np.nan
    offset.flat[1::5] = 1e30
    offset.flat[2::5] = -np.inf
    return offset


def _check_hostile(got, x, w, offset):
    """A NaN or far-off position reads 0: the output is the others' sum, never NaN."""
    clean = np.where(np.isfinite(offset) & (np.abs(offset) < 100), offset, -1e4)
    want = np_deform_conv(x, w, clean, None, None, (1, 1), (0, 0, 0, 0), (1, 1), 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_deform_conv_nan_offsets_read_zero(rng):
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 2, 2)).astype(np.float32)
    offset = _hostile_offsets(rng, x, w, (4, 5), (2, 2))
    got = _run(x, w, offset, None, None, **_attrs((2, 2), (1, 1), (0,) * 4, (1, 1), 1, 1))
    _check_hostile(got, x, w, offset)


@pytest.mark.nvrtc
def test_deform_conv_on_cuda_stays_in_bounds(rng, monkeypatch):
    """The emulator checks every load against its buffer: hostile offsets read nothing
    outside the image, and the generic CUDA schedule computes the same numbers."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 2, 2)).astype(np.float32)
    offset = _hostile_offsets(rng, x, w, (4, 5), (2, 2))
    attrs = _attrs((2, 2), (1, 1), (0,) * 4, (1, 1), 1, 1)
    got = _run(x, w, offset, None, None, target="cuda", **attrs)
    _check_hostile(got, x, w, offset)


def test_deform_conv_refuses_mismatched_groups(rng):
    x, w, offset, bias, mask = _case(rng, 1, 4, 4, (5, 5), (2, 2), 2, 1, (1, 1), (0,) * 4, (1, 1))
    model = node_model("DeformConv", [("x", x), ("w", w), ("offset", offset)], opset=19, group=4)
    with pytest.raises(ember.ArgumentError, match="do not make 4 groups"):
        ember.compile(model, target="llvm")
