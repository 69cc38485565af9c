"""GPU templates: NVRTC builds for sm_80 and sm_90, resource limits, emulated numerics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ember
from ember.tir.topi.elementwise import elementwise_chain_numpy
from ember.tuner import create_task
from tests.codegen_cuda.test_cuda_build import _DropBarrier
from tests.nightly import sample_in_ci


def _build(name: str, args: tuple, arch: str = "sm_80", config=None):  # noqa: ANN001
    task = create_task(name, args=args, target=f"cuda -arch={arch}")
    s, tensors = task.instantiate(config)
    return task, ember.build(s, tensors, target=f"cuda -arch={arch}", name=name.split(".")[0])


@pytest.mark.parametrize("shape", [(64, 64, 32), (70, 50, 33), (128, 96, 40)])
def test_matmul_cuda_fallback_emulated(rng, shape):
    M, N, K = shape
    _, mod = _build("matmul.cuda", (M, N, K, "float32"))
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    mod.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_cuda_sampled_configs_emulated(rng):
    M, N, K = 48, 40, 24
    task = create_task("matmul.cuda", args=(M, N, K, "float32"), target="cuda")
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    for seed in range(4):
        cfg = task.config_space.sample(seed)
        s, tensors = task.instantiate(cfg)
        mod = ember.build(s, tensors, target="cuda")
        c = np.full((M, N), np.nan, "float32")
        mod.emulate(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


def test_matmul_cuda_every_barrier_is_needed(rng):
    _, mod = _build("matmul.cuda", (64, 64, 32, "float32"))
    a = rng.uniform(-1, 1, (64, 32)).astype("float32")
    b = rng.uniform(-1, 1, (32, 64)).astype("float32")
    program = mod.program
    (kernel,) = program.kernels
    count = repr(kernel).count("barrier(")
    assert count >= 1  # one per pipelined K iteration (test_pipeline.py covers stages)
    for k in range(count):
        mod.program = dataclasses.replace(program, kernels=(_DropBarrier(k).visit_func(kernel),))
        with pytest.raises(ember.RaceError):
            mod.emulate(a, b, np.empty((64, 64), "float32"))
    mod.program = program


@pytest.mark.parametrize("shape", [(4, 100), (33, 257)])
def test_elementwise_chain_cuda_emulated(rng, shape):
    _, mod = _build("elementwise_chain.cuda", (*shape, "float32"))
    x = rng.uniform(-2, 2, shape).astype("float32")
    bias = rng.uniform(-1, 1, shape[1]).astype("float32")
    y = np.full(shape, np.nan, "float32")
    mod.emulate(x, bias, y)
    np.testing.assert_allclose(y, elementwise_chain_numpy(x, bias), rtol=1e-5, atol=1e-5)


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize(
    "name,args",
    [
        ("matmul.cuda", (1024, 1024, 1024, "float32")),
        ("elementwise_chain.cuda", (512, 768, "float32")),
    ],
)
def test_templates_compile_within_limits(arch, name, args):
    pytest.importorskip("cuda.bindings.nvrtc")
    _, mod = _build(name, args, arch)
    usage = mod.resource_usage()
    assert usage, "no kernel reported"
    for u in usage.values():
        assert u.registers <= 255 and u.local_bytes == 0, u  # no spills
        assert u.shared_bytes <= 48 * 1024


@pytest.mark.parametrize("shape", [(3, 17, 13, 9), (2, 64, 64, 32)])
def test_batch_matmul_cuda_emulated(rng, shape):
    Bt, M, N, K = shape
    _, mod = _build("batch_matmul.cuda", (Bt, M, N, K, "float32"))
    a = rng.uniform(-1, 1, (Bt, M, K)).astype("float32")
    b = rng.uniform(-1, 1, (Bt, K, N)).astype("float32")
    c = np.full((Bt, M, N), np.nan, "float32")
    mod.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert mod.kernels[0].attr("launch")[0][2] == Bt


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_batch_matmul_cuda_compiles(arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    _, mod = _build("batch_matmul.cuda", (12, 128, 128, 64, "float32"), arch)
    for use in mod.resource_usage().values():
        assert use.local_bytes == 0 and use.shared_bytes <= 48 * 1024


ODD_SHAPES = [
    ("matmul.cuda", (70, 50, 33)),
    ("matmul.cuda", (1000, 1000, 1000)),
    ("batch_matmul.cuda", (3, 70, 50, 33)),
    ("conv2d_nchw.cuda", (1, 30, 13, 13, 20, 3, 3, 2, 1, 1)),
    ("conv2d_nchw_gemm.cuda", (1, 30, 13, 13, 20, 3, 3, 2, 1, 1)),
    ("conv2d_nchw_gemm.cuda", (1, 64, 56, 56, 64, 3, 3, 1, 1, 1)),
    ("depthwise_conv2d_nchw.cuda", (1, 30, 13, 13, 3, 3, 1, 1)),
    ("pool2d.cuda", (1, 30, 13, 13, (3, 3), (2, 2), 1, "max")),
    ("reduce.cuda", (37, 1000, "sum")),
    ("softmax.cuda", (37, 1000)),
    ("layer_norm.cuda", (37, 1000, 1e-5)),
    ("elementwise_chain.cuda", (37, 1000)),
]


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize(("name", "args"), ODD_SHAPES)
def test_edge_tiles_keep_registers_out_of_local_memory(name, args, arch):
    sample_in_ci(name, args, arch)
    # an edge tile computes its whole register tile and guards only the stores: a loop
    # with a data-dependent trip count would move the tile to (slow) local memory
    _, mod = _build(name, (*args, "float32"), arch)
    for kernel, usage in mod.resource_usage().items():
        assert usage.local_bytes == 0 and usage.spill_bytes == 0, (kernel, usage)
