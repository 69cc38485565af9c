"""The batch_matmul.llvm template, and the matmul/dense templates whose GEMM schedule it shares."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen_llvm.schedules.batch_matmul import batch_matmul_llvm
from ember.codegen_llvm.schedules.matmul import dense_llvm, matmul_llvm
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.numerics import check


def bmm_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)


@pytest.mark.parametrize(
    "shape", [(3, 17, 13, 9), (2, 5, 70, 33), (1, 1, 1, 1), (4, 8, 16, 3)], ids=str
)
def test_fallback(shape, rng):  # noqa: ANN001
    s, args = batch_matmul_llvm(*shape)
    check(s, args, bmm_ref, rng)


def test_fallback_medium_llvm(rng):  # noqa: ANN001
    s, args = batch_matmul_llvm(6, 64, 100, 72)
    check(s, args, bmm_ref, rng, executors=("llvm",))


def test_sampled_configs(rng):  # noqa: ANN001
    task = task_of("batch_matmul.llvm", 2, 11, 37, 10, "float32")
    for cfg in sampled_configs(task, 4, seed=4):
        s, args = task.instantiate(cfg)
        check(s, args, bmm_ref, rng)


def test_batch_is_in_the_parallel_loop():
    s, args = batch_matmul_llvm(8, 16, 64, 16)
    text = str(ember.lower(s, args))
    assert "parallel(" in text and ", 1, 64)]" in text


@pytest.mark.parametrize("shape", [(17, 35, 13), (4, 64, 8)], ids=str)
def test_matmul_and_dense_fallback(shape, rng):  # noqa: ANN001
    s, args = matmul_llvm(*shape)
    check(s, args, bmm_ref, rng)
    s, args = dense_llvm(*shape)
    check(s, args, lambda x, w: bmm_ref(x, w.T), rng)
