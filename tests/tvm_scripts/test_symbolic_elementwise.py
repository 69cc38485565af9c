"""Symbolic-shape elementwise programs as TVM's "Get started with tensor expressions"
tutorial writes them: ``n = te.var("n")``, a vector add split by a factor and bound
to blocks and threads (CUDA) or parallelised and vectorised (CPU), built once and
called with many sizes, including 1, primes and sizes that are not multiples of
the factor. Also a 2-D shape with two variables and ``n`` passed explicitly.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember as tvm
from ember import te
from tests.nightly import examples
from tests.tvm_scripts.common import CUDA

SIZES = (1, 3, 64, 65, 127, 1000, 1031)


def _vector_add():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    return n, A, B, C


def _gpu_add(factor: int = 64, explicit_n: bool = False):
    n, A, B, C = _vector_add()
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=factor)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    args = [A, B, C, n] if explicit_n else [A, B, C]
    return tvm.build(s, args, target=CUDA, name="myadd")


def _cpu_add(factor: int = 4, explicit_n: bool = False):
    n, A, B, C = _vector_add()
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=factor)
    s[C].parallel(outer)
    s[C].vectorize(inner)
    args = [A, B, C, n] if explicit_n else [A, B, C]
    return tvm.build(s, args, target="llvm", name="myadd")


def _add_inputs(rng, size):
    a = rng.uniform(-1, 1, size).astype("float32")
    b = rng.uniform(-1, 1, size).astype("float32")
    return a, b, np.full(size, np.nan, "float32")


@pytest.mark.parametrize("explicit_n", [False, True])
def test_vector_add_cuda_emulated_many_sizes(rng, explicit_n):
    fadd = _gpu_add(explicit_n=explicit_n)
    for size in SIZES:
        a, b, c = _add_inputs(rng, size)
        fadd.emulate(a, b, c, *([size] if explicit_n else []))
        np.testing.assert_allclose(c, a + b, rtol=1e-6, err_msg=f"n={size}")


@pytest.mark.parametrize("explicit_n", [False, True])
def test_vector_add_llvm_many_sizes(rng, explicit_n):
    fadd = _cpu_add(explicit_n=explicit_n)
    assert fadd.entry_name == "myadd"
    for size in SIZES:
        a, b, c = _add_inputs(rng, size)
        fadd(a, b, c, *([size] if explicit_n else []))
        np.testing.assert_allclose(c, a + b, rtol=1e-6, err_msg=f"n={size}")


@settings(max_examples=examples(25), deadline=None)
@given(size=st.integers(1, 300), factor=st.sampled_from([1, 3, 4, 32, 64]), seed=st.integers(0, 9))
def test_vector_add_any_size_and_factor(size, factor, seed):
    rng = np.random.default_rng(seed)
    a, b, c = _add_inputs(rng, size)
    _cpu_add(factor)(a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)
    c[:] = np.nan
    _gpu_add(factor).emulate(a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


def _scaled_2d(target: str):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((m,), name="B")
    C = te.compute((n, m), lambda i, j: te.exp(A[i, j]) * B[j] - 0.5, name="C")
    s = te.create_schedule(C.op)
    if target == "llvm":
        jo, ji = s[C].split(C.op.axis[1], factor=8)
        s[C].vectorize(ji)
    else:
        fused = s[C].fuse(*C.op.axis)
        bx, tx = s[C].split(fused, factor=32)
        s[C].bind(bx, te.thread_axis("blockIdx.x"))
        s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return tvm.build(s, [A, B, C], target=target)


@pytest.mark.parametrize("target", ["llvm", CUDA])
def test_two_symbolic_dims(rng, target):
    f = _scaled_2d(target)
    run = f if target == "llvm" else f.emulate
    for n, m in ((1, 1), (3, 17), (16, 8), (7, 33)):
        a = rng.uniform(-1, 1, (n, m)).astype("float32")
        b = rng.uniform(-1, 1, m).astype("float32")
        c = np.full((n, m), np.nan, "float32")
        run(a, b, c)
        np.testing.assert_allclose(c, np.exp(a) * b - 0.5, rtol=1e-5, atol=1e-6)


def test_mismatched_sizes_are_refused(rng):
    """``n`` is one variable: arrays that disagree on it are an argument error."""
    fadd = _cpu_add()
    a, b, _ = _add_inputs(rng, 8)
    with pytest.raises(tvm.ArgumentError):
        fadd(a, b, np.zeros(9, "float32"))
    with pytest.raises(tvm.ArgumentError):
        _gpu_add().emulate(a, b, np.zeros(9, "float32"))
