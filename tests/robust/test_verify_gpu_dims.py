"""verify_gpu checks each launch dimension against CUDA's own limit, not just threads per block."""

from __future__ import annotations

import pytest

import ember
from ember import te
from ember.codegen_cuda.transform.split_host_device import split_host_device
from ember.codegen_cuda.transform.verify_gpu import verify_gpu


def _kernel(shape: tuple[int, ...], tags: tuple[str, ...]):
    """One stage over ``shape``, axis ``d`` bound whole to ``tags[d]``."""
    A = te.placeholder(shape, name="A")
    B = te.compute(shape, lambda *i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    for axis, tag in zip(s[B].op.axis, tags):
        s[B].bind(axis, tag)
    (kernel,) = split_host_device(ember.lower(s, [A, B])).kernels
    return kernel


@pytest.mark.parametrize(
    ("shape", "tags", "message"),
    [
        ((2, 65536), ("threadIdx.x", "blockIdx.y"), r"gridDim.y = 65536; .* at most 65535"),
        ((2, 70000), ("threadIdx.x", "blockIdx.z"), r"gridDim.z = 70000; .* at most 65535"),
        ((65, 2), ("threadIdx.z", "threadIdx.x"), r"blockDim.z = 65; CUDA allows at most 64"),
        ((3, 1025), ("blockIdx.x", "threadIdx.y"), r"1025 threads per block \(1x1025x1\)"),
        ((3, 1025), ("blockIdx.x", "threadIdx.x"), r"1025 threads per block \(1025x1x1\)"),
    ],
)
def test_dimension_over_its_limit(shape, tags, message) -> None:
    with pytest.raises(ember.LoweringError, match=message):
        verify_gpu(_kernel(shape, tags))


@pytest.mark.parametrize(
    ("shape", "tags"),
    [
        ((2, 65535), ("threadIdx.x", "blockIdx.y")),
        ((64, 2), ("threadIdx.z", "threadIdx.x")),
        ((100000, 3), ("blockIdx.x", "threadIdx.x")),  # gridDim.x may go far past 65535
        ((1024,), ("threadIdx.y",)),
    ],
)
def test_dimension_at_or_under_its_limit(shape, tags) -> None:
    kernel = _kernel(shape, tags)
    assert verify_gpu(kernel) is kernel


def test_build_reports_the_dimension() -> None:
    A = te.placeholder((4, 70000), name="A")
    B = te.compute((4, 70000), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(s[B].op.axis[0], "threadIdx.x")
    s[B].bind(s[B].op.axis[1], "blockIdx.y")
    with pytest.raises(ember.LoweringError, match="gridDim.y = 70000"):
        ember.build(s, [A, B], target="cuda -arch=sm_80")
