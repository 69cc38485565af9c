"""Adding a CPU operator template is one module plus one strategy entry.

This file is that module: a tuning template for Relu (``toy_relu.llvm``) that takes its
compute from ``tir/topi`` and schedules it, the same schedule offered to fused graph
kernels, and the task a Relu node of the graph tunes. The fixture adds the one strategy
entry (``CPU_STRATEGY.registered``; a real template writes ``CPU_STRATEGY.add`` once in
``codegen_llvm/strategy.py``). Nothing else in Ember is touched, yet ``ember.compile``
runs the template's schedule, ``ember.extract_tasks`` lists its task, and the tuner
instantiates it. References are numpy's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

import ember
from ember import te
from ember.codegen_llvm.strategy import CPU_STRATEGY
from ember.frontend.testing.models import build_model
from ember.graph.kernels import clear_cache
from ember.tir import topi
from ember.tuner import create_task, template
from ember.tuner.strategy import Implementation

NAME = "toy_relu.llvm"
SCHEDULED: list[str] = []  # names of the stages the template's schedule ran on


def relu_compute(inputs: list[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """The graph node's compute: topi's, for 2-D float32 inputs only (else not ours)."""
    (x,) = inputs
    if x.ndim != 2 or x.dtype != "float32":
        return None
    return [topi.relu(x)]


def relu_schedule(s: Any, outputs: list[Any]) -> set[int]:
    """Rows in parallel, the last axis in vectors of 8: the stages it scheduled."""
    (out,) = outputs
    SCHEDULED.append(out.op.name)
    rows, cols = s[out].op.axis
    s[out].parallel(rows)
    _, inner = s[out].split(cols, factor=8)
    s[out].vectorize(inner)
    return {id(out.op)}


def relu_task(in_types: list[Any], attrs: dict[str, Any]) -> tuple[str, tuple[Any, ...]] | None:
    (t,) = in_types
    if len(t.shape) != 2 or t.dtype != "float32":
        return None
    return NAME, (*t.shape, t.dtype)


@template(NAME)
def toy_relu(n: int, m: int, dtype: str) -> tuple[Any, list[Any]]:
    """The tuning template: the same compute and schedule on placeholders."""
    X = te.placeholder((n, m), dtype=dtype, name="X")
    (Y,) = relu_compute([X], {})
    s = te.create_schedule(Y.op)
    relu_schedule(s, [Y])
    return s, [X, Y]


IMPLEMENTATION = Implementation(NAME, relu_compute, relu_schedule, relu_task, priority=100)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    clear_cache()
    with CPU_STRATEGY.registered("relu", IMPLEMENTATION):
        yield
    clear_cache()


def _model(x: np.ndarray) -> Any:
    return build_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"], {})


def test_compile_runs_the_one_file_template(registered, rng):
    x = rng.standard_normal((5, 37)).astype("float32")  # 37: a vector tail
    SCHEDULED.clear()
    lib = ember.compile(_model(x), target="llvm")
    assert SCHEDULED, "the template's schedule did not run"
    (y,) = lib.run({"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_extract_tasks_and_the_tuner_see_its_task(registered, rng):
    x = rng.standard_normal((5, 37)).astype("float32")
    tasks = ember.extract_tasks(_model(x), target="llvm")
    assert [(t.task.name, t.task.args) for t in tasks] == [(NAME, (5, 37, "float32"))]
    s, args = create_task(NAME, args=(5, 37, "float32"), target="llvm").instantiate()
    out = np.empty_like(x)
    ember.build(s, args, target="llvm")(x, out)
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_without_the_entry_relu_takes_the_generic_path(rng):
    clear_cache()
    x = rng.standard_normal((3, 4)).astype("float32")
    SCHEDULED.clear()
    (y,) = ember.compile(_model(x), target="llvm").run({"x": x})
    assert not SCHEDULED
    np.testing.assert_array_equal(y, np.maximum(x, 0))
