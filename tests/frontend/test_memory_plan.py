"""The memory plan places a concat's operands in its result and makes a reshape a view of
its operand (``ember/graph/memory_plan.py``): which steps it takes, where the values land,
and models against onnxruntime, run several times with new data (a kernel writing the
wrong slab, or one left reading the last run's input, would pass once on leftovers)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from onnx import helper

import ember
from ember.frontend.graph import Graph, TensorType, Value
from ember.graph.memory_plan import absorbed_concats, aliased_reshapes, plan_memory
from ember.graph.step import Step
from ember.graph.workspace import MOVABLE_BYTES
from tests.frontend.onnx_models import make_model, run_ort

pytest.importorskip("onnxruntime")
n = helper.make_node


def _w(rng, *shape):  # noqa: ANN001, ANN202
    return (rng.standard_normal(shape) * 0.3).astype("float32")


def _fire(rng, batch: int = 1, axis: int = 1, tail: str = "conv"):  # noqa: ANN001, ANN202
    """squeeze conv -> two expand convs (+ReLU) -> Concat -> a conv or a graph output."""
    w = {"S": _w(rng, 6, 5, 1, 1), "E1": _w(rng, 7, 6, 1, 1), "E3": _w(rng, 9, 6, 3, 3)}
    w["T"] = _w(rng, 4, 16, 1, 1)
    if axis != 1:  # operands of equal channels (onnxruntime's NCHWc needs a multiple of 4)
        w.update(E1=_w(rng, 8, 6, 1, 1), E3=_w(rng, 8, 6, 3, 3), T=_w(rng, 4, 8, 1, 1))
    nodes = [
        n("Conv", ["x", "S"], ["s"]),
        n("Relu", ["s"], ["sr"]),
        n("Conv", ["sr", "E1"], ["e1"]),
        n("Relu", ["e1"], ["e1r"]),
        n("Conv", ["sr", "E3"], ["e3"], pads=[1, 1, 1, 1]),
        n("Relu", ["e3"], ["e3r"]),
        n("Concat", ["e1r", "e3r"], ["cat"], axis=axis),
    ]
    out = "cat"
    if tail == "conv":
        nodes.append(n("Conv", ["cat", "T"], ["y"]))
        out = "y"
    x = rng.standard_normal((batch, 5, 7, 9)).astype("float32")
    return make_model(nodes, {"x": x}, [out], w), x


def _check_runs(model, x: np.ndarray) -> ember.CompiledModel:  # noqa: ANN001
    lib = ember.compile(model)
    for k in range(3):
        feed = {"x": (x * (k + 1) - k).astype("float32")}
        for got, want in zip(lib.run(feed), run_ort(model, feed)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return lib


def _concat_steps(lib) -> list[int]:  # noqa: ANN001
    return [k for k, st in enumerate(lib.steps) if getattr(st.kernel, "op", "") == "concat"]


def test_a_fire_module_concat_copies_nothing(rng):  # noqa: ANN001
    model, x = _fire(rng)
    lib = _check_runs(model, x)
    slabs, absorbed = absorbed_concats(lib.graph, lib.steps)
    (k,) = _concat_steps(lib)
    assert absorbed == {k}
    result = lib.steps[k].outputs[0]
    first, second = lib.steps[k].inputs
    views, _ = plan_memory(lib.graph, lib.steps, slabs)
    out = views[result]
    size = views[first].nbytes
    assert slabs[first] == (result, 0) and slabs[second] == (result, size)
    assert views[first].ctypes.data == out.ctypes.data
    assert views[second].ctypes.data == out.ctypes.data + size
    assert size + views[second].nbytes == out.nbytes


@pytest.mark.parametrize(
    "batch,axis,tail",
    [(2, 1, "conv"), (1, 2, "conv"), (1, 1, "output")],
    ids=["batch-2", "rows", "graph-output"],
)
def test_concats_whose_operands_are_not_slabs_still_copy(batch, axis, tail, rng):  # noqa: ANN001
    """Batch 2 (each operand is two pieces), a concat along the rows (one piece per
    channel), a result that is a graph output (the run hands it over)."""
    model, x = _fire(rng, batch, axis, tail)
    lib = _check_runs(model, x)
    assert absorbed_concats(lib.graph, lib.steps)[1] == set()
    assert _concat_steps(lib)


def test_an_operand_of_two_concats_is_placed_in_one(rng):  # noqa: ANN001
    """DenseNet's pattern: each layer concatenates every earlier output, so a value is an
    operand of several concats; it is placed in the first, copied into the others."""
    w = {"A": _w(rng, 8, 3, 3, 3), "B": _w(rng, 4, 8, 3, 3), "C": _w(rng, 4, 12, 3, 3)}
    w["T"] = _w(rng, 2, 16, 1, 1)
    nodes = [
        n("Conv", ["x", "A"], ["a"], pads=[1, 1, 1, 1]),
        n("Relu", ["a"], ["ar"]),
        n("Conv", ["ar", "B"], ["b"], pads=[1, 1, 1, 1]),
        n("Relu", ["b"], ["br"]),
        n("Concat", ["ar", "br"], ["c1"], axis=1),
        n("Conv", ["c1", "C"], ["c"], pads=[1, 1, 1, 1]),
        n("Relu", ["c"], ["cr"]),
        n("Concat", ["ar", "br", "cr"], ["c2"], axis=1),
        n("Conv", ["c2", "T"], ["y"]),
    ]
    x = rng.standard_normal((1, 3, 6, 5)).astype("float32")
    lib = _check_runs(make_model(nodes, {"x": x}, ["y"], w), x)
    slabs, absorbed = absorbed_concats(lib.graph, lib.steps)
    assert len(absorbed) == 1 and len(_concat_steps(lib)) == 2
    assert len({out for out, _ in slabs.values()}) == 1


def test_concat_of_a_graph_input_copies(rng):  # noqa: ANN001
    w = {"A": _w(rng, 4, 5, 1, 1), "T": _w(rng, 2, 9, 1, 1)}
    nodes = [
        n("Conv", ["x", "A"], ["a"]),
        n("Concat", ["x", "a"], ["c"], axis=1),
        n("Conv", ["c", "T"], ["y"]),
    ]
    x = rng.standard_normal((1, 5, 4, 3)).astype("float32")
    lib = _check_runs(make_model(nodes, {"x": x}, ["y"], w), x)
    assert absorbed_concats(lib.graph, lib.steps)[1] == set()


def _stem(rng, shape: tuple[int, ...]):  # noqa: ANN001, ANN202
    """An RGB input into a 3x3 stride-2 conv and a 1x1 conv: the layout pass blocks the
    input by one channel, a reshape of it."""
    w = {"A": _w(rng, 32, 3, 3, 3), "B": _w(rng, 16, 32, 1, 1)}
    nodes = [
        n("Conv", ["x", "A"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Relu", ["a"], ["ar"]),
        n("Conv", ["ar", "B"], ["y"]),
    ]
    x = rng.standard_normal(shape).astype("float32")
    return make_model(nodes, {"x": x}, ["y"], w), x


@pytest.mark.parametrize("shape", [(1, 3, 9, 7), (1, 3, 96, 97)])  # copied in; read in place
def test_a_reshaped_input_is_a_view_of_it(rng, shape):  # noqa: ANN001
    model, x = _stem(rng, shape)
    lib = _check_runs(model, x)
    aliases = aliased_reshapes(lib.graph, lib.steps)
    assert [getattr(lib.steps[k].kernel, "op", "") for k in aliases] == ["reshape"]
    ((out, src),) = aliases.values()
    assert src == "x"
    with lib._workspace() as ws:
        assert np.shares_memory(ws.env[out], ws.env["x"])
        assert ("x" in ws._in_slots) == (x.nbytes >= MOVABLE_BYTES)


def test_a_reshape_of_an_intermediate_is_a_view_and_keeps_it_alive() -> None:
    """Before/Expected on a hand-made plan: the view shares its operand's buffer, and the
    operand's buffer is not handed to a later value while the view is still read."""
    types = {"x": (4, 6), "a": (4, 6), "r": (24,), "b": (24,), "y": (24,)}
    values = {v: Value(v, TensorType(shape, "float32")) for v, shape in types.items()}
    g = Graph([values["x"]], [values["y"]], [], {}, values)
    reshape = SimpleNamespace(op="reshape", target=SimpleNamespace(kind="llvm"), bind=None)
    other = SimpleNamespace(op="exp", target=SimpleNamespace(kind="llvm"), bind=None)
    steps = [
        Step(other, ("x",), ("a",), "exp"),
        Step(reshape, ("a",), ("r",), "reshape"),
        Step(other, ("r",), ("b",), "exp"),  # a new value while r is still read
        Step(other, ("r", "b"), ("y",), "add"),
    ]
    aliases = aliased_reshapes(g, steps)
    assert aliases == {1: ("r", "a")}
    views, total = plan_memory(g, steps, None, aliases)
    assert np.shares_memory(views["r"], views["a"]) and views["r"].shape == (24,)
    assert not np.shares_memory(views["b"], views["a"])
    assert total == 2 * 96


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
