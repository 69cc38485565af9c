"""``fuse_dw_pointwise``: which depthwise -> clip -> 1x1 chains become one ``dwconv_pw_nchwc``
node (Before/Expected on the blocked graph), and the fused kernel against onnxruntime on
MobileNet blocks of odd sizes and random data."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import ember
import ember.frontend.passes.fuse_dw_pointwise as fdp
from ember.frontend.onnx_import import from_onnx
from ember.frontend.passes import fold_batch_norm, run_graph_passes
from ember.frontend.passes.alter_conv_layout import alter_conv_layout
from ember.frontend.passes.fuse_dw_pointwise import fuse_dw_pointwise
from tests.frontend.onnx_models import make_model, run_ort
from tests.nightly import examples

pytest.importorskip("onnxruntime")
n = helper.make_node


@pytest.fixture
def fuse_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuse whatever the depthwise output's size, so small test shapes exercise the kernel."""
    monkeypatch.setattr(fdp, "MIN_BYTES", 0)


def block(
    rng: np.random.Generator,
    c: int = 16,
    expand: int = 40,
    h: int = 13,
    w: int = 11,
    stride: int = 1,
    act: str = "relu6",
    residual: bool = True,
    tap_user: bool = False,
) -> tuple[object, dict]:
    """An inverted residual block: 1x1 expand + ReLU6, 3x3 depthwise (``stride``) + ``act``
    (relu6 or relu), 1x1 project (+ the input where shapes allow); ``tap_user``: the
    depthwise output is a graph output too."""

    def wt(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype("float32")

    out_c = c if residual else c + 8
    inits = {
        "we": wt(expand, c, 1, 1), "be": wt(expand), "wd": wt(expand, 1, 3, 3), "bd": wt(expand),
        "wp": wt(out_c, expand, 1, 1), "bp": wt(out_c),
        "lo": np.array(0.0, "float32"), "hi": np.array(6.0, "float32"),
    }  # fmt: skip
    nodes = [
        n("Conv", ["x", "we", "be"], ["e"]),
        n("Clip", ["e", "lo", "hi"], ["e6"]),
        n("Conv", ["e6", "wd", "bd"], ["d"], group=expand, pads=[1] * 4, strides=[stride] * 2),
        n("Clip", ["d", "lo", "hi"], ["d6"]) if act == "relu6" else n("Relu", ["d"], ["d6"]),
        n("Conv", ["d6", "wp", "bp"], ["p"]),
    ]
    outputs = ["p"]
    if residual and stride == 1:
        nodes.append(n("Add", ["p", "x"], ["y"]))
        outputs = ["y"]
    if tap_user:
        outputs.append("d")
    x = rng.standard_normal((1, c, h, w)).astype("float32")
    return make_model(nodes, {"x": x}, outputs, inits), {"x": x}


def _blocked(model: object) -> object:
    return run_graph_passes(from_onnx(model), [fold_batch_norm, alter_conv_layout])


def test_the_chain_becomes_one_node(fuse_any_size: None) -> None:
    before = _blocked(block(np.random.default_rng(0))[0])
    after = fuse_dw_pointwise(before)
    ops = [nd.op for nd in after.nodes]
    assert "dwconv_nchwc" not in ops and "dwconv_pw_nchwc" in ops
    assert ops.count("clip") == 1  # the expand conv's ReLU6 stays
    (fused,) = [nd for nd in after.nodes if nd.op == "dwconv_pw_nchwc"]
    (dw,) = [nd for nd in before.nodes if nd.op == "dwconv_nchwc"]
    pw = [nd for nd in before.nodes if nd.op == "conv_nchwc"][-1]  # expand, then project
    assert fused.inputs == (*dw.inputs, *pw.inputs[1:]) and fused.outputs == pw.outputs
    assert fused.name == pw.name
    assert (fused.attrs["min"], fused.attrs["max"]) == (0.0, 6.0)
    assert fused.attrs["strides"] == dw.attrs["strides"] and fused.attrs["out_channels"] == 16
    (clip,) = [nd for nd in before.nodes if nd.inputs[:1] == dw.outputs]
    assert set(before.values) - set(after.values) == {*dw.outputs, *clip.outputs}
    assert fused.absorbed == (dw.where(), clip.where())  # named in errors and profiles
    assert fused.where() == f"{pw.where()} (fused with {dw.where()}, {clip.where()})"
    after.verify()


def test_relu_is_a_clip_from_zero(fuse_any_size: None) -> None:
    after = fuse_dw_pointwise(_blocked(block(np.random.default_rng(0), act="relu")[0]))
    (fused,) = [nd for nd in after.nodes if nd.op == "dwconv_pw_nchwc"]
    assert (fused.attrs["min"], fused.attrs["max"]) == (0.0, None)


@pytest.mark.parametrize(
    "why, kwargs",
    [
        ("the depthwise output is read elsewhere", {"tap_user": True}),
        ("the output stays below MIN_BYTES", {"small": True}),
    ],
)
def test_left_alone(why: str, kwargs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    small = kwargs.pop("small", False)
    if not small:
        monkeypatch.setattr(fdp, "MIN_BYTES", 0)
    before = _blocked(block(np.random.default_rng(0), **kwargs)[0])
    after = fuse_dw_pointwise(before)
    assert [nd.op for nd in after.nodes] == [nd.op for nd in before.nodes], why


def test_a_strided_or_padded_pointwise_conv_is_left_alone(fuse_any_size: None) -> None:
    model, _ = block(np.random.default_rng(0), residual=False)
    for node in model.graph.node:
        if node.output[0] == "p":
            node.attribute.append(helper.make_attribute("strides", [2, 2]))
    before = _blocked(model)
    assert [nd.op for nd in fuse_dw_pointwise(before).nodes] == [nd.op for nd in before.nodes]


def _check(model: object, inputs: dict) -> list:
    lib = ember.compile(model, target="llvm")
    want = run_ort(model, inputs)
    got = lib.run(inputs)
    for g, wnt in zip(got, want):
        np.testing.assert_allclose(g, wnt, rtol=1e-4, atol=1e-4)
    return [getattr(s.kernel, "op", "") for s in lib.steps]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # stride 1, residual add as the fused kernel's epilogue, 40 channels (blocks of 8)
        {"stride": 2, "residual": False},
        {"act": "relu", "h": 7, "w": 16},
        {"c": 24, "expand": 144, "h": 9, "w": 9},
    ],
    ids=str,
)
def test_fused_kernel_matches_onnxruntime(kwargs: dict, fuse_any_size: None) -> None:
    model, inputs = block(np.random.default_rng(1), **kwargs)
    ops = _check(model, inputs)
    assert any(op.startswith("dwconv_pw_nchwc") for op in ops), ops


def test_mobilenet_v2_fuses_its_large_blocks_only() -> None:
    from ember.frontend.testing.catalog import CATALOG

    model, inputs = CATALOG["mobilenet_v2"](np.random.default_rng(0), False)
    ops = _check(model, inputs)
    # 112x112 and 56x56; the two with an expand conv are whole blocks (fuse_expand_dw_pointwise)
    assert sum(op.startswith("dwconv_pw_nchwc") for op in ops) == 1
    assert sum(op.startswith("expand_dwconv_pw_nchwc") for op in ops) == 2
    assert sum(op.startswith("dwconv_nchwc") for op in ops) == 14


@settings(max_examples=examples(6), deadline=None, derandomize=True)
@given(
    h=st.integers(3, 12),
    w=st.integers(3, 12),
    expand=st.integers(16, 48),
    stride=st.sampled_from([1, 2]),
    residual=st.booleans(),
)
def test_random_blocks_match_onnxruntime(
    h: int, w: int, expand: int, stride: int, residual: bool
) -> None:
    mp = pytest.MonkeyPatch()
    mp.setattr(fdp, "MIN_BYTES", 0)
    try:
        model, inputs = block(
            np.random.default_rng(h * w), 16, expand, h, w, stride, "relu6", residual
        )
        _check(model, inputs)
    finally:
        mp.undo()
