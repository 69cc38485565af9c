"""conv2d_nchw_gemm.cuda: implicit GEMM, emulated against numpy; zero-filled async copies."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.tuner import create_task
from tests.nightly import sample_in_ci


def _reference(x, w, stride, pad, dil):  # noqa: ANN001, ANN202
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    O, _, KH, KW = w.shape
    OH = (xp.shape[2] - dil * (KH - 1) - 1) // stride + 1
    OW = (xp.shape[3] - dil * (KW - 1) - 1) // stride + 1
    out = np.zeros((x.shape[0], O, OH, OW))
    for y in range(OH):
        for x_ in range(OW):
            rows = slice(y * stride, y * stride + dil * (KH - 1) + 1, dil)
            cols = slice(x_ * stride, x_ * stride + dil * (KW - 1) + 1, dil)
            out[:, :, y, x_] = np.einsum("nchw,ochw->no", xp[:, :, rows, cols], w)
    return out


def _build(args, arch="sm_80"):  # noqa: ANN001, ANN202
    target = f"cuda -arch={arch}"
    task = create_task("conv2d_nchw_gemm.cuda", args=(*args, "float32"), target=target)
    s, tensors = task.instantiate()
    return ember.build(s, tensors, target=target, name="conv"), tensors


CASES = [
    (1, 3, 9, 11, 5, 3, 3, 1, 1, 1),
    (2, 16, 8, 8, 12, 3, 3, 1, 1, 1),
    (1, 30, 13, 13, 20, 3, 3, 2, 1, 1),
    (1, 8, 10, 10, 16, 3, 3, 1, 0, 2),  # dilation
    (2, 5, 7, 9, 70, 1, 1, 1, 0, 1),  # 1x1: a plain GEMM per image
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_75"])
@pytest.mark.parametrize("args", CASES)
def test_conv2d_gemm_matches_numpy(rng, args, arch):
    sample_in_ci(args, arch)
    mod, tensors = _build(args, arch)
    N, C, H, W, O, KH, KW, stride, pad, dil = args
    x = rng.uniform(-1, 1, (N, C, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (O, C, KH, KW)).astype("float32")
    y = np.full(tuple(int(v.value) for v in tensors[2].shape), np.nan, "float32")
    mod.emulate(x, w, y)
    np.testing.assert_allclose(y, _reference(x, w, stride, pad, dil), rtol=1e-4, atol=1e-4)


def test_padding_is_zero_filled_by_the_async_copy():
    mod, _ = _build((1, 30, 13, 13, 20, 3, 3, 2, 1, 1))
    (kernel,) = mod.program.kernels
    text = repr(kernel)
    assert "async_copy(im2col[" in text and "select(" in text  # the gather, padding and all
    assert "async_copy(wcol[" in text
    source = mod.get_source("cuda")
    assert "ember_cp_async_zfill_4(" in source and "? 4u : 0u" in source


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_conv2d_gemm_compiles(arch):
    mod, _ = _build((1, 64, 56, 56, 64, 3, 3, 1, 1, 1), arch)
    usage = mod.resource_usage()["conv_kernel"]
    assert usage.local_bytes == 0 and usage.spill_bytes == 0
    ptx = mod.get_source("ptx")
    assert "cp.async.ca.shared.global" in ptx
