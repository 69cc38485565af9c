"""The depthwise_conv2d_nchw.llvm template: fallback, sampled and random configs against
numpy, on odd shapes, strides, pads, dilations and channel multipliers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules.depthwise_conv2d import depthwise_conv2d_nchw_llvm
from ember.errors import ArgumentError
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.nightly import examples
from tests.numerics import check


def _quad(p: int | tuple[int, ...]) -> tuple[int, int, int, int]:
    if isinstance(p, int):
        return (p, p, p, p)
    return (p[0], p[1], p[0], p[1]) if len(p) == 2 else p  # type: ignore[return-value]


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else v


def depthwise_ref(x: np.ndarray, w: np.ndarray, stride, padding, dilation) -> np.ndarray:  # noqa: ANN001
    """Direct loops over output channels and taps, in float64: channel o reads input
    channel o // (O // C)."""
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = _pair(stride), _pair(dilation), _quad(padding)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    O, _, KH, KW = w.shape
    m = O // x.shape[1]
    OH = (xp.shape[2] - dh * (KH - 1) - 1) // sh + 1
    OW = (xp.shape[3] - dw * (KW - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], O, OH, OW))
    for o in range(O):
        for ky in range(KH):
            for kx in range(KW):
                y0, x0 = ky * dh, kx * dw
                patch = xp[
                    :, o // m, y0 : y0 + sh * (OH - 1) + 1 : sh, x0 : x0 + sw * (OW - 1) + 1 : sw
                ]
                out[:, o] += patch * w[o, 0, ky, kx]
    return out.astype(x.dtype)


SMALL = [
    # N, C, H, W, multiplier, KH, KW, stride, padding, dilation
    (1, 13, 7, 7, 1, 3, 3, 1, 1, 1),
    (2, 5, 15, 15, 1, 3, 3, 2, 1, 1),
    (1, 4, 9, 11, 2, 3, 3, 1, 0, 2),
    (1, 3, 10, 7, 1, 3, 2, (2, 1), (1, 0, 2, 1), (1, 2)),
    (1, 6, 12, 13, 3, 5, 5, 2, 2, 1),
    (1, 7, 1, 9, 1, 1, 3, 1, (0, 1), 1),  # one output row: the flat grid
]


@pytest.mark.parametrize("case", SMALL, ids=str)
def test_fallback_small(case, rng):  # noqa: ANN001
    *shape, stride, padding, dilation = case
    s, args = depthwise_conv2d_nchw_llvm(*shape, stride, padding, dilation)
    check(s, args, lambda x, w: depthwise_ref(x, w, stride, padding, dilation), rng)


@pytest.mark.parametrize(
    "case",
    [
        (1, 32, 28, 28, 1, 3, 3, 1, 1, 1),
        (1, 96, 15, 15, 1, 3, 3, 2, 1, 1),
        (1, 96, 28, 28, 1, 3, 3, 2, 1, 1),
        (1, 32, 7, 7, 1, 3, 3, 1, 1, 1),
        (2, 13, 15, 15, 2, 3, 3, 1, 1, 2),
        (1, 8, 5, 70, 1, 3, 3, 1, 1, 1),  # a row longer than one copy vector
    ],
    ids=str,
)
def test_fallback_medium_llvm(case, rng):  # noqa: ANN001
    *shape, stride, padding, dilation = case
    s, args = depthwise_conv2d_nchw_llvm(*shape, stride, padding, dilation)
    check(
        s,
        args,
        lambda x, w: depthwise_ref(x, w, stride, padding, dilation),
        rng,
        executors=("llvm",),
    )


def test_float64(rng):  # noqa: ANN001
    s, args = depthwise_conv2d_nchw_llvm(1, 5, 9, 8, 1, 3, 3, 2, 1, 1, "float64")
    check(s, args, lambda x, w: depthwise_ref(x, w, 2, 1, 1), rng)


@pytest.mark.parametrize(
    "args", [(1, 6, 14, 14, 1, 3, 3, 1, 1, 1), (1, 4, 12, 9, 2, 3, 3, 2, 1, 1)], ids=str
)
def test_sampled_configs(args, rng):  # noqa: ANN001
    task = task_of("depthwise_conv2d_nchw.llvm", *args, "float32")
    stride, padding, dilation = args[7:]
    configs = sampled_configs(task, 6, seed=len(task.config_space))
    assert {c["rows"].val == 0 for c in configs} == {True, False}  # both layouts covered
    for cfg in configs:
        s, tensors = task.instantiate(cfg)
        check(
            s,
            tensors,
            lambda x, w: depthwise_ref(x, w, stride, padding, dilation),
            rng,
            executors=("llvm",),
        )


@settings(max_examples=examples(10), deadline=None)
@given(
    c=st.integers(1, 7),
    h=st.integers(3, 16),
    w=st.integers(3, 16),
    m=st.integers(1, 2),
    k=st.sampled_from([1, 3, 5]),
    stride=st.integers(1, 2),
    pad=st.integers(0, 2),
    dilation=st.integers(1, 2),
    pick=st.integers(0, 10**6),
)
def test_random_configs_llvm(c, h, w, m, k, stride, pad, dilation, pick):  # noqa: ANN001
    """Any legal config of any legal workload computes the convolution."""
    if (h + 2 * pad - dilation * (k - 1) - 1) < 0 or (w + 2 * pad - dilation * (k - 1) - 1) < 0:
        return
    task = task_of("depthwise_conv2d_nchw.llvm", 1, c, h, w, m, k, k, stride, pad, dilation)
    cfg = task.config_space.get(pick % len(task.config_space))
    s, args = task.instantiate(cfg)
    check(
        s,
        args,
        lambda x, wt: depthwise_ref(x, wt, stride, pad, dilation),
        np.random.default_rng(c * 100 + h),
        executors=("llvm",),
    )


def test_fallback_is_vectorized_and_parallel():
    s, args = depthwise_conv2d_nchw_llvm(1, 64, 28, 28, 1, 3, 3, 1, 1, 1)
    text = str(ember.lower(s, args))
    assert "parallel(" in text
    assert "ramp(" in text and ", 16)]" in text  # one register of lanes per row


def test_errors():
    with pytest.raises(ArgumentError, match="depthwise_conv2d_nchw.llvm: .*output would be"):
        depthwise_conv2d_nchw_llvm(1, 2, 2, 2, 1, 5, 5, 1, 0, 1)
    with pytest.raises(ArgumentError, match="channel multiplier"):
        depthwise_conv2d_nchw_llvm(1, 2, 8, 8, 0, 3, 3, 1, 1, 1)
    with pytest.raises(ArgumentError, match="stride must be a positive int"):
        depthwise_conv2d_nchw_llvm(1, 2, 8, 8, 1, 3, 3, 0, 1, 1)
