"""The blocked depthwise convolution: ``depthwise_conv2d_nchwc`` (compute) and the
``depthwise_conv2d_NCHWc.llvm`` template, against a numpy NCHW depthwise convolution on
blocked random data (blocking done in numpy, apart from the code under test)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules.depthwise_conv2d_nchwc import (
    depthwise_conv2d_nchwc_llvm,
    schedule_depthwise_nchwc,
)
from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.conv_nchwc import depthwise_conv2d_nchwc, pack_nchwc_depthwise_weights
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.codegen_llvm.schedules.test_conv2d_nchwc import _run, block, unblock
from tests.codegen_llvm.schedules.test_depthwise_conv2d import depthwise_ref
from tests.nightly import configs, examples


def _case(rng, shape, stride, pad, dilation, cfg=None, task=None):  # noqa: ANN001, ANN202
    N, C, H, W, KH, KW = shape
    if cfg is None:
        s, tensors = depthwise_conv2d_nchwc_llvm(N, C, H, W, 1, KH, KW, stride, pad, dilation)
    else:
        s, tensors = task.instantiate(cfg)
    cb = int(tensors[0].shape[4].value)
    x = rng.standard_normal((N, C, H, W)).astype("float32")
    w = rng.standard_normal((C, 1, KH, KW)).astype("float32")
    got = _run(s, tensors, [block(x, cb), pack_nchwc_depthwise_weights(w, cb)])
    assert not np.isnan(got).any()
    want = depthwise_ref(x, w, stride, pad, dilation)
    np.testing.assert_allclose(unblock(got, C), want, rtol=1e-4, atol=1e-4)
    assert not unblock(got, got.shape[1] * cb)[:, C:].any()  # lanes past C stay zero


CASES = [
    # N, C, H, W, KH, KW, stride, padding, dilation
    ((1, 16, 9, 11, 3, 3), 1, 1, 1),
    ((2, 13, 10, 7, 3, 3), 2, 1, 1),  # 13 channels: one partial block; a batch of two
    ((1, 40, 15, 13, 3, 3), 2, (0, 1, 1, 0), 1),  # blocks of 8, asymmetric padding
    ((1, 32, 12, 12, 5, 5), 1, 2, 1),
    ((1, 24, 11, 9, 3, 2), (2, 1), (1, 0, 2, 1), (1, 2)),
    ((1, 144, 14, 14, 3, 3), 2, 1, 1),
    ((1, 12, 31, 9, 3, 3), 1, 1, 1),  # 31 output rows: rows outer by default
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_template_fallback(case, rng):  # noqa: ANN001
    _case(rng, *case)


@pytest.mark.parametrize("case", CASES[:4], ids=str)
def test_template_sampled_configs(case, rng):  # noqa: ANN001
    shape, stride, pad, dilation = case
    N, C, H, W, KH, KW = shape
    task = task_of(
        "depthwise_conv2d_NCHWc.llvm", N, C, H, W, 1, KH, KW, stride, pad, dilation, "float32"
    )
    for cfg in sampled_configs(task, configs(3), seed=len(task.config_space)):
        _case(rng, shape, stride, pad, dilation, cfg, task)


@settings(max_examples=examples(10), deadline=None, derandomize=True)
@given(
    c=st.integers(1, 40),
    hw=st.tuples(st.integers(1, 12), st.integers(1, 12)),
    k=st.sampled_from([1, 2, 3, 5]),
    stride=st.integers(1, 2),
    pad=st.integers(0, 2),
    pick=st.integers(0, 10**6),
)
def test_template_random_configs(c, hw, k, stride, pad, pick):  # noqa: ANN001
    """Any legal config of the template on any small workload matches numpy."""
    h, w = hw
    if h + 2 * pad < k or w + 2 * pad < k:
        return
    task = task_of("depthwise_conv2d_NCHWc.llvm", 1, c, h, w, 1, k, k, stride, pad, 1, "float32")
    (cfg,) = sampled_configs(task, 1, seed=pick)
    _case(np.random.default_rng(pick), (1, c, h, w, k, k), stride, pad, 1, cfg, task)


def test_compute_with_bias_and_epilogue(rng):  # noqa: ANN001
    """The compute with a bias and a Clip inlined into the template's output stage."""
    x = rng.standard_normal((1, 20, 9, 11)).astype("float32")
    wt = rng.standard_normal((20, 1, 3, 3)).astype("float32")
    b = rng.standard_normal(20).astype("float32")
    X = te.placeholder((1, 2, 9, 11, 16), "float32", name="X")
    Wt = te.placeholder((2, 3, 3, 16), "float32", name="W")
    B = te.placeholder((2, 16), "float32", name="B")
    conv = depthwise_conv2d_nchwc(X, Wt, B, (2, 1), (1, 1, 1, 1), (1, 1), {"ow_bn": 4})
    six = E.const(6.0, "float32")
    out = te.compute(
        conv.shape, lambda *i: E.min_(E.max_(conv[i], E.const(0.0, "float32")), six), name="clip"
    )
    s = create_schedule(out.op)
    s[conv].compute_inline()  # the bias stage; the reduction is its input
    schedule_depthwise_nchwc(s, out, conv.op.input_tensors[0])
    bb = np.zeros(32, "float32")
    bb[:20] = b
    arrays = [block(x, 16), pack_nchwc_depthwise_weights(wt, 16), bb.reshape(2, 16)]
    got = _run(s, [X, Wt, B, out], arrays)
    want = np.clip(depthwise_ref(x, wt, (2, 1), 1, 1) + b[None, :, None, None], 0, 6)
    np.testing.assert_allclose(unblock(got, 20), want, rtol=1e-4, atol=1e-4)
    text = str(ember.lower(s, [X, Wt, B, out]))
    assert "parallel(" in text and "nchwc_pad" not in text  # the padding test is inlined


def test_errors():
    with pytest.raises(ArgumentError, match="channel multiplier of 1"):
        depthwise_conv2d_nchwc_llvm(1, 4, 8, 8, 2, 3, 3, 1, 1, 1)
    X = te.placeholder((1, 2, 8, 8, 16), "float32", name="X")
    geometry = ((1, 1), (0,) * 4, (1, 1))
    with pytest.raises(ArgumentError, match="do not fit"):
        depthwise_conv2d_nchwc(X, te.placeholder((3, 3, 3, 16), "float32"), None, *geometry)
    with pytest.raises(ArgumentError, match="output would be empty"):
        depthwise_conv2d_nchwc(X, te.placeholder((2, 9, 9, 16), "float32"), None, *geometry)
    with pytest.raises(ArgumentError, match="not \\[C, 1, KH, KW\\]"):
        pack_nchwc_depthwise_weights(np.zeros((4, 2, 3, 3), "float32"), 16)


def test_a_record_of_another_block_keeps_the_graphs_block_and_fits_registers():
    from ember.codegen_llvm.cpu_features import AVX512
    from ember.codegen_llvm.schedules.depthwise_conv2d_nchwc import DepthwiseNchwcKnobs, fit_block

    ACC_REGISTERS = AVX512.accumulators[0]  # noqa: N806 - at most 24 of 32

    tuned = DepthwiseNchwcKnobs(cb=16, ow_bn=24, outer="rows", unroll_kernel=True)
    assert fit_block(tuned, 16, "float32") is tuned
    wide = fit_block(tuned, 32, "float32")  # two registers a pixel: at most 12 pixels
    assert wide.cb == 32 and wide.ow_bn * 2 <= ACC_REGISTERS and wide.outer == "rows"


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")


def test_channel_blocks_are_outer_by_default_up_to_7_output_rows():
    from ember.codegen_llvm.schedules.depthwise_conv2d_nchwc import CHANNELS_OUTER_MAX_ROWS

    def outer(h: int, stride: int) -> str:
        task = task_of("depthwise_conv2d_NCHWc.llvm", 1, 64, h, h, 1, 3, 3, stride, 1, 1, "float32")
        knob = task.config_space.knobs["outer"]
        return knob.candidates[knob.default_index]

    assert CHANNELS_OUTER_MAX_ROWS == 7
    assert [outer(h, 1) for h in (5, 7, 8, 14, 28)] == ["channels"] * 2 + ["rows"] * 3
    assert outer(14, 2) == "channels" and outer(16, 2) == "rows"  # 7 and 8 output rows
