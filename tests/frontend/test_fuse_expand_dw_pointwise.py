"""``fuse_expand_dw_pointwise``: which expand -> clip -> ``dwconv_pw_nchwc`` chains become one
``expand_dwconv_pw_nchwc`` node, and the fused kernel (bands of rows, the expanded rows
computed where the depthwise conv reads them) against onnxruntime on MobileNet blocks of
odd sizes, strides, paddings and dilations, on random data."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import ember
import ember.frontend.passes.fuse_dw_pointwise as fdp
import ember.frontend.passes.fuse_expand_dw_pointwise as fep
from ember.codegen_llvm.schedules.expand_dw_pointwise_nchwc import band_rows
from ember.frontend.onnx_import import from_onnx
from ember.frontend.passes import fold_batch_norm, run_graph_passes
from ember.frontend.passes.alter_conv_layout import alter_conv_layout
from ember.frontend.passes.fuse_dw_pointwise import fuse_dw_pointwise
from ember.frontend.passes.fuse_expand_dw_pointwise import fuse_expand_dw_pointwise
from tests.frontend.onnx_models import make_model, run_ort
from tests.nightly import examples

pytest.importorskip("onnxruntime")
n = helper.make_node


@pytest.fixture
def fuse_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuse whatever the tensors' sizes, so small test shapes exercise the kernel."""
    monkeypatch.setattr(fdp, "MIN_BYTES", 0)
    monkeypatch.setattr(fep, "MIN_BYTES", 0)


def block(
    rng: np.random.Generator,
    c: int = 16,
    expand: int = 40,
    h: int = 13,
    w: int = 11,
    stride: int = 1,
    pads: tuple[int, int, int, int] = (1, 1, 1, 1),
    dilation: int = 1,
    expand_act: str = "relu6",
    residual: bool = True,
    expand_user: bool = False,
    batch: int = 1,
) -> tuple[object, dict]:
    """An inverted residual block: 1x1 expand + ``expand_act`` (relu6, relu or none), 3x3
    depthwise + ReLU6, 1x1 project (+ the input where shapes allow); ``expand_user``:
    the expanded tensor is a graph output too."""

    def wt(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype("float32")

    out_c = c if residual else c + 8
    inits = {
        "we": wt(expand, c, 1, 1), "be": wt(expand), "wd": wt(expand, 1, 3, 3), "bd": wt(expand),
        "wp": wt(out_c, expand, 1, 1), "bp": wt(out_c),
        "lo": np.array(0.0, "float32"), "hi": np.array(6.0, "float32"),
    }  # fmt: skip
    acts = {
        "relu6": [n("Clip", ["e", "lo", "hi"], ["e6"])],
        "relu": [n("Relu", ["e"], ["e6"])],
        "none": [n("Identity", ["e"], ["e6"])],
    }
    nodes = [
        n("Conv", ["x", "we", "be"], ["e"]),
        *acts[expand_act],
        n("Conv", ["e6", "wd", "bd"], ["d"], group=expand, pads=list(pads),
          strides=[stride] * 2, dilations=[dilation] * 2),
        n("Clip", ["d", "lo", "hi"], ["d6"]),
        n("Conv", ["d6", "wp", "bp"], ["p"]),
    ]  # fmt: skip
    outputs = ["p"]
    x = rng.standard_normal((batch, c, h, w)).astype("float32")
    same = stride == 1 and dilation == 1 and pads == (1, 1, 1, 1)
    if residual and same:
        nodes.append(n("Add", ["p", "x"], ["y"]))
        outputs = ["y"]
    if expand_user:
        outputs.append("e")
    return make_model(nodes, {"x": x}, outputs, inits), {"x": x}


def _fused(model: object) -> tuple[object, object]:
    """The blocked graph after ``fuse_dw_pointwise``, and after this pass too."""
    before = fuse_dw_pointwise(
        run_graph_passes(from_onnx(model), [fold_batch_norm, alter_conv_layout])
    )
    return before, fuse_expand_dw_pointwise(before)


def test_the_block_becomes_one_node(fuse_any_size: None) -> None:
    before, after = _fused(block(np.random.default_rng(0))[0])
    assert [nd.op for nd in after.nodes if "conv" in nd.op] == ["expand_dwconv_pw_nchwc"]
    (fused,) = [nd for nd in after.nodes if nd.op == "expand_dwconv_pw_nchwc"]
    (inner,) = [nd for nd in before.nodes if nd.op == "dwconv_pw_nchwc"]
    (conv,) = [nd for nd in before.nodes if nd.op == "conv_nchwc"]
    (clip,) = [nd for nd in before.nodes if nd.inputs[:1] == conv.outputs]
    assert fused.inputs == (*conv.inputs, *inner.inputs[1:]) and fused.outputs == inner.outputs
    assert fused.name == inner.name and fused.op_type == inner.op_type
    assert fused.attrs == {**inner.attrs, "in_channels": 16, "expand_min": 0.0, "expand_max": 6.0}
    assert set(before.values) - set(after.values) == {*conv.outputs, *clip.outputs}
    assert fused.absorbed == (conv.where(), clip.where(), *inner.absorbed)
    after.verify()


def test_relu_is_a_clip_from_zero(fuse_any_size: None) -> None:
    _, after = _fused(block(np.random.default_rng(0), expand_act="relu")[0])
    (fused,) = [nd for nd in after.nodes if nd.op == "expand_dwconv_pw_nchwc"]
    assert (fused.attrs["expand_min"], fused.attrs["expand_max"]) == (0.0, None)


@pytest.mark.parametrize(
    "why, kwargs",
    [
        ("the expanded tensor is a graph output", {"expand_user": True}),
        ("no activation between the expand conv and the depthwise one", {"expand_act": "none"}),
        ("the expanded tensor stays below MIN_BYTES", {"small": True}),
    ],
)
def test_left_alone(why: str, kwargs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fdp, "MIN_BYTES", 0)
    if not kwargs.pop("small", False):
        monkeypatch.setattr(fep, "MIN_BYTES", 0)
    before, after = _fused(block(np.random.default_rng(0), **kwargs)[0])
    assert [nd.op for nd in after.nodes] == [nd.op for nd in before.nodes], why


def test_a_padded_expand_conv_is_left_alone(fuse_any_size: None) -> None:
    model, _ = block(np.random.default_rng(0), residual=False)
    for node in model.graph.node:
        if node.output[0] == "e":
            node.attribute.append(helper.make_attribute("pads", [1, 1, 1, 1]))
    before, after = _fused(model)
    assert [nd.op for nd in after.nodes] == [nd.op for nd in before.nodes]


def _check(model: object, inputs: dict) -> list[str]:
    lib = ember.compile(model, target="llvm")
    want = run_ort(model, inputs)
    got = lib.run(inputs)
    for g, wnt in zip(got, want):
        assert np.abs(g).max() > 0.1  # not a page of zeros
        np.testing.assert_allclose(g, wnt, rtol=1e-4, atol=1e-4)
    return [getattr(s.kernel, "op", "") for s in lib.steps]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # stride 1, the residual add as the fused kernel's epilogue, 40 channels
        {"stride": 2, "residual": False},
        {"expand_act": "relu", "h": 7, "w": 16},
        {"c": 24, "expand": 144, "h": 9, "w": 9},
        {"c": 12, "expand": 20, "h": 33, "w": 5, "stride": 2},  # 17 rows: a shorter last band
        {"pads": (0, 1, 2, 0), "residual": False},  # asymmetric padding
        {"dilation": 2, "pads": (2, 2, 2, 2), "residual": False, "h": 18, "w": 10},
        {"stride": 2, "pads": (0, 0, 0, 0), "residual": False, "h": 10, "w": 9},
        {"batch": 3, "h": 9, "w": 8},  # bands of every image in one parallel loop
    ],
    ids=str,
)
def test_fused_kernel_matches_onnxruntime(kwargs: dict, fuse_any_size: None) -> None:
    model, inputs = block(np.random.default_rng(1), **kwargs)
    ops = _check(model, inputs)
    assert [op for op in ops if "conv" in op] in (
        ["expand_dwconv_pw_nchwc"],
        ["expand_dwconv_pw_nchwc+add"],
    ), ops


def test_the_nan_of_an_input_pixel_reaches_its_outputs(fuse_any_size: None) -> None:
    model, inputs = block(np.random.default_rng(2), residual=False, h=12, w=12)
    inputs["x"][0, 3, 5, 6] = np.nan
    got = ember.compile(model, target="llvm").run(inputs)[0]
    want = run_ort(model, inputs)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "rows, band", [(56, 7), (112, 8), (28, 2), (14, 1), (17, 2), (13, 1), (1, 1), (200, 8)]
)
def test_band_rows(rows: int, band: int) -> None:
    assert band_rows(rows) == band


@settings(max_examples=examples(6), deadline=None, derandomize=True)
@given(
    h=st.integers(3, 20),
    w=st.integers(3, 12),
    expand=st.integers(8, 48),
    stride=st.sampled_from([1, 2]),
    residual=st.booleans(),
)
def test_random_blocks_match_onnxruntime(
    h: int, w: int, expand: int, stride: int, residual: bool
) -> None:
    mp = pytest.MonkeyPatch()
    mp.setattr(fdp, "MIN_BYTES", 0)
    mp.setattr(fep, "MIN_BYTES", 0)
    try:
        model, inputs = block(
            np.random.default_rng(h * w), 16, expand, h, w, stride, residual=residual
        )
        _check(model, inputs)
    finally:
        mp.undo()
