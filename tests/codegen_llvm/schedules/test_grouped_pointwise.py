"""Grouped 1x1 convolutions on their register-tiled schedule (``schedules/grouped_pointwise.py``),
through the CPU strategy as a compiled model takes them, against numpy (one matrix product
per group) on odd shapes: spatial sizes no tile divides, groups whose width picks each tile
height, a batch, with and without bias and an epilogue; and whole graphs against
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te as ete
from ember.codegen_llvm.schedules import grouped_pointwise as gp
from ember.codegen_llvm.schedules.anchors import grouped_1x1
from ember.codegen_llvm.schedules.generic import schedule_group
from ember.codegen_llvm.strategy import CPU_STRATEGY
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from tests.frontend.onnx_models import check_against_ort, helper, make_model
from tests.nightly import examples

ATTRS = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1)}


def _reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, groups: int) -> np.ndarray:
    N, C, H, W = x.shape
    O, cg = w.shape[:2]
    og = O // groups
    x64, w64 = x.astype(np.float64).reshape(N, groups, cg, H * W), w.astype(np.float64)
    per_group = [
        np.einsum("oc,ncp->nop", w64[g * og : (g + 1) * og, :, 0, 0], x64[:, g])
        for g in range(groups)
    ]
    out = np.stack(per_group, axis=1).reshape(N, O, H, W)
    return out if b is None else out + b.reshape(1, O, 1, 1)


def _run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, groups: int, relu: bool) -> np.ndarray:
    """Compile the conv (and a ReLU) as the graph's kernel would be: strategy compute + group
    schedule, checking the template's compute and schedule are the ones taken."""
    arrays = [x, w] + ([b] if b is not None else [])
    ins = [te.placeholder(a.shape, "float32", name=f"in{k}") for k, a in enumerate(arrays)]
    outs, impl = CPU_STRATEGY.compute("conv", ins, {**ATTRS, "group": groups}, None)
    conv = outs[0]
    tagged = [t for t in conv.op.input_tensors if getattr(t.op, "tag", "") == gp.TAG]
    assert tagged, "the grouped 1x1 compute, not the op's generic one"
    if relu:
        zero = ete.const(0.0, "float32")
        conv = te.compute(conv.shape, lambda *i: ete.max(conv(*i), zero), name="relu")
    assert grouped_1x1(create_schedule([conv.op]), [conv])  # and its schedule
    s = schedule_group([conv], [impl])
    y = np.full(tuple(int(d) for d in conv.shape), np.nan, "float32")
    ember.build(s, [*ins, conv], target="llvm")(*arrays, y)
    return y


CASES = [  # (N, C, H, W, O, groups): group widths 34 (tile 2), 5 (1), 6 (3), 8 (4)
    (1, 136, 7, 9, 136, 4),
    (2, 15, 5, 3, 10, 5),
    (1, 12, 11, 13, 18, 3),
    (1, 16, 8, 8, 32, 4),
]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias"])
def test_grouped_1x1_matches_numpy(case, bias, rng):  # noqa: ANN001
    N, C, H, W, O, groups = case
    x = rng.standard_normal((N, C, H, W)).astype("float32")
    w = rng.standard_normal((O, C // groups, 1, 1)).astype("float32")
    b = rng.standard_normal(O).astype("float32") if bias else None
    y = _run(x, w, b, groups, relu=bias)
    ref = _reference(x, w, b, groups)
    np.testing.assert_allclose(y, np.maximum(ref, 0) if bias else ref, rtol=1e-4, atol=1e-4)


def test_tile_height_divides_the_group():
    assert [gp.tile_rows(og) for og in (34, 5, 6, 8, 68)] == [2, 1, 3, 4, 4]


@pytest.mark.parametrize(
    "w_shape,attrs",
    [
        ((8, 4, 3, 3), {**ATTRS, "group": 2}),  # 3x3
        ((8, 4, 1, 1), {**ATTRS, "group": 2, "strides": (2, 2)}),
        ((8, 4, 1, 1), {**ATTRS, "group": 2, "pads": (1, 1, 1, 1)}),
        ((8, 8, 1, 1), {**ATTRS, "group": 1}),
        ((8, 1, 1, 1), {**ATTRS, "group": 8}),  # depthwise
        ((16, 1, 1, 1), {**ATTRS, "group": 8}),  # depthwise, multiplier 2
    ],
)
def test_other_convolutions_keep_their_templates(w_shape, attrs):
    assert not gp.applies((1, 8, 6, 6), w_shape, attrs)


@settings(max_examples=examples(12), deadline=None)
@given(
    groups=st.integers(2, 4),
    cg=st.integers(1, 9),
    og=st.integers(1, 9),
    h=st.integers(1, 9),
    w=st.integers(1, 11),
    n=st.integers(1, 2),
)
def test_random_grouped_1x1_match_numpy(groups, cg, og, h, w, n):  # noqa: ANN001
    if cg == 1:
        return  # depthwise, any multiplier: its own template
    rng = np.random.default_rng(groups * 1000 + cg * 100 + og * 10 + h)
    x = rng.standard_normal((n, groups * cg, h, w)).astype("float32")
    wt = rng.standard_normal((groups * og, cg, 1, 1)).astype("float32")
    y = _run(x, wt, None, groups, relu=False)
    np.testing.assert_allclose(y, _reference(x, wt, None, groups), rtol=1e-4, atol=1e-4)


def test_shufflenet_unit_matches_onnxruntime(rng):  # noqa: ANN001
    """Grouped conv + ReLU, channel shuffle, grouped conv + residual add + ReLU."""
    C, G, H, W = 24, 4, 9, 7
    x = rng.standard_normal((1, C, H, W)).astype("float32")
    w1 = rng.standard_normal((C, C // G, 1, 1)).astype("float32")
    w2 = rng.standard_normal((C, C // G, 1, 1)).astype("float32")
    b2 = rng.standard_normal(C).astype("float32")
    shape1 = np.array([1, G, C // G, H, W], dtype=np.int64)
    shape2 = np.array([1, C, H, W], dtype=np.int64)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], group=G),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Reshape", ["r1", "s1"], ["g1"]),
        helper.make_node("Transpose", ["g1"], ["t1"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t1", "s2"], ["sh"]),
        helper.make_node("Conv", ["sh", "w2", "b2"], ["c2"], group=G),
        helper.make_node("Add", ["c2", "x"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["y"]),
    ]
    inits = {"w1": w1, "w2": w2, "b2": b2, "s1": shape1, "s2": shape2}
    check_against_ort(make_model(nodes, {"x": x}, ["y"], inits), {"x": x}, rtol=1e-4, atol=1e-4)
