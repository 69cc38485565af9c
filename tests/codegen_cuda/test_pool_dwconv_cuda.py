"""pool2d.cuda and depthwise_conv2d_nchw.cuda: emulated against numpy, NVRTC limits."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.tuner import create_task


def _build(name: str, args: tuple, arch: str = "sm_80"):  # noqa: ANN202
    task = create_task(name, args=args, target=f"cuda -arch={arch}")
    s, tensors = task.instantiate()
    return ember.build(s, tensors, target=f"cuda -arch={arch}"), tensors


def _pool_ref(x, k, st, pad, kind):  # noqa: ANN001, ANN202
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    OH = (xp.shape[2] - k) // st + 1
    OW = (xp.shape[3] - k) // st + 1
    out = np.empty(x.shape[:2] + (OH, OW))
    for y in range(OH):
        for x_ in range(OW):
            win = xp[:, :, y * st : y * st + k, x_ * st : x_ * st + k]
            out[:, :, y, x_] = win.max(axis=(2, 3)) if kind == "max" else win.mean(axis=(2, 3))
    return out


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("k,st,pad", [(3, 2, 1), (2, 2, 0), (3, 1, 1)])
def test_pool2d_cuda_emulated(rng, kind, k, st, pad):
    mod, tensors = _build("pool2d.cuda", (1, 3, 9, 11, (k, k), (st, st), pad, kind, "float32"))
    x = rng.uniform(-1, 1, (1, 3, 9, 11)).astype("float32")
    y = np.full(tuple(int(v.value) for v in tensors[1].shape), np.nan, "float32")
    mod.emulate(x, y)
    np.testing.assert_allclose(y, _pool_ref(x, k, st, pad, kind), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("st,pad", [(1, 1), (2, 1), (1, 0)])
def test_depthwise_conv2d_cuda_emulated(rng, st, pad):
    mod, tensors = _build("depthwise_conv2d_nchw.cuda", (2, 5, 9, 11, 3, 3, st, pad, "float32"))
    x = rng.uniform(-1, 1, (2, 5, 9, 11)).astype("float32")
    w = rng.uniform(-1, 1, (5, 1, 3, 3)).astype("float32")
    y = np.full(tuple(int(v.value) for v in tensors[2].shape), np.nan, "float32")
    mod.emulate(x, w, y)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH, OW = y.shape[2:]
    ref = np.zeros(y.shape)
    for ky in range(3):
        for kx in range(3):
            win = xp[:, :, ky : ky + st * (OH - 1) + 1 : st, kx : kx + st * (OW - 1) + 1 : st]
            ref += win * w[None, :, 0, ky, kx, None, None]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_pool_and_depthwise_compile_without_spills(arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    for name, args in [
        ("pool2d.cuda", (1, 64, 112, 112, (3, 3), (2, 2), 1, "max", "float32")),
        ("depthwise_conv2d_nchw.cuda", (1, 32, 112, 112, 3, 3, 1, 1, "float32")),
    ]:
        mod, _ = _build(name, args, arch)
        for use in mod.resource_usage().values():
            assert use.local_bytes == 0, (name, use)
