"""The memory plan places a concat's operands in its result (``ember/graph/memory_plan.py``):
which concats it takes, where the operands land, and models against onnxruntime, run
several times with new data (a kernel writing the wrong slab would pass once on
leftovers)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import ember
from ember.graph.memory_plan import absorbed_concats, plan_memory
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
