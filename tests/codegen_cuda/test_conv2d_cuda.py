"""conv2d_nchw.cuda: emulated against numpy on odd shapes, every barrier needed, NVRTC limits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ember
from ember.tuner import create_task
from tests.codegen_cuda.test_cuda_build import _DropBarrier


def _reference(x, w, stride, pad):  # noqa: ANN001, ANN202
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    O, _, KH, KW = w.shape
    OH = (xp.shape[2] - KH) // stride + 1
    OW = (xp.shape[3] - KW) // stride + 1
    out = np.zeros((x.shape[0], O, OH, OW))
    for y in range(OH):
        for x_ in range(OW):
            patch = xp[:, :, y * stride : y * stride + KH, x_ * stride : x_ * stride + KW]
            out[:, :, y, x_] = np.einsum("nchw,ochw->no", patch, w)
    return out


def _build(args, arch="sm_80"):  # noqa: ANN001, ANN202
    task = create_task("conv2d_nchw.cuda", args=(*args, "float32"), target=f"cuda -arch={arch}")
    s, tensors = task.instantiate()
    return ember.build(s, tensors, target=f"cuda -arch={arch}"), tensors


CASES = [
    (1, 3, 9, 11, 5, 3, 3, 1, 1, 1),
    (1, 3, 9, 11, 5, 3, 3, 2, 1, 1),
    (2, 16, 8, 8, 12, 3, 3, 1, 1, 1),
]


@pytest.mark.parametrize("args", CASES)
def test_conv2d_cuda_emulated(rng, args):
    mod, tensors = _build(args)
    N, C, H, W, O, KH, KW, stride, pad, _ = args
    x = rng.uniform(-1, 1, (N, C, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (O, C, KH, KW)).astype("float32")
    y = np.full(tuple(int(v.value) for v in tensors[2].shape), np.nan, "float32")
    mod.emulate(x, w, y)
    np.testing.assert_allclose(y, _reference(x, w, stride, pad), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("args", "pipelined"), [(CASES[0], False), (CASES[2], True)])
def test_conv2d_cuda_every_barrier_is_needed(rng, args, pipelined):
    mod, tensors = _build(args)
    N, C, H, W, O, KH, KW = args[:7]
    x = rng.uniform(-1, 1, (N, C, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (O, C, KH, KW)).astype("float32")
    y = np.empty(tuple(int(v.value) for v in tensors[2].shape), "float32")
    program = mod.program
    (kernel,) = program.kernels
    count = repr(kernel).count("barrier(")
    # two channel blocks: pipelined (one barrier per block); one and a tail: two barriers
    assert ("async_copy" in repr(kernel)) == pipelined
    assert count == (1 if pipelined else 2)
    for k in range(count):
        mod.program = dataclasses.replace(program, kernels=(_DropBarrier(k).visit_func(kernel),))
        with pytest.raises(ember.RaceError):
            mod.emulate(x, w, y)
    mod.program = program


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_conv2d_cuda_resnet_layer_compiles(arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    mod, _ = _build((1, 64, 56, 56, 64, 3, 3, 1, 1, 1), arch)
    for use in mod.resource_usage().values():
        assert use.local_bytes == 0 and use.shared_bytes <= 48 * 1024
