"""The reduce.llvm template: row sums, maxima and minima, fallback and sampled configs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules.reduce import reduce_llvm
from ember.errors import ArgumentError
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.nightly import examples
from tests.numerics import check

NUMPY = {"sum": np.sum, "max": np.max, "min": np.min}


def reduce_ref(kind: str):  # noqa: ANN201
    return lambda x: NUMPY[kind](x.astype(np.float64), axis=1).astype(x.dtype)


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
@pytest.mark.parametrize("shape", [(5, 37), (3, 16), (4, 5), (2, 1), (7, 130)], ids=str)
def test_fallback(shape, kind, rng):  # noqa: ANN001
    s, args = reduce_llvm(*shape, kind)
    check(s, args, reduce_ref(kind), rng)


@pytest.mark.parametrize("kind", ["sum", "max"])
def test_fallback_medium_llvm(kind, rng):  # noqa: ANN001
    s, args = reduce_llvm(300, 1001, kind)
    check(s, args, reduce_ref(kind), rng, executors=("llvm",))


@pytest.mark.parametrize("kind", ["sum", "max"])
def test_int32(kind, rng):  # noqa: ANN001
    s, args = reduce_llvm(5, 37, kind, "int32")
    check(s, args, lambda x: NUMPY[kind](x, axis=1).astype(np.int32), rng)


@pytest.mark.parametrize("kind", ["sum", "min"])
def test_sampled_configs(kind, rng):  # noqa: ANN001
    task = task_of("reduce.llvm", 6, 45, kind, "float32")
    for cfg in sampled_configs(task, 3, seed=1):
        s, args = task.instantiate(cfg)
        check(s, args, reduce_ref(kind), rng)


@settings(max_examples=examples(10), deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 200), kind=st.sampled_from(["sum", "max"]))
def test_random_shapes_llvm(rows, cols, kind):  # noqa: ANN001
    s, args = reduce_llvm(rows, cols, kind)
    check(s, args, reduce_ref(kind), np.random.default_rng(cols), executors=("llvm",))


def test_main_loop_is_vectorized():
    s, args = reduce_llvm(8, 100, "sum")
    text = str(ember.lower(s, args))
    assert "parallel(" in text and ", 1, 32)]" in text and ", 1, 4)]" in text  # 3 x 32 + 4


def test_unknown_kind():
    with pytest.raises(ArgumentError, match="kind must be one of"):
        reduce_llvm(4, 4, "prod")
