"""``.ember`` files keep the inputs' defaults (issue 22, item 23 follow-up).

An ONNX initializer that is also a graph input (IR >= 4) is an input a run may leave
out; the compiled model takes it as optional. An exported and loaded one must too,
and must still take an override, as onnxruntime does with the ONNX file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ember
from tests.frontend.onnx_models import run_ort
from tests.robust.artifact_mutations import _members, _pack, _reseal

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

RNG = np.random.default_rng(2223)


def _model(batch: Any) -> Any:
    """y = x @ w + b: w a constant initializer, b one that is also a graph input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 5])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [7])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 7])
    w = onnx.numpy_helper.from_array(RNG.standard_normal((5, 7)).astype(np.float32), "w")
    b0 = onnx.numpy_helper.from_array(RNG.standard_normal(7).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["t"]),
        helper.make_node("Add", ["t", "b"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "defaults", [x, b], [y], [w, b0])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _check_runs(model: Any, onnx_model: Any, batches: tuple[int, ...]) -> None:
    """Without b (the default) and with an override, at each batch, against onnxruntime."""
    for n in batches:
        x = RNG.standard_normal((n, 5)).astype(np.float32)
        override = RNG.standard_normal(7).astype(np.float32)
        for feeds in ({"x": x}, {"x": x, "b": override}):
            want = run_ort(onnx_model, feeds)[0]
            np.testing.assert_allclose(model.run(feeds)[0], want, rtol=1e-5, atol=1e-5)


def test_item_23_artifact_keeps_input_defaults(tmp_path: Path) -> None:
    from ember.frontend.onnx_import.importer import from_onnx

    static = _model(3)
    compiled = ember.compile(static)
    compiled.export(tmp_path / "static.ember")
    _check_runs(ember.load(tmp_path / "static.ember"), static, (3,))

    # symbolic batch, from an ONNX source and from a Graph source (its own members)
    dynamic = _model("N")
    for name, source in (("onnx", dynamic), ("graph", from_onnx(dynamic))):
        model = ember.compile(source)
        _check_runs(model, dynamic, (2,))  # compiles batch 2, exported below
        path = tmp_path / f"dynamic_{name}.ember"
        model.export(path)
        _check_runs(ember.load(path), dynamic, (2, 5))  # 5: compiled after loading


def test_item_23_artifact_defaults_checked(tmp_path: Path) -> None:
    """An edited file whose defaults do not fit the graph is refused, resealed or not."""
    ember.compile(_model(3)).export(tmp_path / "m.ember")
    good = _members((tmp_path / "m.ember").read_bytes())
    assert "defaults.npz" in good

    def refused(members: dict[str, bytes], match: str) -> None:
        path = tmp_path / "edited.ember"
        path.write_bytes(_pack(_reseal(members)))
        with pytest.raises(ember.InvalidModelError, match=match):
            ember.load(path)

    without = {n: d for n, d in good.items() if n != "defaults.npz"}
    refused(without, "no defaults.npz")
    body = json.loads(good["graph.json"])
    body["graph"]["defaults"] = ["y"]  # an output, not an input
    refused({**good, "graph.json": json.dumps(body).encode()}, "'defaults'.*not all inputs")
    body["graph"]["defaults"] = "b"
    refused({**good, "graph.json": json.dumps(body).encode()}, "'defaults' is not a list")
    body["graph"]["defaults"] = []  # a defaults member the graph does not list
    refused({**good, "graph.json": json.dumps(body).encode()}, "does not hold the graph's")


def test_item_23_fuzzed_defaults_refused_or_correct(tmp_path: Path) -> None:
    """The loader fuzz (``test_artifact_fuzz.py``'s mutations) over a file with defaults,
    run without the defaulted input: refused with an EmberError, or correct."""
    import random

    from tests.robust.artifact_mutations import MUTATIONS
    from tests.robust.test_artifact_fuzz import _outcome

    model = _model(3)
    feeds = {"x": RNG.standard_normal((3, 5)).astype(np.float32)}
    want = run_ort(model, feeds)
    ember.compile(model).export(tmp_path / "m.ember")
    data = (tmp_path / "m.ember").read_bytes()
    path = tmp_path / "case.ember"
    seen = set()
    for i, name in enumerate(sorted(MUTATIONS) * 6):
        path.write_bytes(MUTATIONS[name](data, random.Random(f"defaults{i}")))
        result = _outcome(path, feeds, want)
        assert result != "WRONG", f"case {i} ({name}) loads and gives wrong outputs"
        seen.add(result)
    assert seen == {"refused", "correct"}
