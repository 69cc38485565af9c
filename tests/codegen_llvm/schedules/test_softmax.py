"""The softmax.llvm template: fallback and sampled configs against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ember.codegen_llvm.schedules.softmax import softmax_llvm
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.numerics import check


def softmax_ref(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(x.dtype)


@pytest.mark.parametrize("shape", [(5, 37), (3, 16), (4, 5), (1, 1), (2, 130)], ids=str)
def test_fallback(shape, rng):  # noqa: ANN001
    s, args = softmax_llvm(*shape)
    check(s, args, softmax_ref, rng)


def test_fallback_medium_llvm(rng):  # noqa: ANN001
    s, args = softmax_llvm(64, 1000)
    check(s, args, softmax_ref, rng, executors=("llvm",))


def test_large_inputs_are_stable(rng):  # noqa: ANN001
    """Rows of large values: without the max subtraction exp would overflow to inf."""
    import ember

    s, args = softmax_llvm(3, 20)
    x = (rng.uniform(-1, 1, size=(3, 20)) * 100 + 500).astype(np.float32)
    y = np.full((3, 20), np.nan, np.float32)
    ember.build(s, args, target="llvm")(x, y)
    np.testing.assert_allclose(y, softmax_ref(x), rtol=2e-4, atol=1e-6)


def test_sampled_configs(rng):  # noqa: ANN001
    task = task_of("softmax.llvm", 4, 45, "float32")
    for cfg in sampled_configs(task, 3, seed=2):
        s, args = task.instantiate(cfg)
        check(s, args, softmax_ref, rng)
