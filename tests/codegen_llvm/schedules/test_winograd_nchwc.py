"""Winograd on channel-blocked convolutions: the kernel against a float64 numpy
convolution, the compile-time weight transform (``transform_winograd_weights``,
Before/Expected), and compiled graphs against onnxruntime on random odd shapes.

Tolerances as in ``test_winograd.py`` (``atol = 4e-6 * 9 * C``): Winograd rounds
differently from a direct sum, more so for F(4x4).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import ember
from ember.backend import get_backend
from ember.codegen_llvm.conv_strategies import winograd_nchwc_knobs
from ember.codegen_llvm.schedules.matmul import whole_column_block
from ember.codegen_llvm.schedules.winograd import schedule_winograd_output
from ember.frontend.passes import (
    alter_conv_layout_with,
    run_graph_passes,
    transform_winograd_weights_with,
)
from ember.frontend.passes.conv_blocks import default_blocks
from ember.tir import expr as E
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.conv_nchwc import pack_nchwc_bias, pack_nchwc_weights
from ember.tir.topi.winograd import (
    WinogradShape,
    winograd_conv2d_nchwc,
    winograd_weights_numpy,
)
from tests.codegen_llvm.schedules.test_conv2d import conv_ref
from tests.frontend.onnx_models import make_model, run_ort
from tests.nightly import examples


def _tol(C: int) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 4e-6 * 9 * C}


def _blocked(x: np.ndarray, cb: int) -> np.ndarray:
    n, c, h, w = x.shape
    padded = np.zeros((n, -(-c // cb) * cb, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, -1, cb, h, w).transpose(0, 1, 3, 4, 2))


def _unblocked(y: np.ndarray) -> np.ndarray:
    n, ob, h, w, b = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, ob * b, h, w)


@pytest.mark.parametrize(
    "C, O, H, W, cb, ob, pads, m",
    [
        (20, 40, 9, 13, 16, 16, (1, 1, 1, 1), 4),  # padded blocks both sides, partial tiles
        (32, 24, 7, 6, 32, 8, (0, 1, 2, 0), 2),  # uneven pads, a block narrower than a register
        (16, 48, 11, 5, 8, 48, (1, 1, 1, 1), 4),  # nr=64 panels over 48 blocked outputs
    ],
)
def test_blocked_kernel_matches_numpy(C, O, H, W, cb, ob, pads, m, rng):  # noqa: ANN001
    """relu(conv + bias + residual) on blocked tensors, weights transformed in numpy; the
    lanes past O (zero weights and bias) come out zero."""
    x = rng.uniform(-1, 1, (1, C, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (O, C, 3, 3)).astype("float32")
    b = rng.uniform(-1, 1, O).astype("float32")
    g = WinogradShape(1, C, H, W, O, pads, m)
    r = rng.uniform(-1, 1, (1, O, g.OH, g.OW)).astype("float32")
    knobs = {"m": m, "mr": 4, "nr": 64, "ku": 4, "nc_panels": 1}
    U = winograd_weights_numpy(pack_nchwc_weights(w, cb, ob), m, knobs["nr"])
    OB = -(-O // ob)
    X = te.placeholder((1, -(-C // cb), H, W, cb), "float32", name="X")
    Ut = te.placeholder(U.shape, "float32", name="U")
    B = te.placeholder((OB, ob), "float32", name="B")
    R = te.placeholder((1, OB, g.OH, g.OW, ob), "float32", name="R")
    conv = winograd_conv2d_nchwc(X, Ut, B, g, ob, knobs)
    zero = E.const(0.0, "float32")
    out = te.compute(conv.shape, lambda *i: E.max_(conv(*i) + R(*i), zero), name="out")
    s = create_schedule(out.op)
    schedule_winograd_output(s, out)
    mod = ember.build(s, [X, Ut, B, R, out], target="llvm")
    got = np.full((1, OB, g.OH, g.OW, ob), np.nan, "float32")
    mod(_blocked(x, cb), U, pack_nchwc_bias(b, ob), _blocked(r, ob), got)
    want = np.maximum(conv_ref(x, w, 1, pads, 1) + b[:, None, None] + r, 0)
    np.testing.assert_allclose(_unblocked(got)[:, :O], want, **_tol(C))
    assert not _unblocked(got)[:, O:].any()


def test_blocked_transforms_are_contiguous_vectors():
    """The blocked transforms run along the channel lanes: the input transform loads
    X_pad and stores V, the output transform loads M and stores the result, all as
    contiguous 16-lane vectors (no gathers)."""
    g = WinogradShape(1, 32, 16, 16, 32, 1, 4)
    knobs = {"m": 4, "mr": 4, "nr": 32, "ku": 4, "nc_panels": 1}
    X = te.placeholder((1, 1, 16, 16, 32), "float32", name="X")
    Ut = te.placeholder((6, 6, 1, 32, 32), "float32", name="U")
    conv = winograd_conv2d_nchwc(X, Ut, None, g, 32, knobs)
    s = create_schedule(conv.op)
    schedule_winograd_output(s, conv)
    lines = [line.strip() for line in str(ember.lower(s, [X, Ut, conv])).splitlines()]
    v_stores = [line for line in lines if line.startswith("V[")]
    assert v_stores and all(line.split("=")[0].rstrip().endswith(", 1, 16)]") for line in v_stores)
    assert all("X_pad[ramp(" in line and ", 1, 16)]" in line for line in v_stores)
    out_stores = [line for line in lines if line.startswith("conv[")]
    assert out_stores and all(", 1, 16)]" in line.split("=")[0] for line in out_stores)
    assert all("M[ramp(" in line and ", 1, 16)]" in line.split("=")[1] for line in out_stores)


def _model(rng, C: int, O: int, H: int, W: int, stride: int = 1):  # noqa: ANN001, ANN202
    weights = {
        "w": rng.uniform(-1, 1, (O, C, 3, 3)).astype("float32"),
        "b": rng.uniform(-1, 1, O).astype("float32"),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[stride] * 2),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    x = rng.uniform(-1, 1, (1, C, H, W)).astype("float32")
    return make_model(nodes, {"x": x}, ["y"], weights), {"x": x}


def _always(m: int):  # noqa: ANN202
    return lambda args, ic_bn, oc_bn: {"m": m, "mr": 4, "nr": 32, "ku": 2, "nc_panels": 1}


def test_pass_transforms_the_weights_at_compile_time(rng):  # noqa: ANN001
    """Before: conv_nchwc (3x3, stride 1) on blocked weights. After: conv_winograd_nchwc
    on the numpy transform of those weights, the blocked weights gone; a stride-2 conv,
    and a conv the chooser declines, stay as they were."""
    model, _ = _model(rng, 16, 24, 8, 8)
    blocked = run_graph_passes(
        ember.frontend.from_onnx(model), [alter_conv_layout_with(default_blocks)]
    )
    (conv,) = [n for n in blocked.nodes if n.op == "conv_nchwc"]
    w_name = conv.inputs[1]
    after = run_graph_passes(blocked, [transform_winograd_weights_with(_always(4))])
    (wino,) = [n for n in after.nodes if n.op == "conv_winograd_nchwc"]
    assert wino.inputs[0] == conv.inputs[0] and wino.inputs[2] == conv.inputs[2]
    assert wino.attrs == {
        "pads": (1, 1, 1, 1), "in_channels": 16, "channels": 24, "out_block": 8,
        "m": 4, "mr": 4, "nr": 32, "ku": 2, "nc_panels": 1,
    }  # fmt: skip
    want = winograd_weights_numpy(blocked.params[w_name], 4, 32)
    np.testing.assert_array_equal(after.params[wino.inputs[1]], want)
    assert w_name not in after.params
    declined = run_graph_passes(blocked, [transform_winograd_weights_with(lambda *a: None)])
    assert declined is blocked or [n.op for n in declined.nodes] == [n.op for n in blocked.nodes]
    model2, _ = _model(rng, 16, 24, 8, 8, stride=2)
    b2 = run_graph_passes(
        ember.frontend.from_onnx(model2), [alter_conv_layout_with(default_blocks)]
    )
    a2 = run_graph_passes(b2, [transform_winograd_weights_with(_always(4))])
    assert [n.op for n in a2.nodes] == [n.op for n in b2.nodes]


def test_default_rule_picks_winograd_in_a_resnet_layer():
    """The CPU chooser gives Winograd to a 32->32 layer at 16x16 and 7x7 (the blocked size
    rule) and not to one at 6x6, with the fallback's knobs; nor to large weights over a
    plane under 16x16."""
    from ember.codegen_llvm.conv_strategies import winograd_nchwc_knobs

    def args(H: int) -> tuple:
        return (1, 32, H, H, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), "float32")

    knobs = winograd_nchwc_knobs(args(16), 32, 32)
    assert knobs is not None and knobs["m"] == 4 and knobs["nr"] >= 32
    assert winograd_nchwc_knobs(args(7), 32, 32) is not None
    assert winograd_nchwc_knobs(args(6), 32, 32) is None

    def resnet(c: int, o: int, h: int) -> tuple:
        return (1, c, h, h, o, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), "float32")

    # below 16x16, 8 MiB of weights or more run direct (ResNet's 512-channel convs, 9.4 MB)
    # where the L3 is far; on Zen's near L3 they stay on Winograd
    for cpu, near in (("x86-64-v4", False), ("znver3", True)):
        with ember.Target(f"llvm -mcpu={cpu}"):
            assert (winograd_nchwc_knobs(resnet(512, 512, 7), 32, 32) is not None) is near
            assert winograd_nchwc_knobs(resnet(512, 512, 16), 32, 32) is not None
            assert winograd_nchwc_knobs(resnet(256, 256, 14), 32, 32) is not None  # 2.4 MB
            assert winograd_nchwc_knobs(resnet(128, 32, 7), 32, 32) is not None  # DenseNet's


def test_default_column_block_divides_the_channels():
    """The default GEMM column block (``nr * nc_panels``) divides the output channels
    where a narrower one can: a partial block ran 2-7x slower (Inception v2's 160- and
    224-channel layers)."""
    assert whole_column_block(160, 64, 2) == (32, 1)
    assert whole_column_block(96, 64, 2) == (32, 1)
    assert whole_column_block(192, 64, 2) == (64, 1)
    assert whole_column_block(512, 64, 2) == (64, 2)
    assert whole_column_block(1000, 64, 2) == (64, 2)  # none divides: unchanged
    assert whole_column_block(48, 16, 2) == (16, 1)
    for o in (64, 96, 160, 224, 320):
        args = (1, 32, 14, 14, o, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), "float32")
        knobs = winograd_nchwc_knobs(args, 32, 32)
        assert knobs is not None and o % (knobs["nr"] * knobs["nc_panels"]) == 0, (o, knobs)


def test_default_knobs_on_160_channels_match_onnxruntime(rng):  # noqa: ANN001
    """A 32->160 layer at 9x9 on the default rule and knobs (32-lane panels, one a block)
    against onnxruntime."""
    model, feeds = _model(rng, 32, 160, 9, 9)
    lib = ember.compile(model, target="llvm")
    assert any(n.op == "conv_winograd_nchwc" for n in lib.graph.nodes)
    np.testing.assert_allclose(lib.run(feeds)[0], run_ort(model, feeds)[0], **_tol(32))


@settings(max_examples=examples(3), deadline=None, derandomize=True)
@given(
    c=st.integers(1, 24),
    o=st.integers(16, 40),
    hw=st.tuples(st.integers(3, 11), st.integers(3, 11)),
    m=st.sampled_from([2, 4]),
)
def test_random_winograd_graphs_match_onnxruntime(c, o, hw, m):  # noqa: ANN001
    """Every blocked 3x3 conv forced onto Winograd (a chooser that always says yes) in
    ``ember.compile``'s own pass list: random channel counts (padded blocks) and odd
    sizes against onnxruntime."""
    rng = np.random.default_rng(c * 1000 + o * 10 + m)
    model, feeds = _model(rng, c, o, *hw)
    passes = [
        transform_winograd_weights_with(_always(m)) if p.name == "transform_winograd_weights" else p
        for p in get_backend("llvm").graph_passes(ember.frontend.passes.DEFAULT_PASSES)
    ]
    lib = ember.compile(model, target="llvm", graph_passes=passes)
    assert any(n.op == "conv_winograd_nchwc" for n in lib.graph.nodes)
    np.testing.assert_allclose(lib.run(feeds)[0], run_ort(model, feeds)[0], **_tol(c))


def test_op_refuses_weights_that_do_not_fit():
    """``conv_winograd_nchwc``'s shape rule: transformed weights for another tile size,
    channel count or panel width, or a bias of the wrong blocks, are refused with
    ``ArgumentError`` before any kernel is built."""
    from ember.errors import ArgumentError
    from ember.frontend.graph import TensorType
    from ember.frontend.ops.registry import get_op

    op = get_op("conv_winograd_nchwc")
    attrs = {
        "pads": (1, 1, 1, 1), "in_channels": 20, "channels": 40, "out_block": 16,
        "m": 4, "mr": 4, "nr": 32, "ku": 4, "nc_panels": 1,
    }  # fmt: skip
    x = TensorType((1, 2, 9, 13, 16), "float32")
    good = TensorType((6, 6, 2, 32, 32), "float32")
    (out,) = op.infer_types([x, good], attrs)
    assert out.shape == (1, 3, 9, 13, 16)
    for bad in [(4, 4, 2, 32, 32), (6, 6, 2, 16, 32), (6, 6, 2, 32, 16), (6, 6, 1, 32, 32)]:
        with pytest.raises(ArgumentError, match="conv_winograd_nchwc"):
            op.infer_types([x, TensorType(bad, "float32")], attrs)
    with pytest.raises(ArgumentError, match="bias"):
        op.infer_types([x, good, TensorType((2, 16), "float32")], attrs)


def test_nan_spreads_over_a_tile_and_the_pass_can_be_disabled(rng):  # noqa: ANN001
    """A documented difference from a direct convolution: Winograd mixes a tile's inputs,
    so a NaN input makes NaN every output of the tiles that read it (a superset of
    onnxruntime's NaN outputs; the other outputs still match). Disabling
    ``transform_winograd_weights`` gives onnxruntime's NaN positions exactly."""
    from ember.transform import PassContext

    model, feeds = _model(rng, 32, 32, 16, 16)
    feeds["x"][0, 3, 5, 9] = np.nan
    want = run_ort(model, feeds)[0]
    lib = ember.compile(model, target="llvm")
    assert any(n.op == "conv_winograd_nchwc" for n in lib.graph.nodes)
    got = lib.run(feeds)[0]
    assert np.isnan(got).sum() > np.isnan(want).sum() and np.isnan(got)[np.isnan(want)].all()
    finite = ~np.isnan(got)
    np.testing.assert_allclose(got[finite], want[finite], **_tol(32))
    with PassContext(disabled_pass=["transform_winograd_weights"]):
        direct = ember.compile(model, target="llvm")
    assert not any(n.op == "conv_winograd_nchwc" for n in direct.graph.nodes)
    out = direct.run(feeds)[0]
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
