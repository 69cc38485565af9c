"""Ember against onnxruntime on one ONNX model: the checks the random-graph tests share.

onnxruntime is the reference with its graph optimizations off, so that each node runs as
the ONNX spec defines it: its own fusions have bugs of their own (1.32's GELU fusion
rejects a graph whose ``0.5 x`` another node also reads, ``test_random_transformers.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort

import ember
from ember.frontend.testing.models import symbolic_batch
from ember.graph.dynamic_model import DynamicModel


def reference(model: Any) -> Any:
    """An onnxruntime session of ``model``: one thread, no graph optimizations."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def assert_matches(model: Any, got: list, want: list, where: str) -> None:
    """Each output of ``model`` as Ember and onnxruntime computed it, within 1e-3."""
    ops = [n.op_type for n in model.graph.node]
    for name, a, b in zip((o.name for o in model.graph.output), got, want):
        message = f"{where}, output {name}, ops {ops}"
        assert a.shape == b.shape, message
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3, err_msg=message)


def check_static(
    model: Any, feeds: dict[str, np.ndarray], where: str, target: str = "llvm"
) -> None:
    """``model`` compiled as a user would (``ember.compile``) for ``target`` matches
    onnxruntime (CUDA: in the SIMT emulator, where the caller sets EMBER_CUDA_EMULATE)."""
    want = reference(model).run(None, feeds)
    assert_matches(model, ember.compile(model, target=target).run(feeds), want, where)


def check_any_batch(model: Any, feeds: dict[str, np.ndarray], seed: int, where: str) -> None:
    """``model`` with its batch dim a symbol compiles once and matches onnxruntime at
    batch sizes 1, 3 and 2 (random inputs drawn from ``seed``)."""
    model = symbolic_batch(model, "N")
    session, compiled = reference(model), ember.compile(model)
    assert isinstance(compiled, DynamicModel)
    rng = np.random.default_rng(seed)
    for n in (1, 3, 2):
        x = {"x": rng.standard_normal((n, *feeds["x"].shape[1:])).astype(np.float32)}
        assert_matches(model, compiled.run(x), session.run(None, x), f"{where}, batch {n}")
