"""TVM's scan tutorial ("Scan and Recurrent Kernel") with only the import changed: a
cumulative sum over symbolic ``m, n`` bound to blocks and threads as the tutorial does,
its multi-stage update, and the same compute on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te
from tests.tvm_scripts.common import CUDA, empty_like


def _tutorial_cumsum():
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
    s_scan = tvm.te.scan(s_init, s_update, s_state, inputs=[X])
    return X, s_init, s_update, s_scan


def test_tutorial_cumsum_cuda_emulated():
    X, s_init, s_update, s_scan = _tutorial_cumsum()
    s = te.create_schedule(s_scan.op)
    num_thread = 256
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis("threadIdx.x")
    xo, xi = s[s_init].split(s_init.op.axis[1], factor=num_thread)
    s[s_init].bind(xo, block_x)
    s[s_init].bind(xi, thread_x)
    xo, xi = s[s_update].split(s_update.op.axis[1], factor=num_thread)
    s[s_update].bind(xo, block_x)
    s[s_update].bind(xi, thread_x)
    text = str(tvm.lower(s, [X, s_scan], simple_mode=True))
    assert "scan.idx" in text
    fscan = tvm.build(s, [X, s_scan], CUDA, name="myscan")
    for m, n in [(10, 1024), (7, 300), (1, 5)]:
        a_np = np.random.uniform(size=(m, n)).astype(s_scan.dtype)
        b = empty_like(s_scan, (m, n))
        fscan.emulate(a_np, b)
        np.testing.assert_allclose(b, np.cumsum(a_np, axis=0), rtol=1e-5)


@pytest.mark.parametrize("shape", [(10, 1024), (3, 17)])
def test_tutorial_cumsum_llvm(shape):
    X, s_init, s_update, s_scan = _tutorial_cumsum()
    s = te.create_schedule(s_scan.op)
    fscan = tvm.build(s, [X, s_scan], "llvm", name="myscan")
    a_np = np.random.uniform(size=shape).astype(s_scan.dtype)
    b = tvm.nd.array(empty_like(s_scan, shape))
    fscan(tvm.nd.array(a_np), b)
    np.testing.assert_allclose(b.numpy(), np.cumsum(a_np, axis=0), rtol=1e-5)


def test_tutorial_multi_stage_update():
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update_s1 = te.compute((m, n), lambda t, i: s_state[t - 1, i] * 2, name="s1")
    s_update_s2 = te.compute((m, n), lambda t, i: s_update_s1[t, i] + X[t, i], name="s2")
    s_scan = tvm.te.scan(s_init, s_update_s2, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    xo, xi = s[s_update_s2].split(s_update_s2.op.axis[1], factor=32)
    s[s_update_s1].compute_at(s[s_update_s2], xo)
    f = tvm.build(s, [X, s_scan], "llvm")
    a_np = np.random.uniform(-1, 1, size=(6, 45)).astype("float32")
    b = empty_like(s_scan, a_np.shape)
    f(a_np, b)
    want = a_np.astype(np.float64).copy()
    for t in range(1, 6):
        want[t] = want[t - 1] * 2 + a_np[t]
    np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-5)
