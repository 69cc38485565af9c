"""A new target is one module: this file registers the reference interpreter as target
``interp`` and compiles both a TE schedule and an ONNX model for it, touching no other
file. Everything target-specific is the ``Backend`` subclass below; ``ember.build``,
``ember.compile`` and the executor find it through ``ember.backend.get_backend``.

The references are numpy's, computed independently of any Ember path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import ember
from ember import te
from ember.backend import Backend, register_backend
from ember.target import KindInfo
from ember.tir import interp


class InterpModule:
    """The functions of one build, run by the reference interpreter."""

    def __init__(self, funcs: Sequence[Any]) -> None:
        self.funcs = {f.name: f for f in funcs}
        self.entry = funcs[0]

    def __call__(self, *arrays: np.ndarray) -> None:
        interp.run(self.entry, *arrays)

    def __getitem__(self, name: str) -> Any:
        return lambda *arrays: interp.run(self.funcs[name], *arrays)


class InterpBackend(Backend):
    """Runs lowered TIR on the CPU through the interpreter: no passes of its own, no
    strategies (every op takes its generic compute), one stage per op."""

    kind = "interp"
    built: list[str] = []  # what this backend was asked to build (the test checks it)

    def build(self, funcs: Sequence[Any], ctx: Any) -> InterpModule:
        InterpBackend.built += [f.name for f in funcs]
        return InterpModule(list(funcs))

    def schedule(self, outs: Sequence[Any], anchors: Sequence[Any] = ()) -> Any:
        return te.create_schedule([t.op for t in outs])


@pytest.fixture(scope="module", autouse=True)
def interp_target():
    register_backend("interp", InterpBackend, KindInfo(options=("note",)))


def test_a_te_schedule_builds_and_runs_on_the_toy_target(rng):
    n = 37  # odd: no split divides it
    A = te.placeholder((n, 5), name="A")
    B = te.placeholder((5,), name="B")
    k = te.reduce_axis((0, 5), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i, k] * B[k], axis=k), name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    mod = ember.build(s, [A, B, C], target="interp -note=toy", name="gemv")
    assert isinstance(mod, InterpModule) and "gemv" in InterpBackend.built
    a = rng.standard_normal((n, 5)).astype("float32")
    b = rng.standard_normal(5).astype("float32")
    c = np.full(n, np.nan, dtype="float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_an_onnx_model_compiles_and_runs_on_the_toy_target(rng):
    from ember.frontend.testing.models import mlp

    model, inputs = mlp(rng, batch=3, sizes=(7, 5, 4))
    lib = ember.compile(model, target="interp")
    assert lib.target.kind == "interp"
    (got,) = lib.run(inputs)
    init = {t.name: t for t in model.graph.initializer}
    from onnx import numpy_helper

    w0, b0, w1 = (numpy_helper.to_array(init[k]) for k in ("w0", "b0", "w1"))
    want = np.maximum(inputs["x"] @ w0 + b0, 0) @ w1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_toy_target_is_a_target_like_any_other():
    tgt = ember.Target("interp -note=x")
    assert str(tgt) == "interp -note=x" and tgt.kind.name == "interp"
    assert ember.get_backend(tgt).target == tgt
    with pytest.raises(ember.ArgumentError, match="unknown option -arch"):
        ember.Target("interp -arch=sm_80")
