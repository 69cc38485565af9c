"""Tensors of vector dtypes (``float32x4``), as TVM allows in placeholders and computes.

A ``float32x4`` tensor of shape ``(n,)`` is passed as a float32 numpy array of
shape ``(n, 4)`` (TVM's NDArray maps it the same way); each element is one
vector, so arithmetic and reductions act on all lanes at once. Checked against
numpy on random data on ``llvm``, the reference interpreter and the CUDA
emulator (where the element is a ``float4``).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ArgumentError
from ember.tir import interp
from tests.numerics import assert_close, random_array

CUDA = "cuda -arch=sm_80"


def _axpy(gpu: bool):
    n = te.var("n")
    A = te.placeholder((n,), name="A", dtype="float32x4")
    B = te.placeholder((n,), name="B", dtype="float32x4")
    C = te.compute((n,), lambda i: A[i] * 2.0 + B[i], name="C")
    s = te.create_schedule(C.op)
    if gpu:
        xo, xi = s[C].split(C.op.axis[0], factor=32)
        s[C].bind(xo, te.thread_axis("blockIdx.x"))
        s[C].bind(xi, te.thread_axis("threadIdx.x"))
    return A, B, C, s


@pytest.mark.parametrize("target", ["llvm", CUDA])
def test_vector_elementwise(rng, target):
    A, B, C, s = _axpy(gpu=target != "llvm")
    assert C.dtype == "float32x4"
    mod = ember.build(s, [A, B, C], target=target)
    run = mod if target == "llvm" else mod.emulate
    for n in (1, 5, 33):
        a = random_array((n, 4), "float32", rng)
        b = random_array((n, 4), "float32", rng)
        c = np.full((n, 4), np.nan, dtype="float32")
        run(a, b, c)
        assert_close(c, a * 2 + b, "float32", f"n={n}")


def test_vector_arrays_need_the_lane_dimension(rng):
    A, B, C, s = _axpy(gpu=False)
    mod = ember.build(s, [A, B, C])
    a = random_array((5, 4), "float32", rng)
    with pytest.raises(ArgumentError, match=r"argument 'B' expects shape \(n, 4\)"):
        mod(a, random_array((5,), "float32", rng), np.zeros((5, 4), dtype="float32"))


@pytest.mark.parametrize("target", ["llvm", "interp", CUDA])
def test_vector_reduction(rng, target):
    n = te.var("n")
    A = te.placeholder((n, 7), name="A", dtype="float32x4")
    k = te.reduce_axis((0, 7), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    if target == CUDA:
        xo, xi = s[B].split(B.op.axis[0], factor=8)
        s[B].bind(xo, te.thread_axis("blockIdx.x"))
        s[B].bind(xi, te.thread_axis("threadIdx.x"))
    a = random_array((9, 7, 4), "float32", rng)
    b = np.full((9, 4), np.nan, dtype="float32")
    if target == "interp":
        interp.run(ember.lower(s, [A, B]), a, b)
    elif target == "llvm":
        ember.build(s, [A, B])(a, b)
    else:
        ember.build(s, [A, B], target=target).emulate(a, b)
    assert_close(b, a.sum(axis=1), "float32")


@pytest.mark.nvrtc
def test_vector_elements_are_float4_in_cuda():
    pytest.importorskip("cuda.bindings.nvrtc")
    A, B, C, s = _axpy(gpu=True)
    mod = ember.build(s, [A, B, C], target=CUDA)
    assert "float4" in mod.get_source()
    assert mod.compile().ptx
