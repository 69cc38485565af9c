"""Every CUDA template, random shapes and random configs, emulated against the CPU build.

Each case draws a workload (odd and non-divisible sizes included), a config
sampled from the template's space and an architecture (sm_75 prefetches through
registers, sm_80 and sm_90 copy with cp.async), builds it for CUDA, runs it through the SIMT
emulator (race and bounds checks on) on random inputs, and compares with the
same tensor expressions built for the CPU with a plain schedule (the CPU path is
itself checked against numpy in tests/codegen_llvm), or with numpy for the row
reductions, whose warp shuffles have no CPU form. A config the GPU cannot run
(``verify_gpu`` says so at build time) is not an error, just not a sample.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.tuner import create_task
from tests.nightly import examples

small = st.integers(1, 24)
rows = st.integers(1, 40)

# N, C, H, W, O, KH, KW, stride, padding, dilation
conv2d = st.tuples(
    st.integers(1, 2), st.integers(1, 9), st.integers(3, 11), st.integers(3, 11),
    st.integers(1, 9), st.sampled_from([1, 3]), st.sampled_from([1, 3]),
    st.sampled_from([1, 2]), st.sampled_from([0, 1]), st.sampled_from([1, 2]),
)  # fmt: skip

WORKLOADS = {
    "matmul.cuda": st.tuples(st.integers(1, 70), st.integers(1, 70), st.integers(1, 70)),
    "batch_matmul.cuda": st.tuples(st.integers(1, 3), small, small, st.integers(1, 40)),
    "conv2d_nchw.cuda": conv2d,
    "conv2d_nchw_gemm.cuda": conv2d,
    "depthwise_conv2d_nchw.cuda": st.tuples(
        st.integers(1, 2),
        st.integers(1, 6),
        st.integers(3, 12),
        st.integers(3, 12),
        st.sampled_from([1, 3]),
        st.sampled_from([1, 3]),
        st.sampled_from([1, 2]),
        st.sampled_from([0, 1]),
    ),  # fmt: skip
    "pool2d.cuda": st.tuples(
        st.integers(1, 2),
        st.integers(1, 5),
        st.integers(4, 12),
        st.integers(4, 12),
        st.sampled_from([(2, 2), (3, 3)]),
        st.sampled_from([(1, 1), (2, 2)]),
        st.sampled_from([0, 1]),
        st.sampled_from(["max", "avg"]),
    ),  # fmt: skip
    "reduce.cuda": st.tuples(rows, st.integers(1, 300), st.sampled_from(["sum", "max", "min"])),
    "softmax.cuda": st.tuples(rows, st.integers(1, 300)),
    "layer_norm.cuda": st.tuples(rows, st.integers(1, 300), st.just(1e-5)),
    "elementwise_chain.cuda": st.tuples(rows, st.integers(1, 300)),
}


def _valid(name: str, args: tuple) -> bool:
    if name == "pool2d.cuda":
        _, _, H, W, (kh, kw), _, pad, _ = args
        return pad <= kh // 2 and H + 2 * pad >= kh and W + 2 * pad >= kw
    if name.startswith("conv2d"):
        _, _, H, W, _, KH, KW, _, pad, dil = args
        return min(H, W) + 2 * pad > dil * (max(KH, KW) - 1)
    if name == "depthwise_conv2d_nchw.cuda":
        return args[2] + 2 * args[-1] >= args[4]
    return True


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * gamma + beta


# The row reductions end in warp shuffles, which only GPU code has: numpy is their reference.
NUMPY = {
    "reduce.cuda": lambda args, x: getattr(np, args[2])(x, axis=1),
    "softmax.cuda": lambda args, x: _softmax(x),
    "layer_norm.cuda": lambda args, x, g, b: _layer_norm(x, g, b),
}


def _reference(name: str, args: tuple, tensors: list, inputs: list[np.ndarray]) -> np.ndarray:
    if name in NUMPY:
        return NUMPY[name](args, *inputs)
    out = tensors[-1]
    s = te.create_schedule(out.op)
    mod = ember.build(s, tensors, target="llvm")
    got = np.full(tuple(int(d.value) for d in out.shape), np.nan, out.dtype)
    mod(*inputs, got)
    return got


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_template_property(name):
    @settings(
        max_examples=examples(10),
        deadline=None,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    @given(
        args=WORKLOADS[name],
        seed=st.integers(0, 2**16),
        arch=st.sampled_from(["sm_75", "sm_80", "sm_90"]),
    )
    def run(args, seed, arch):
        assume(_valid(name, args))
        task = create_task(name, args=(*args, "float32"), target=f"cuda -arch={arch}")
        config = task.config_space.sample(seed)
        s, tensors = task.instantiate(config)
        try:
            mod = ember.build(s, tensors, target=f"cuda -arch={arch}")
        except ember.LoweringError as e:
            # verify_gpu turning down a config too big for the architecture is its job
            too_big = ("threads per block", "shared memory per block", "local memory per thread")
            assume(not any(words in str(e) for words in too_big))
            raise
        rng = np.random.default_rng(seed)
        inputs = [
            rng.uniform(-1, 1, tuple(int(d.value) for d in t.shape)).astype("float32")
            for t in tensors[:-1]
        ]
        out = np.full(tuple(int(d.value) for d in tensors[-1].shape), np.nan, "float32")
        mod.emulate(*inputs, out)
        want = _reference(name, args, tensors, inputs)
        np.testing.assert_allclose(
            out, want, rtol=2e-4, atol=2e-4, err_msg=f"{args} {config} {arch}"
        )

    run()
