"""The blocked convolution: ``conv2d_nchwc`` (compute), ``layout_transform`` and the
``conv2d_NCHWc.llvm`` template, against a numpy NCHW convolution on blocked random data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.cpu_features import near_last_level_cache
from ember.codegen_llvm.schedules.conv2d_nchwc import conv2d_nchwc_llvm, schedule_conv2d_nchwc
from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.conv_nchwc import conv2d_nchwc, layout_transform, pack_nchwc_weights
from ember.tuner.task import create_task
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.codegen_llvm.schedules.test_conv2d import conv_ref
from tests.nightly import configs, examples


def block(x: np.ndarray, cb: int) -> np.ndarray:
    """NCHW -> NCHW[cb]c with zeros past C (numpy, independent of the computes)."""
    n, c, h, w = x.shape
    out = np.zeros((n, -(-c // cb), h, w, cb), x.dtype)
    for ch in range(c):
        out[:, ch // cb, :, :, ch % cb] = x[:, ch]
    return out


def unblock(y: np.ndarray, channels: int) -> np.ndarray:
    n, _, h, w, cb = y.shape
    return np.stack([y[:, ch // cb, :, :, ch % cb] for ch in range(channels)], axis=1)


def _run(s, tensors, arrays):  # noqa: ANN001, ANN202
    mod = ember.build(s, tensors, target="llvm")
    out = np.full([int(d.value) for d in tensors[-1].shape], np.nan, dtype="float32")
    mod(*arrays, out)
    return out


def _template_case(rng, shape, stride, pad, dilation, cfg=None, task=None):  # noqa: ANN001, ANN202
    N, C, H, W, O, KH, KW = shape
    if cfg is None:
        s, tensors = conv2d_nchwc_llvm(*shape, stride, pad, dilation)
    else:
        s, tensors = task.instantiate(cfg)
    icb, ocb = int(tensors[0].shape[4].value), int(tensors[1].shape[5].value)
    x = rng.standard_normal((N, C, H, W)).astype("float32")
    w = rng.standard_normal((O, C, KH, KW)).astype("float32")
    got = _run(s, tensors, [block(x, icb), pack_nchwc_weights(w, icb, ocb)])
    assert not np.isnan(got).any()
    np.testing.assert_allclose(
        unblock(got, O), conv_ref(x, w, stride, pad, dilation), rtol=1e-4, atol=1e-3
    )
    # lanes past O hold zeros (the next blocked conv multiplies them by zero weights)
    assert not unblock(got, got.shape[1] * ocb)[:, O:].any()


CASES = [
    # N, C, H, W, O, KH, KW, stride, padding, dilation
    ((1, 3, 7, 9, 5, 3, 3), 2, 1, 1),
    ((2, 13, 11, 9, 20, 3, 3), 1, 1, 1),
    ((1, 64, 15, 13, 64, 3, 3), 1, 1, 1),
    ((1, 13, 10, 7, 33, 3, 2), (2, 1), (1, 0, 2, 1), (1, 2)),
    ((1, 32, 9, 9, 48, 1, 1), 2, 0, 1),
    ((1, 3, 23, 21, 64, 7, 7), 2, 3, 1),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_template_fallback(case, rng):  # noqa: ANN001
    _template_case(rng, *case)


@pytest.mark.parametrize("case", CASES[1:4], ids=str)
def test_template_sampled_configs(case, rng):  # noqa: ANN001
    shape, stride, pad, dilation = case
    task = task_of("conv2d_NCHWc.llvm", *shape, stride, pad, dilation, "float32")
    for cfg in sampled_configs(task, configs(3), seed=task.config_space.size // 3):
        _template_case(rng, shape, stride, pad, dilation, cfg, task)


@settings(max_examples=examples(10), deadline=None, derandomize=True)
@given(
    c=st.integers(1, 20),
    o=st.integers(1, 40),
    hw=st.tuples(st.integers(3, 12), st.integers(3, 12)),
    k=st.sampled_from([1, 2, 3]),
    stride=st.integers(1, 2),
    pad=st.integers(0, 2),
    pick=st.integers(0, 10**6),
)
def test_template_random_configs(c, o, hw, k, stride, pad, pick):  # noqa: ANN001
    """Any legal config of the template on any small workload matches numpy."""
    h, w = hw
    if h + 2 * pad < k or w + 2 * pad < k:
        return
    task = task_of("conv2d_NCHWc.llvm", 1, c, h, w, o, k, k, stride, pad, 1, "float32")
    (cfg,) = sampled_configs(task, 1, seed=pick)
    _template_case(np.random.default_rng(pick), (1, c, h, w, o, k, k), stride, pad, 1, cfg, task)


@pytest.mark.parametrize("cpu", ["znver4", "znver3", "x86-64-v4"])
def test_outer_default_by_weights_and_plane(cpu, rng):  # noqa: ANN001
    """Over a small output plane: rows outer up to 8 L2s of weights where the L3 is near
    (Zen 4's 8 MB, measured faster in MobileNetV2 and ResNet-50 there; Zen 3's 4 MB, and
    for a conv with a kernel window on Zen 3's 512 KB L2, 2 L2s), else up to 1 MiB
    (weights re-read per row come at memory speed), reduction outer (each weight read
    once) beyond; checked against numpy. A large plane with large weights: channels
    outer."""
    near, target = cpu.startswith("znver"), f"llvm -mcpu={cpu}"
    assert near_last_level_cache(target) is near

    def outer(*shape: int) -> str:
        task = create_task("conv2d_NCHWc.llvm", args=(*shape, 1, 1, 1, "float32"), target=target)
        knobs = task.config_space.knobs
        spread = knobs["prefetch"].default_value == "next_ic_block_spread"
        assert spread is (knobs["outer"].default_value == "reduction")  # see the docstring
        return knobs["outer"].default_value

    mid = (1, 192, 7, 5, 160, 3, 3)  # 1.1 MB of weights, a 7x5 plane
    assert outer(*mid) == ("rows" if cpu == "znver4" else "reduction")
    assert outer(1, 1728, 7, 5, 160, 1, 1) == ("rows" if near else "reduction")  # 1x1, 1.1 MB
    assert outer(1, 96, 7, 5, 160, 3, 3) == "rows"  # 553 KB
    assert outer(1, 512, 7, 7, 512, 3, 3) == "reduction"  # 9.4 MB, ResNet-18's last
    # 4.7 MB: ResNet-18's 256->512 conv at 7x7 (here at stride 1)
    assert outer(1, 256, 7, 7, 512, 3, 3) == ("rows" if cpu == "znver4" else "reduction")
    assert outer(1, 64, 56, 56, 64, 3, 3) == "rows"  # 147 KB
    assert outer(1, 256, 56, 56, 256, 3, 3) == "channels"  # a large plane
    _template_case(rng, mid, 1, 1, 1)


@pytest.mark.parametrize("outer", ["channels", "rows", "reduction"])
def test_unrolled_channels_micro_kernel(outer, rng):  # noqa: ANN001
    """``unroll_ic``: the block's input channels unrolled inside a loop over the taps
    (odd channel counts, a ragged last tile); a body past the limit is refused."""
    shape = (1, 40, 9, 11, 24, 3, 3)
    task = task_of("conv2d_NCHWc.llvm", *shape, 1, 1, 1, "float32")
    knobs = task.config_space.knobs
    pick = {"ic_bn": 16, "oc_bn": 16, "ow_bn": 4, "unroll_ic": True, "unroll_kernel": False}
    choice = {k: knobs[k].default_index for k in knobs}
    choice.update({k: list(knobs[k].candidates).index(v) for k, v in pick.items()})
    choice["outer"] = list(knobs["outer"].candidates).index(outer)
    cfg = task.config_space.from_choices(choice)
    _template_case(rng, shape, 1, 1, 1, cfg, task)
    s, tensors = task.instantiate(cfg)
    assert "for ri in" not in str(ember.lower(s, tensors))  # the channel loop is unrolled
    choice["ic_bn"] = list(knobs["ic_bn"].candidates).index(32)
    choice["ow_bn"] = list(knobs["ow_bn"].candidates).index(8)
    choice["unroll_kernel"] = list(knobs["unroll_kernel"].candidates).index(True)
    huge = task.config_space.from_choices(choice)  # 9 taps x 32 channels x 8 pixels
    assert any("multiply-adds" in v for v in task.config_space.violations(huge))


@pytest.mark.parametrize("outer", ["channels", "rows", "reduction"])
def test_compute_with_bias_and_epilogue(outer, rng):  # noqa: ANN001
    """The compute with a bias and a ReLU inlined into the template's output stage."""
    x = rng.standard_normal((1, 13, 9, 11)).astype("float32")
    wt = rng.standard_normal((20, 13, 3, 3)).astype("float32")
    b = rng.standard_normal(20).astype("float32")
    X = te.placeholder((1, 1, 9, 11, 16), "float32", name="X")
    Wt = te.placeholder((2, 1, 3, 3, 16, 16), "float32", name="W")
    B = te.placeholder((2, 16), "float32", name="B")
    conv = conv2d_nchwc(X, Wt, B, (2, 1), (1, 1, 1, 1), (1, 1), {"ow_bn": 4, "outer": outer})
    out = te.compute(conv.shape, lambda *i: E.max_(conv[i], E.const(0.0, "float32")), name="relu")
    s = create_schedule(out.op)
    s[conv].compute_inline()  # the bias stage; the reduction is conv's input
    reduction = conv.op.input_tensors[0]
    schedule_conv2d_nchwc(s, out, reduction)
    bb = np.zeros(32, "float32")
    bb[:20] = b
    got = _run(
        s, [X, Wt, B, out], [block(x, 16), pack_nchwc_weights(wt, 16, 16), bb.reshape(2, 16)]
    )
    want = np.maximum(conv_ref(x, wt, (2, 1), 1, 1) + b[None, :, None, None], 0)
    np.testing.assert_allclose(unblock(got, 20), want, rtol=1e-4, atol=1e-3)
    text = str(ember.lower(s, [X, Wt, B, out]))
    assert "parallel(" in text


@pytest.mark.parametrize(
    "src,dst,c", [(0, 16, 13), (0, 3, 3), (16, 0, 13), (8, 16, 20), (16, 8, 32)]
)
def test_layout_transform(src, dst, c, rng):  # noqa: ANN001
    x = rng.standard_normal((2, c, 5, 7)).astype("float32")
    given_ = x if src == 0 else block(x, src)
    X = te.placeholder(given_.shape, "float32", name="X")
    Y = layout_transform(X, src, dst, c)
    s = create_schedule(Y.op)
    out = np.full([int(d.value) for d in Y.shape], np.nan, dtype="float32")
    ember.build(s, [X, Y], target="llvm")(given_, out)
    np.testing.assert_array_equal(out, x if dst == 0 else block(x, dst))


def test_errors():
    with pytest.raises(ArgumentError, match="output would be"):
        conv2d_nchwc_llvm(1, 2, 2, 2, 3, 5, 5, 1, 0, 1)
    X = te.placeholder((1, 2, 8, 8, 16), "float32", name="X")
    with pytest.raises(ArgumentError, match="do not fit"):
        conv2d_nchwc(
            X, te.placeholder((1, 3, 3, 3, 16, 16), "float32"), None, (1, 1), (0,) * 4, (1, 1)
        )
    with pytest.raises(ArgumentError, match="is not NCHW"):
        layout_transform(X, 8, 0, 16)


@pytest.mark.parametrize(
    "outer, prefetch",
    [
        ("rows", "next_ic_block"),
        ("reduction", "next_oc_block"),
        ("reduction", "next_ic_block_spread"),
        ("channels", "next_ic_block_spread"),
    ],
)
def test_prefetch_knob_keeps_results_and_emits_prefetches(outer, prefetch, rng):  # noqa: ANN001
    """``prefetch``: the next block's weights hinted (llvm.prefetch) with the same result
    (odd channels, a ragged last tile); off by default for these small weights (rows
    outer), where it measured slower."""
    shape = (1, 19, 5, 6, 20, 3, 3)
    task = task_of("conv2d_NCHWc.llvm", *shape, 1, 1, 1, "float32")
    knobs = task.config_space.knobs
    assert knobs["prefetch"].default_value == "none"
    pick = {"ic_bn": 8, "oc_bn": 8, "ow_bn": 4, "unroll_kernel": False}
    pick.update({"outer": outer, "prefetch": prefetch})
    choice = {k: knobs[k].default_index for k in knobs}
    choice.update({k: list(knobs[k].candidates).index(v) for k, v in pick.items()})
    s, tensors = task.instantiate(task.config_space.from_choices(choice))
    mod = ember.build(s, tensors, target="llvm")
    assert "call void @llvm.prefetch.p0(" in mod.get_source("ll")
    x = rng.standard_normal(shape[:4]).astype("float32")
    w = rng.standard_normal((20, 19, 3, 3)).astype("float32")
    got = np.full([int(d.value) for d in tensors[-1].shape], np.nan, dtype="float32")
    mod(block(x, 8), pack_nchwc_weights(w, 8, 8), got)
    np.testing.assert_allclose(unblock(got, 20), conv_ref(x, w, 1, 1, 1), rtol=1e-4, atol=1e-3)


def test_row_cost_counts_the_latency_of_short_tiles():
    from ember.codegen_llvm.schedules.conv2d_nchwc import row_cost

    assert row_cost(13, 12, 1) == 12 + 8  # the lone last pixel waits out the latency
    assert row_cost(13, 8, 1) == 8 + 8 and row_cost(13, 7, 1) == 8 + 8
    assert row_cost(55, 5, 1) == 11 * 8  # every tile of 5 below 8 chains
    assert row_cost(55, 12, 1) == 4 * 12 + 8
    assert row_cost(56, 8, 2) == 7 * 16


def test_equal_cost_rows_take_fewer_tiles_over_many_channels():
    """28 pixels of two registers (AVX2, 16 channels) cost 4 x 7 or 6 x 4 + 4 alike:
    6-wide ran ResNet-18's stride-2 convs 4-7% faster; a 3-channel image keeps the
    dividing tile, and so do one-register pixels."""
    from ember.codegen_llvm.schedules.conv2d_nchwc import row_tile

    assert row_tile(28, [1, 2, 3, 4, 5, 6], 2, 64) == 6
    assert row_tile(112, [1, 2, 3, 4, 5, 6], 2, 3) == 4
    assert row_tile(56, [1, 2, 3, 4, 5, 6, 7, 8, 12], 1, 64) == 8
    assert row_tile(14, [1, 2, 3, 4, 5, 6], 2, 64) == 5  # least cost first: 3 x 5 of 14


def test_resnet18_stride2_conv_default_is_six_wide_on_avx2():
    task = create_task(
        "conv2d_NCHWc.llvm", (1, 64, 56, 56, 128, 3, 3, 2, 1, 1, "float32"), "llvm -mcpu=x86-64-v3"
    )
    assert task.config_space.default_entity()["ow_bn"].val == 6


@pytest.mark.parametrize("target", ["llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v4"])
@pytest.mark.parametrize("ow, tiles", [(13, (7, 8)), (55, (12, 14)), (56, (8, 14)), (28, (7, 14))])
def test_default_row_tiles_leave_no_lone_pixels(target, ow, tiles):
    """SqueezeNet's rows: 13 pixels ran in a tile of 12 and a lone pixel (its 1000-class 1x1
    conv 4.4 ms, in tiles of 7 or 8 2.7-3.6 ms), 55 in tiles of 5 (5 divides 55); ResNet's
    56 and 28 keep the tiles that divide them. (A 3x3 conv: row tiles are its only kind.)"""
    task = create_task("conv2d_NCHWc.llvm", (1, 64, ow, ow, 1000, 3, 3, 1, 1, 1, "float32"), target)
    assert task.config_space.default_entity()["ow_bn"].val in tiles


@pytest.mark.parametrize("target", ["llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v4"])
def test_flat_default_where_rows_leave_accumulators_unused(target):
    """A pointwise conv runs flat where its row tiles hold fewer than the default
    accumulators (rows of 7, 14 and 28 in tiles of 7): then in tiles as wide as the
    registers allow, its input channels unrolled when there are several blocks. Rows of
    56 fill the tile and stay; so do convs that are not pointwise and those whose weights
    go reduction outer."""
    from ember.codegen_llvm.cpu_features import vector_unit
    from ember.tir.topi.conv_nchwc import blocks

    def default(*shape: int) -> dict:
        task = create_task("conv2d_NCHWc.llvm", args=(*shape, "float32"), target=target)
        cfg = task.config_space.default_entity()
        return {k: cfg[k].val for k in ("flat", "ow_bn", "ic_bn", "oc_bn", "unroll_ic", "outer")}

    with ember.Target(target):
        most = vector_unit().accumulators[0]
        lanes = vector_unit().lanes("float32")
    for c, hw, o in [(1024, 14, 256), (512, 28, 128), (160, 7, 160), (64, 56, 256)]:
        d = default(1, c, hw, hw, o, 1, 1, 1, 0, 1)
        if d["flat"]:
            assert d["unroll_ic"] and d["ow_bn"] * blocks(d["oc_bn"], lanes) <= most
    if lanes == 16:  # AVX-512: 7-pixel tiles of 2 registers, 14 accumulators, in rows
        assert default(1, 1024, 14, 14, 256, 1, 1, 1, 0, 1)["flat"]
        assert default(1, 1024, 14, 14, 256, 1, 1, 1, 0, 1)["ow_bn"] == 12
        assert not default(1, 64, 56, 56, 256, 1, 1, 1, 0, 1)["flat"]  # 8-pixel tiles fill it
    assert not default(1, 256, 14, 14, 256, 3, 3, 1, 1, 1)["flat"]  # not pointwise
    assert not default(1, 256, 28, 28, 256, 1, 1, 2, 0, 1)["flat"]  # strided
    assert not default(1, 2048, 7, 7, 512, 1, 1, 1, 0, 1)["flat"]  # 4 MB: reduction outer
    d = default(1, 32, 28, 28, 192, 1, 1, 1, 0, 1)  # one input block: not unrolled
    assert d["unroll_ic"] is (d["flat"] and d["ic_bn"] < 32)


def _flat_zen4_default(c: int, hw: int, o: int) -> Any:
    """The default config of the 1x1 conv ``c -> o`` over ``hw x hw``, built for a named Zen 4
    (its L3 is near); it must run flat."""
    args = (1, c, hw, hw, o, 1, 1, 1, 0, 1, "float32")
    cfg = create_task("conv2d_NCHWc.llvm", args, target="llvm -mcpu=znver4").config_space
    entity = cfg.default_entity()
    assert entity["flat"].val
    return entity


@pytest.mark.parametrize("l2", [512 << 10, 2 << 20])
def test_flat_convs_with_weights_past_l2_go_channels_outer(l2, monkeypatch):  # noqa: ANN001
    """Flat, rows outer re-reads every channel block's weights at each pixel tile, from L3
    once they outgrow half the core's L2; channels outer reads them once and re-reads the
    input, so it takes over where the input fits (MobileNetV2's 1x1 convs at 7x7 on a
    512 KB L2). ResNet-50's 1024->256 at 14x14 reads 800 KB of input and stays in rows.
    (Zen 4 named: its L3 is near, so these weights stay out of reduction outer.)"""
    import ember.codegen_llvm.schedules.conv2d_nchwc as nchwc

    monkeypatch.setattr(nchwc, "l2_bytes", lambda: l2)

    def outer(c: int, hw: int, o: int) -> str:
        return _flat_zen4_default(c, hw, o)["outer"].val

    assert outer(320, 7, 1280) == "channels"  # 1.6 MB of weights, 63 KB of input
    assert outer(160, 7, 960) == ("channels" if l2 < 1 << 20 else "rows")  # 614 KB
    assert outer(576, 14, 96) == "rows"  # 221 KB: in L2
    assert outer(1024, 14, 256) == "rows"  # 1 MB, but 800 KB of input
    assert nchwc.flat_outer_default("reduction", 8 << 20, 1 << 10) == "reduction"


@pytest.mark.parametrize("l2", [512 << 10, 1 << 20])
def test_flat_convs_streaming_their_weights_keep_the_channels_a_loop(l2, monkeypatch):  # noqa: ANN001
    """Over a 7x7 plane, weights past half the L2 stream in from L3 or memory, each vector
    used by a few pixel tiles: there the block's input channels stay a loop (measured faster
    cold on Zen 4); smaller weights, and larger planes, unroll them as flat convs do."""
    import ember.codegen_llvm.schedules.conv2d_nchwc as nchwc

    monkeypatch.setattr(nchwc, "l2_bytes", lambda: l2)

    def unrolled(c: int, hw: int, o: int) -> bool:
        return bool(_flat_zen4_default(c, hw, o)["unroll_ic"].val)

    assert not unrolled(320, 7, 1280)  # 1.6 MB of weights
    assert not unrolled(160, 7, 960)  # 614 KB: past half of either L2
    assert unrolled(576, 7, 160) is (l2 == 1 << 20)  # 368 KB: within half of 1 MB only
    assert unrolled(96, 14, 576)  # 221 KB over 196 pixels


@pytest.mark.parametrize("outer", ["rows", "channels"])
@pytest.mark.parametrize("unroll_ic", [False, True])
@pytest.mark.parametrize("hw, tile", [((13, 11), 12), ((7, 7), 6), ((2, 3), 16)])
def test_flat_pointwise_matches_numpy(outer, unroll_ic, hw, tile, rng):  # noqa: ANN001
    """``flat``: the plane as one pixel axis, tiles running across row ends (143 pixels in
    tiles of 12, the last of 11; a 6-pixel plane in one short tile), odd channel counts,
    a bias and a ReLU inlined; against numpy, the output prefilled with NaN."""
    h, w = hw
    x = rng.standard_normal((1, 19, h, w)).astype("float32")
    wt = rng.standard_normal((20, 19, 1, 1)).astype("float32")
    b = rng.standard_normal(20).astype("float32")
    X = te.placeholder((1, 2, h, w, 16), "float32", name="X")
    Wt = te.placeholder((2, 2, 1, 1, 16, 16), "float32", name="W")
    B = te.placeholder((2, 16), "float32", name="B")
    attrs = {"ow_bn": tile, "outer": outer, "unroll_ic": unroll_ic, "flat": True}
    conv = conv2d_nchwc(X, Wt, B, (1, 1), (0, 0, 0, 0), (1, 1), attrs)
    out = te.compute(conv.shape, lambda *i: E.max_(conv[i], E.const(0.0, "float32")), name="relu")
    s = create_schedule(out.op)
    reduction = conv.op.input_tensors[0].op.input_tensors[0]  # bias <- rows view <- flat
    assert reduction.ndim == 4 and reduction.shape[2].value == h * w
    s[conv].compute_inline()
    s[conv.op.input_tensors[0]].compute_inline()
    schedule_conv2d_nchwc(s, out, reduction)
    bb = np.zeros(32, "float32")
    bb[:20] = b
    got = _run(
        s, [X, Wt, B, out], [block(x, 16), pack_nchwc_weights(wt, 16, 16), bb.reshape(2, 16)]
    )
    want = np.maximum(conv_ref(x, wt, 1, 0, 1) + b[None, :, None, None], 0)
    np.testing.assert_allclose(unblock(got, 20), want, rtol=1e-4, atol=1e-3)


def test_flat_grouped_and_template(rng):  # noqa: ANN001
    """A grouped pointwise conv (two groups of whole blocks, a batch of two) flat, and the
    template's flat configs on a 14x14 plane (its default) against numpy."""
    x = rng.standard_normal((2, 32, 5, 7)).astype("float32")
    wt = rng.standard_normal((32, 16, 1, 1)).astype("float32")
    X = te.placeholder((2, 2, 5, 7, 16), "float32", name="X")
    Wt = te.placeholder((2, 1, 1, 1, 16, 16), "float32", name="W")
    conv = conv2d_nchwc(X, Wt, None, (1, 1), (0,) * 4, (1, 1), {"ow_bn": 12, "flat": True}, 2)
    s = create_schedule(conv.op)
    schedule_conv2d_nchwc(s, conv, conv.op.input_tensors[0])
    got = _run(s, [X, Wt, conv], [block(x, 16), pack_nchwc_weights(wt, 16, 16)])
    want = np.concatenate(
        [conv_ref(x[:, g * 16 : (g + 1) * 16], wt[g * 16 : (g + 1) * 16], 1, 0, 1) for g in (0, 1)],
        axis=1,
    )
    np.testing.assert_allclose(unblock(got, 32), want, rtol=1e-4, atol=1e-3)
    shape = (1, 40, 14, 14, 24, 1, 1)
    task = task_of("conv2d_NCHWc.llvm", *shape, 1, 0, 1, "float32")
    knobs = task.config_space.knobs
    assert list(knobs["flat"].candidates) == [False, True]
    for cfg in sampled_configs(task, 4, seed=7):
        _template_case(rng, shape, 1, 0, 1, cfg, task)
    flat = {k: knobs[k].default_index for k in knobs}
    # tiles of 12 pixels cross the 14-pixel rows and fit AVX2's registers as AVX-512's
    flat["flat"], flat["ow_bn"] = 1, list(knobs["ow_bn"].candidates).index(12)
    _template_case(rng, shape, 1, 0, 1, task.config_space.from_choices(flat), task)


@pytest.mark.parametrize("hw", [(14, 14), (7, 5)])
def test_flat_pointwise_in_a_graph(hw, rng, monkeypatch):  # noqa: ANN001
    """A model's 1x1 convs (odd channel counts, a bias, a residual add and a ReLU fused
    after) run flat by default and match onnxruntime."""
    pytest.importorskip("onnxruntime")
    from onnx import helper

    from ember.codegen_llvm.schedules import conv2d_nchwc as module
    from tests.frontend.onnx_models import make_model, run_ort

    monkeypatch.setenv("EMBER_DISK_CACHE", "0")  # build the kernels in this process
    flat: list[tuple[int, ...]] = []
    plain = module._schedule_pointwise_plane

    def spy(s, out, conv, attrs):  # noqa: ANN001, ANN202
        flat.append(tuple(int(d.value) for d in conv.shape))
        return plain(s, out, conv, attrs)

    monkeypatch.setattr(module, "_schedule_pointwise_plane", spy)
    h, w = hw
    weights = {
        "W1": (rng.standard_normal((40, 37, 1, 1)) * 0.2).astype("float32"),
        "B1": rng.standard_normal(40).astype("float32"),
        "W2": (rng.standard_normal((40, 40, 1, 1)) * 0.2).astype("float32"),
    }
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "W1", "B1"], ["c1"], name="conv1"),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "W2"], ["c2"], name="conv2"),
        n("Add", ["c2", "r1"], ["s"], name="add"),
        n("Relu", ["s"], ["y"], name="relu2"),
    ]
    x = rng.standard_normal((1, 37, h, w)).astype("float32")
    model = make_model(nodes, {"x": x}, ["y"], weights)
    got = ember.compile(model, target="llvm").run({"x": x})[0]
    np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert len(flat) == 2 and all(shape[2] == h * w for shape in flat)


@pytest.mark.parametrize("cpu", ["znver3", "znver4", "x86-64-v3", "x86-64-v4"])
def test_strided_3x3_convs_unroll_their_channels(cpu, rng):  # noqa: ANN001
    """ResNet's stride-2 3x3 convs (64+ input channels) unroll a block's input channels
    around loops over the taps with 8-lane vectors (AVX2), which ran them 2-10% faster in
    ResNet-18 on Zen 3; the 3x3 convs at stride 1, a 3-channel stem, 1x1 convs and
    16-lane AVX-512 (not measured) keep their taps unrolled. The config is checked against
    numpy."""
    from ember.codegen_llvm.cpu_features import vector_unit

    target = f"llvm -mcpu={cpu}"
    with ember.Target(target):
        avx2 = vector_unit().lanes("float32") == 8  # Zen 4 too: its AVX-512 runs 8 lanes here

    def unrolled(*shape: int) -> tuple[bool, bool]:
        task = create_task("conv2d_NCHWc.llvm", args=(*shape, "float32"), target=target)
        cfg = task.config_space.default_entity()
        return cfg["unroll_ic"].val, cfg["unroll_kernel"].val

    assert unrolled(1, 64, 56, 56, 128, 3, 3, 2, 1, 1) == (avx2, not avx2)
    assert unrolled(1, 256, 14, 14, 512, 3, 3, 2, 1, 1) == (avx2, not avx2)
    assert unrolled(1, 64, 56, 56, 64, 3, 3, 1, 1, 1) == (False, True)
    assert unrolled(1, 32, 56, 56, 64, 3, 3, 2, 1, 1) == (False, True)  # below 64 channels
    assert unrolled(1, 3, 224, 224, 32, 3, 3, 2, 1, 1) == (False, True)
    assert unrolled(1, 64, 56, 56, 128, 1, 1, 2, 0, 1)[1]  # a strided 1x1 conv
    if cpu == "x86-64-v3":  # the channels unrolled, built and run on this host, odd sizes
        shape = (1, 70, 15, 13, 24, 3, 3, 2, 1, 1, "float32")
        task = create_task("conv2d_NCHWc.llvm", shape, target="llvm")
        choice = {name: knob.default_index for name, knob in task.config_space.knobs.items()}
        choice["unroll_ic"], choice["unroll_kernel"] = 1, 1  # True, False
        cfg = task.config_space.from_choices(choice)
        _template_case(rng, (1, 70, 15, 13, 24, 3, 3), 2, 1, 1, cfg, task)
