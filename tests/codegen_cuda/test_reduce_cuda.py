"""reduce.cuda: one block per row, a shared-memory tree and warp shuffles; private accesses."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ember
from ember.codegen_cuda.transform.private_access import private_key
from ember.tir import expr as E
from ember.tuner import create_task
from tests.codegen_cuda.test_cuda_build import _DropBarrier

REFS = {"sum": np.sum, "max": np.max, "min": np.min}


def _build(R, C, kind, config=None, arch="sm_80"):  # noqa: ANN001, ANN202
    task = create_task("reduce.cuda", args=(R, C, kind, "float32"), target=f"cuda -arch={arch}")
    s, args = task.instantiate(config)
    return task, ember.build(s, args, target=f"cuda -arch={arch}")


@pytest.mark.parametrize("shape,kind", [((5, 1000), "sum"), ((3, 37), "max"), ((4, 256), "min")])
def test_reduce_cuda_emulated(rng, shape, kind):
    _, mod = _build(*shape, kind)
    x = rng.uniform(-1, 1, shape).astype("float32")
    y = np.full(shape[0], np.nan, "float32")
    mod.emulate(x, y)
    np.testing.assert_allclose(y, REFS[kind](x, axis=1), rtol=1e-5, atol=1e-5)


def test_reduce_cuda_sampled_configs(rng):
    task, _ = _build(3, 300, "sum")
    x = rng.uniform(-1, 1, (3, 300)).astype("float32")
    for seed in range(3):
        cfg = task.config_space.sample(seed)
        s, args = task.instantiate(cfg)
        mod = ember.build(s, args, target="cuda")
        y = np.full(3, np.nan, "float32")
        mod.emulate(x, y)
        np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-5, atol=1e-5, err_msg=str(cfg))


@pytest.mark.parametrize("knob,barriers", [(0, 1), (2, 3)])
def test_reduce_cuda_every_barrier_is_needed(rng, knob, barriers):
    # 32 threads: shuffles only, then the warp's result is published; 128 threads: two
    # shared halving steps (128 -> 64 -> 32) before the warp finishes
    _, mod = _build(2, 200, "sum", config={"threads": knob})
    x = rng.uniform(-1, 1, (2, 200)).astype("float32")
    program = mod.program
    (kernel,) = program.kernels
    count = repr(kernel).count("barrier(")
    assert count == barriers
    for k in range(count):
        mod.program = dataclasses.replace(program, kernels=(_DropBarrier(k).visit_func(kernel),))
        with pytest.raises(ember.RaceError):
            mod.emulate(x, np.empty(2, "float32"))
    mod.program = program


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_reduce_cuda_compiles(arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    _, mod = _build(4096, 4096, "sum", arch=arch)
    for use in mod.resource_usage().values():
        assert use.local_bytes == 0 and use.shared_bytes <= 48 * 1024


def test_private_key_recognises_per_thread_elements():
    tx, ty, tx2 = E.Var("tx"), E.Var("ty"), E.Var("tx2")
    k = E.Var("k")
    threads = {tx: "threadIdx.x", ty: "threadIdx.y", tx2: "threadIdx.x"}
    block = {"x": 16, "y": 8, "z": 1}
    a = private_key(ty * 16 + tx + k * 128, threads, block)
    b = private_key(k * 128 + tx2 + ty * 16, threads, block)  # another loop's var, same index
    assert a is not None and a == b
    assert private_key(ty * 8 + tx, threads, block) is None  # threads collide (8 < 16)
    assert private_key(tx // 2 + ty * 16, threads, block) is None  # two threads per element
    assert private_key(tx + k, threads, block) is None  # the ty threads share elements


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _build_softmax(R, C, config=None, arch="sm_80"):  # noqa: ANN001, ANN202
    task = create_task("softmax.cuda", args=(R, C, "float32"), target=f"cuda -arch={arch}")
    s, args = task.instantiate(config)
    return ember.build(s, args, target=f"cuda -arch={arch}")


@pytest.mark.parametrize("shape", [(3, 37), (4, 1000), (2, 256)])
def test_softmax_cuda_emulated(rng, shape):
    mod = _build_softmax(*shape)
    x = rng.uniform(-4, 4, shape).astype("float32")
    y = np.full(shape, np.nan, "float32")
    mod.emulate(x, y)
    np.testing.assert_allclose(y, _softmax(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("knob,barriers", [(0, 2), (1, 4)])
def test_softmax_cuda_every_barrier_is_needed(rng, knob, barriers):
    mod = _build_softmax(2, 40, config={"threads": knob})
    x = rng.uniform(-4, 4, (2, 40)).astype("float32")
    program = mod.program
    (kernel,) = program.kernels
    count = repr(kernel).count("barrier(")
    assert count == barriers  # per reduction: one per shared halving step, one to publish
    for k in range(count):
        mod.program = dataclasses.replace(program, kernels=(_DropBarrier(k).visit_func(kernel),))
        with pytest.raises(ember.RaceError):
            mod.emulate(x, np.empty((2, 40), "float32"))
    mod.program = program


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_softmax_cuda_compiles(arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    mod = _build_softmax(4096, 1024, arch=arch)
    for use in mod.resource_usage().values():
        assert use.local_bytes == 0 and use.shared_bytes <= 48 * 1024


@pytest.mark.parametrize("shape", [(3, 37), (4, 1000)])
def test_layer_norm_cuda_emulated(rng, shape):
    R, C = shape
    task = create_task("layer_norm.cuda", args=(R, C, 1e-5, "float32"), target="cuda")
    s, args = task.instantiate()
    mod = ember.build(s, args, target="cuda")
    x = rng.uniform(-2, 2, shape).astype("float32") + 3.0
    g = rng.uniform(0.5, 1.5, C).astype("float32")
    b = rng.uniform(-1, 1, C).astype("float32")
    y = np.full(shape, np.nan, "float32")
    mod.emulate(x, g, b, y)
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    np.testing.assert_allclose(y, (x - mu) / np.sqrt(var + 1e-5) * g + b, rtol=1e-4, atol=1e-4)
