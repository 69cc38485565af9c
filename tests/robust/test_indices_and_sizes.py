"""Indices out of range, huge sizes and zero-size work, each against onnxruntime or numpy.

Issue 22: item 8 (gathers and scatters refuse an index out of range instead of reading
a clamped row), item 14 (impossible sizes refused, not a MemoryError or a wrapped byte
count), item 22 (zero-size work onnxruntime runs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember
from tests.frontend.onnx_models import make_model, run_ort

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

RNG = np.random.default_rng(22)
DATA = RNG.standard_normal((3, 5)).astype(np.float32)  # 3 rows, 5 columns


def _case(op: str, bad: int) -> tuple[list[Any], dict[str, np.ndarray]]:
    """One node of ``op`` on ``DATA`` whose index input 'ids' holds ``bad`` among legal
    indices (negative ones included); the axis it addresses has 3 entries."""
    if op == "Gather":
        ids = np.array([[0, -1], [bad, 2]], np.int64)
        return [helper.make_node(op, ["x", "ids"], ["y"], axis=0)], {"x": DATA, "ids": ids}
    if op == "GatherElements":
        ids = RNG.integers(-3, 3, size=(2, 5)).astype(np.int64)
        ids[1, 3] = bad
        return [helper.make_node(op, ["x", "ids"], ["y"], axis=0)], {"x": DATA, "ids": ids}
    if op == "GatherND":
        ids = np.array([[0], [-2], [bad]], np.int64)
        return [helper.make_node(op, ["x", "ids"], ["y"])], {"x": DATA, "ids": ids}
    upd = RNG.standard_normal((1, 5)).astype(np.float32)
    if op == "ScatterND":
        feeds = {"x": DATA, "ids": np.array([[bad]], np.int64), "u": upd}
        return [helper.make_node(op, ["x", "ids", "u"], ["y"])], feeds
    assert op == "ScatterElements"
    ids = RNG.permutation(3)[:1].repeat(5).reshape(1, 5).astype(np.int64) - 3  # negatives
    ids[0, 2] = bad
    feeds = {"x": DATA, "ids": ids, "u": upd}
    return [helper.make_node(op, ["x", "ids", "u"], ["y"], axis=0)], feeds


INDEX_OPS = ["Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements"]


@pytest.mark.parametrize("op", INDEX_OPS)
def test_item_08_out_of_range_indices_refused(op: str) -> None:
    """3 rows: 3, -4 and 2**32 + 1 (which int32 truncation made row 1) are refused, as
    onnxruntime refuses them; legal indices, negative ones included, match it."""
    nodes, feeds = _case(op, 1)
    model = make_model(nodes, feeds, ["y"])
    compiled = ember.compile(model)
    np.testing.assert_allclose(compiled.run(feeds)[0], run_ort(model, feeds)[0], rtol=1e-6)
    for bad in (3, -4, 2**32 + 1):
        nodes, feeds = _case(op, bad)
        with pytest.raises(Exception):  # noqa: B017 - the reference refuses too
            run_ort(model, feeds)
        with pytest.raises(ember.ArgumentError, match=rf"index input 'ids' holds {bad} at"):
            compiled.run(feeds)


def test_item_08_int32_indices_and_fused_producers() -> None:
    """Indices made by an op in the model (Add then Cast) are still checked: fusion keeps
    them a kernel input. int32 indices are checked as well."""
    nodes = [
        helper.make_node("Add", ["ids", "one"], ["shifted"]),
        helper.make_node("Cast", ["shifted"], ["idx"], to=onnx.TensorProto.INT64),
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
        helper.make_node("Mul", ["g", "g"], ["y"]),
    ]
    feeds = {"x": DATA, "ids": np.array([[3, -6], [0, 1]], np.int32)}
    model = make_model(nodes, feeds, ["y"], {"one": np.array(1, np.int32)})
    compiled = ember.compile(model)
    np.testing.assert_allclose(compiled.run(feeds)[0], run_ort(model, feeds)[0], rtol=1e-6)
    feeds["ids"] = np.array([[4, 0], [0, 1]], np.int32)  # 4 + 1 = 5 of 5 columns
    with pytest.raises(ember.ArgumentError, match="index input 'idx' holds 5 at"):
        compiled.run(feeds)


def test_item_08_constant_indices_checked_when_compiled() -> None:
    """Constant indices are refused once, at import (folded or not), never at each run."""
    gather = helper.make_node("Gather", ["x", "ids"], ["y"], axis=0)
    model = make_model([gather], {"x": DATA}, ["y"], {"ids": np.array([1, 3], np.int64)})
    with pytest.raises(ember.ArgumentError, match="index input 'ids' holds 3 at"):
        ember.compile(model)
    both = make_model([gather], {}, ["y"], {"x": DATA, "ids": np.array([-4], np.int64)})
    with pytest.raises(ember.ArgumentError, match="index input 'ids' holds -4 at"):
        ember.compile(both)


def test_item_08_one_hot_out_of_range_is_all_off() -> None:
    """OneHot is the exception: ONNX defines an index outside [-depth, depth) to give a row
    of off values, and onnxruntime does that; so does Ember (no error)."""
    node = helper.make_node("OneHot", ["ids", "depth", "values"], ["y"], axis=-1)
    feeds = {"ids": np.array([[0, 4, -4], [-5, 2**32 + 1, 3]], np.int64)}
    consts = {"depth": np.array(4, np.int64), "values": np.array([-2.5, 7.0], np.float32)}
    model = make_model([node], feeds, ["y"], consts)
    np.testing.assert_array_equal(ember.compile(model).run(feeds)[0], run_ort(model, feeds)[0])


def test_item_08_nn_embedding_refuses_ids_out_of_range() -> None:
    """nn.Embedding traces to ONNX Gather: rows match numpy, an id past the table is
    refused naming the input (negative ids wrap, as ONNX Gather and onnxruntime do)."""
    from ember.frontend import nn

    emb = nn.Embedding(7, 4)
    compiled = ember.compile(emb.export({"ids": ((2, 3), "int64")}))
    ids = np.array([[0, 6, 2], [-1, 3, 5]], np.int64)
    np.testing.assert_array_equal(compiled.run({"ids": ids})[0], emb.weight[ids])
    with pytest.raises(ember.ArgumentError, match="index input 'ids' holds 7 at \\[1, 2\\]"):
        compiled.run({"ids": np.array([[0, 6, 2], [-1, 3, 7]], np.int64)})


def test_item_08_loaded_artifact_still_checks(tmp_path: Any) -> None:
    """The checks come from the graph, so a model exported and loaded keeps them."""
    nodes, feeds = _case("Gather", 1)
    path = tmp_path / "gather.ember"
    ember.compile(make_model(nodes, feeds, ["y"])).export(path)
    loaded = ember.load(path)
    np.testing.assert_array_equal(loaded.run(feeds)[0], np.take(DATA, feeds["ids"], axis=0))
    with pytest.raises(ember.ArgumentError, match="index input 'ids' holds -4 at"):
        loaded.run(_case("Gather", -4)[1])


def test_item_08_cuda_models_check_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs on the host before the step, so a CUDA model (here in the SIMT
    emulator) refuses the same index, and reads legal negative ones as onnxruntime does."""
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    nodes, feeds = _case("GatherElements", 2)
    model = make_model(nodes, feeds, ["y"])
    compiled = ember.compile(model, target="cuda")
    np.testing.assert_allclose(compiled.run(feeds)[0], run_ort(model, feeds)[0])
    with pytest.raises(ember.ArgumentError, match="index input 'ids' holds 3 at"):
        compiled.run(_case("GatherElements", 3)[1])


def test_item_08_indices_past_int32_on_a_long_axis() -> None:
    """On an axis longer than int32 counts, an int64 index is not truncated: row 2**31 + 3
    (and -2, the same row) reads that row. The 2 GiB array is np.zeros (pages the kernel
    never touches are never made), so this needs a few MB."""
    from ember import te
    from ember.tir.topi.transform import take

    n = 2**31 + 5
    X = te.placeholder((n,), name="X", dtype="int8")
    ids = te.placeholder((3,), name="ids", dtype="int64")
    Y = take(X, ids, 0)
    f = ember.build(te.create_schedule(Y.op), [X, ids, Y], target="llvm")
    x = np.zeros(n, np.int8)
    x[[1, n - 2]] = [3, 7]
    y = np.zeros(3, np.int8)
    f(x, np.array([n - 2, 1, -2], np.int64), y)
    np.testing.assert_array_equal(y, [7, 3, 7])


def _unary(shape: list[Any], op: str = "Relu") -> Any:
    """A one-node model whose input 'x' declares ``shape`` (no data is ever made)."""
    from tests.frontend.onnx_models import tensor_info

    node = helper.make_node(op, ["x"], ["y"])
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)
    graph = helper.make_graph([node], "huge", [tensor_info("x", shape)], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_item_14_huge_sizes_refused(tmp_path: Any) -> None:
    """A dim of 10**12 is an ArgumentError (it was a MemoryError; the CLI printed a
    traceback); 2**62 elements, or 2**32 x 2**32 whose int64 element count wraps to 0, are
    refused before anything is allocated; so is a constant of 2**58 elements."""
    import subprocess
    import sys

    from ember.frontend.graph import TensorType

    assert TensorType((2**32, 2**32), "float32").nbytes == 2**66  # no wrap to 0
    with pytest.raises(ember.ArgumentError, match="more than this machine could allocate"):
        ember.compile(_unary([10**12]))
    for shape in ([2**62], [2**32, 2**32]):
        with pytest.raises(ember.ArgumentError, match="more than any 64-bit machine"):
            ember.compile(_unary(shape))
    fill = helper.make_node("ConstantOfShape", ["s"], ["y"])
    model = make_model([fill], {}, ["y"], {"s": np.array([2**29, 2**29], np.int64)})
    with pytest.raises(ember.ArgumentError, match="ConstantOfShape .* more than any 64-bit"):
        ember.compile(model)
    path = tmp_path / "huge.onnx"
    path.write_bytes(_unary([10**12]).SerializeToString())
    cli = [sys.executable, "-m", "ember.cli", "compile", str(path), "-o", str(tmp_path / "h")]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert "more than this machine could allocate" in done.stderr + done.stdout


def test_item_14_reduction_over_2_31_uses_64_bit_indices() -> None:
    """A reduction whose extent is 2**31 + 5 compiles (it raised AttributeError in the
    graph scheduler) and counts every element: the sum of a broadcast int64 row is exact
    (an int32 extent would wrap). The expanded rows are never stored: Expand fuses into
    the reduction, so this runs in memory of a few bytes."""
    n = 2**31 + 5
    x = np.array([[3], [-7], [11]], np.int64)
    nodes = [
        helper.make_node("Expand", ["x", "shape"], ["e"]),
        helper.make_node("ReduceSum", ["e", "axes"], ["y"], keepdims=0),
    ]
    consts = {"shape": np.array([3, n], np.int64), "axes": np.array([1], np.int64)}
    model = make_model(nodes, {"x": x}, ["y"], consts)
    np.testing.assert_array_equal(ember.compile(model).run({"x": x})[0], x[:, 0] * n)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


AXIS1 = np.array([1], np.int64)

# case: (op type, attributes, inputs by name; "axes" and "k" become constants)
ZERO_SIZE: dict[str, tuple[str, dict[str, Any], dict[str, np.ndarray]]] = {
    # sums over nothing: zeros plus the bias (were "shape of placeholder must be positive")
    "MatMul K=0": ("MatMul", {}, {"a": _f32(3, 0), "b": _f32(0, 5)}),
    "batched MatMul K=0": ("MatMul", {}, {"a": _f32(2, 3, 0), "b": _f32(1, 0, 4)}),
    "Gemm K=0, C, beta": (
        "Gemm",
        {"beta": 0.5, "transA": 1},
        {"a": _f32(0, 3), "b": _f32(0, 5), "c": _f32(5)},
    ),
    "Conv Cin=0 + bias": (
        "Conv",
        {"pads": [1, 0, 1, 0]},
        {"x": _f32(2, 0, 5, 4), "w": _f32(3, 0, 3, 3), "bias": _f32(3)},
    ),
    # a mean over nothing is 0 in onnxruntime (was NaN, and INT_MAX for integers)
    "ReduceMean empty": ("ReduceMean", {"keepdims": 0}, {"a": _f32(3, 0), "axes": AXIS1}),
    "ReduceMean empty int": ("ReduceMean", {}, {"a": np.zeros((5, 0), np.int32), "axes": AXIS1}),
    # empty inputs and outputs that already behaved; kept so they stay so
    "MatMul M=0": ("MatMul", {}, {"a": _f32(0, 3), "b": _f32(3, 5)}),
    "Softmax N=0": ("Softmax", {}, {"a": _f32(0, 7)}),
    "ReduceMax empty": ("ReduceMax", {"keepdims": 0}, {"a": _f32(3, 0), "axes": AXIS1}),
    "TopK k=0": ("TopK", {}, {"a": _f32(3, 4), "k": np.array([0], np.int64)}),
    "Gather no ids": ("Gather", {}, {"a": _f32(3, 4), "ids": np.zeros((0, 2), np.int64)}),
}


@pytest.mark.parametrize("case", list(ZERO_SIZE))
def test_item_22_zero_size_work_matches_onnxruntime(case: str) -> None:
    """Zero-size operands onnxruntime runs, run (graph inputs and constants alike)."""
    op, attrs, arrays = ZERO_SIZE[case]
    consts = {k: v for k, v in arrays.items() if k in ("axes", "k")}
    feeds = {k: v for k, v in arrays.items() if k not in consts}
    outs = ["y", "i"] if op == "TopK" else ["y"]
    node = helper.make_node(op, list(arrays), outs, **attrs)
    model = make_model([node], feeds, outs, consts, opset=18)
    want = run_ort(model, feeds)
    got = ember.compile(model).run(feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_item_22_dynamic_batch_of_zero() -> None:
    """A dynamic model run at N=0: Flatten, Reshape(-1, 12) and a Gemm after it run, as in
    onnxruntime; Reshape(N, -1) at N=0 is refused by both (-1 is ambiguous with no
    elements; onnxruntime: "cannot be reshaped"), with an ArgumentError."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 4])
    consts = {
        "w": _f32(12, 5),
        "b": _f32(5),
        "flat": np.array([-1, 12], np.int64),
        "keep_n": np.array([0, -1], np.int64),
    }
    nodes = [
        helper.make_node("Flatten", ["x"], ["f"]),
        helper.make_node("Reshape", ["x", "flat"], ["r"]),
        helper.make_node("Add", ["f", "r"], ["s"]),
        helper.make_node("Gemm", ["s", "w", "b"], ["y"]),
    ]

    def model(extra: list[Any]) -> Any:
        out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 5])
        inits = [onnx.numpy_helper.from_array(v, k) for k, v in consts.items()]
        graph = helper.make_graph([*nodes, *extra], "dyn", [x], [out], inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 10
        return m

    good = model([])
    dynamic = ember.compile(good)
    for n in (3, 0):
        feeds = {"x": _f32(n, 3, 4)}
        np.testing.assert_allclose(dynamic.run(feeds)[0], run_ort(good, feeds)[0], rtol=1e-5)
    nodes[1] = helper.make_node("Reshape", ["x", "keep_n"], ["r"])
    ambiguous = model([])
    feeds = {"x": _f32(0, 3, 4)}
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime refuses it too
        run_ort(ambiguous, feeds)
    with pytest.raises(ember.ArgumentError, match=r"cannot reshape \[0, 3, 4\] into \[0, -1\]"):
        ember.compile(ambiguous).run(feeds)
