"""The layer_norm.llvm template: fallback and sampled configs against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ember.codegen_llvm.schedules.layer_norm import layer_norm_llvm
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.numerics import check


def layer_norm_ref(eps: float):  # noqa: ANN201
    def ref(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=1, keepdims=True)
        var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
        return ((x64 - mean) / np.sqrt(var + eps) * gamma + beta).astype(x.dtype)

    return ref


@pytest.mark.parametrize("shape", [(5, 37), (3, 16), (4, 5), (2, 130)], ids=str)
def test_fallback(shape, rng):  # noqa: ANN001
    s, args = layer_norm_llvm(*shape)
    check(s, args, layer_norm_ref(1e-5), rng)


def test_fallback_medium_llvm(rng):  # noqa: ANN001
    s, args = layer_norm_llvm(64, 768, 1e-6)
    check(s, args, layer_norm_ref(1e-6), rng, executors=("llvm",))


def test_large_mean(rng):  # noqa: ANN001
    """Rows far from zero: the two-pass variance keeps its accuracy."""
    import ember

    s, args = layer_norm_llvm(3, 50)
    x = (rng.uniform(-1, 1, size=(3, 50)) + 1000).astype(np.float32)
    g, b = rng.uniform(-1, 1, size=(2, 50)).astype(np.float32)
    y = np.full((3, 50), np.nan, np.float32)
    ember.build(s, args, target="llvm")(x, g, b, y)
    np.testing.assert_allclose(y, layer_norm_ref(1e-5)(x, g, b), rtol=1e-3, atol=2e-3)


def test_sampled_configs(rng):  # noqa: ANN001
    task = task_of("layer_norm.llvm", 4, 45, 1e-5, "float32")
    for cfg in sampled_configs(task, 3, seed=3):
        s, args = task.instantiate(cfg)
        check(s, args, layer_norm_ref(1e-5), rng)
