"""The conv2d_nchw.llvm template: fallback and sampled configs against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules.conv2d import conv2d_nchw_llvm
from ember.errors import ArgumentError
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.nightly import configs, examples
from tests.numerics import check


def _quad(p: int | tuple[int, ...]) -> tuple[int, int, int, int]:
    if isinstance(p, int):
        return (p, p, p, p)
    return (p[0], p[1], p[0], p[1]) if len(p) == 2 else p  # type: ignore[return-value]


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else v


def conv_ref(x: np.ndarray, w: np.ndarray, stride, padding, dilation) -> np.ndarray:  # noqa: ANN001
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = _pair(stride), _pair(dilation), _quad(padding)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    KH, KW = w.shape[2:]
    OH = (xp.shape[2] - dh * (KH - 1) - 1) // sh + 1
    OW = (xp.shape[3] - dw * (KW - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], w.shape[0], OH, OW))
    for ky in range(KH):
        for kx in range(KW):
            y0, x0 = ky * dh, kx * dw
            patch = xp[:, :, y0 : y0 + sh * (OH - 1) + 1 : sh, x0 : x0 + sw * (OW - 1) + 1 : sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx])
    return out.astype(x.dtype)


SMALL = [
    # N, C, H, W, O, KH, KW, stride, padding, dilation
    (1, 3, 7, 9, 5, 3, 3, 2, 1, 1),
    (2, 4, 8, 8, 20, 3, 3, 1, 1, 1),
    (1, 3, 9, 11, 7, 3, 3, 1, 0, 2),
    (1, 2, 10, 7, 3, 3, 2, (2, 1), (1, 0, 2, 1), (1, 2)),
    (1, 5, 6, 6, 13, 1, 1, 1, 0, 1),
    (1, 4, 12, 13, 9, 5, 5, 2, 2, 1),
]


@pytest.mark.parametrize("case", SMALL, ids=str)
def test_fallback_small(case, rng):  # noqa: ANN001
    *shape, stride, padding, dilation = case
    s, args = conv2d_nchw_llvm(*shape, stride, padding, dilation)
    check(s, args, lambda x, w: conv_ref(x, w, stride, padding, dilation), rng)


@pytest.mark.parametrize(
    "case",
    [
        (1, 16, 28, 28, 32, 3, 3, 1, 1, 1),
        (2, 8, 23, 19, 24, 3, 3, 2, 1, 1),
        (1, 2, 3, 67, 3, 1, 1, 1, 0, 1),  # a row longer than one copy vector, prime width
    ],
    ids=str,
)
def test_fallback_medium_llvm(case, rng):  # noqa: ANN001
    *shape, stride, padding, dilation = case
    s, args = conv2d_nchw_llvm(*shape, stride, padding, dilation)
    check(s, args, lambda x, w: conv_ref(x, w, stride, padding, dilation), rng, executors=("llvm",))


def test_float64(rng):  # noqa: ANN001
    s, args = conv2d_nchw_llvm(1, 3, 7, 9, 5, 3, 3, 2, 1, 1, "float64")
    check(s, args, lambda x, w: conv_ref(x, w, 2, 1, 1), rng)


@pytest.mark.parametrize(
    "args", [(1, 3, 10, 9, 10, 3, 3, 1, 1, 1), (1, 4, 9, 8, 6, 3, 3, 2, 1, 1)], ids=str
)
def test_sampled_configs(args, rng):  # noqa: ANN001
    task = task_of("conv2d_nchw.llvm", *args, "float32")
    stride, padding, dilation = args[7:]
    for cfg in sampled_configs(task, configs(4), seed=len(task.config_space)):
        s, tensors = task.instantiate(cfg)
        check(s, tensors, lambda x, w: conv_ref(x, w, stride, padding, dilation), rng)


@settings(max_examples=examples(8), deadline=None)
@given(
    c=st.integers(1, 4),
    h=st.integers(3, 9),
    w=st.integers(3, 9),
    o=st.integers(1, 9),
    k=st.sampled_from([1, 2, 3]),
    stride=st.integers(1, 2),
    pad=st.integers(0, 2),
    dilation=st.integers(1, 2),
)
def test_random_shapes_llvm(c, h, w, o, k, stride, pad, dilation):  # noqa: ANN001
    if (h + 2 * pad - dilation * (k - 1) - 1) < 0 or (w + 2 * pad - dilation * (k - 1) - 1) < 0:
        return
    s, args = conv2d_nchw_llvm(1, c, h, w, o, k, k, stride, pad, dilation)
    check(
        s,
        args,
        lambda x, wt: conv_ref(x, wt, stride, pad, dilation),
        np.random.default_rng(c * 100 + h),
        executors=("llvm",),
    )


def test_fallback_is_vectorized_and_parallel():
    s, args = conv2d_nchw_llvm(1, 64, 14, 14, 64, 3, 3, 1, 1, 1)
    text = str(ember.lower(s, args))
    assert "parallel(" in text
    assert ", 1, 32)]" in text  # the accumulator tile: 32-lane vectors


def test_errors():
    with pytest.raises(ArgumentError, match="output would be"):
        conv2d_nchw_llvm(1, 2, 2, 2, 3, 5, 5, 1, 0, 1)
    with pytest.raises(ArgumentError, match="stride must be a positive int"):
        conv2d_nchw_llvm(1, 2, 8, 8, 3, 3, 3, 0, 1, 1)
    with pytest.raises(ArgumentError, match="padding must be"):
        conv2d_nchw_llvm(1, 2, 8, 8, 3, 3, 3, 1, (1, 2, 3), 1)


# 1x1, stride 1, no padding: row blocks of whole vector tiles (or a short power-of-two tail)
# read X in place; the rest go through the flat copy. (N, C, H, W, O, config, in place)
POINTWISE = [
    (1, 9, 8, 8, 13, None, True),  # 64 positions: two whole 32-lane tiles
    (2, 7, 12, 4, 6, {"oc_bn": 4, "vec": 16, "rows": 12}, True),  # 48 = 3 tiles, batch of 2
    (1, 5, 14, 14, 11, {"oc_bn": 4, "vec": 32, "rows": 14}, True),  # 6 tiles + 4-lane tail
    (1, 6, 6, 12, 7, {"oc_bn": 6, "vec": 16, "rows": 2}, True),  # blocks: a tile + a tail of 8
    (1, 3, 7, 7, 5, None, False),  # 49 positions: a 17-lane tail, so the flat copy
    (1, 3, 7, 7, 5, {"oc_bn": 4, "vec": 16, "rows": 7}, False),  # a 1-lane tail: the copy
]


def _config(task, want):  # noqa: ANN001, ANN202
    space = task.config_space
    for i in range(len(space)):
        cfg = space.get(i)
        if all(cfg[k].val == v for k, v in want.items()):
            return cfg
    raise AssertionError(f"no config {want}")


@pytest.mark.parametrize("case", POINTWISE, ids=str)
def test_pointwise_reads_input_in_place(case, rng):  # noqa: ANN001
    N, C, H, W, O, want, in_place = case
    task = task_of("conv2d_nchw.llvm", N, C, H, W, O, 1, 1, 1, 0, 1, "float32")
    cfg = None if want is None else _config(task, want)
    s, args = task.instantiate(cfg)
    assert ("X_flat" not in str(ember.lower(s, args))) == in_place
    check(s, args, lambda x, w: conv_ref(x, w, 1, 0, 1), rng, executors=("llvm",))


@settings(max_examples=examples(10), deadline=None)
@given(
    n=st.integers(1, 2),
    c=st.integers(1, 12),
    h=st.integers(1, 16),
    w=st.integers(1, 16),
    o=st.integers(1, 20),
    pick=st.integers(0, 10_000),
)
def test_random_pointwise_configs_llvm(n, c, h, w, o, pick):  # noqa: ANN001
    task = task_of("conv2d_nchw.llvm", n, c, h, w, o, 1, 1, 1, 0, 1, "float32")
    space = task.config_space
    cfg = space.get(pick % len(space))
    if not cfg.is_valid():
        return
    s, args = task.instantiate(cfg)
    check(s, args, lambda x, wt: conv_ref(x, wt, 1, 0, 1), np.random.default_rng(pick),
          executors=("llvm",))  # fmt: skip


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
