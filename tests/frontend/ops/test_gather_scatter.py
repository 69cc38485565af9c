"""Gather family, scatters, CumSum, TopK, OneHot, ReverseSequence and the constant-producing
ops (Size, Range, ConstantOfShape, EyeLike, NonZero, Shape start/end) vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from tests.frontend.ops.shape_models import check, i64, node_model
from tests.nightly import examples


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather_every_axis_negative_runtime_indices(rng, axis):
    x = _f32(rng, 4, 5, 3)
    n = x.shape[axis]
    idx = rng.integers(-n, n, (2, 3)).astype(np.int64)
    check("Gather", [("x", x), ("i", idx)], opset=13, axis=axis)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(rng, axis):
    x = _f32(rng, 4, 5, 3)
    shape = list(x.shape)
    shape[axis] = 6
    idx = rng.integers(-x.shape[axis], x.shape[axis], shape).astype(np.int64)
    check("GatherElements", [("x", x), ("i", idx)], opset=13, axis=axis)


@pytest.mark.parametrize(
    "xshape,ishape,batch_dims",
    [
        ((4, 5, 3), (2, 2), 0),
        ((4, 5, 3), (3, 1, 3), 0),
        ((3, 5, 4), (3, 2, 1), 1),
        ((2, 3, 4, 5), (2, 3, 1), 2),
    ],
)
def test_gather_nd(rng, xshape, ishape, batch_dims):
    x = _f32(rng, *xshape)
    k = ishape[-1]
    hi = np.array(xshape[batch_dims : batch_dims + k])
    idx = (rng.integers(0, 1 << 20, ishape) % hi) - hi * rng.integers(0, 2, ishape)
    check("GatherND", [("x", x), ("i", idx.astype(np.int64))], opset=13, batch_dims=batch_dims)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(rng, reduction):
    x = _f32(rng, 5, 4)
    idx = np.stack([rng.permutation(5)[:3] for _ in range(4)], axis=1).astype(np.int64)
    if reduction != "none":
        idx = rng.integers(-5, 5, (3, 4)).astype(np.int64)  # duplicates are fine when reducing
    upd = _f32(rng, 3, 4)
    check(
        "ScatterElements", [("x", x), ("i", idx), ("u", upd)], opset=18, axis=0, reduction=reduction
    )


def test_scatter_elements_smaller_indices_on_last_axis(rng):
    x = _f32(rng, 3, 6)
    idx = np.array([[5, -1], [0, 2]], dtype=np.int64)
    check("ScatterElements", [("x", x), ("i", idx), ("u", _f32(rng, 2, 2))], opset=13, axis=1)


def test_scatter_opset_9(rng):
    x = _f32(rng, 4, 3)
    idx = np.array([[1, 0, 2], [3, 2, 0]], dtype=np.int64)
    check("Scatter", [("x", x), ("i", idx), ("u", _f32(rng, 2, 3))], opset=9, axis=0)
    check("Scatter", [("x", x), ("i", -idx), ("u", _f32(rng, 2, 3))], opset=10, axis=-2)
    deprecated = node_model("Scatter", [("x", x), ("i", idx), ("u", _f32(rng, 2, 3))], opset=11)
    with pytest.raises(ember.InvalidModelError, match="deprecated"):
        ember.compile(deprecated, target="llvm")


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max"])
def test_scatter_nd(rng, reduction):
    x = _f32(rng, 4, 5, 3)
    idx = np.array([[[1, 2], [3, 0]], [[0, 4], [2, 2]]], dtype=np.int64)
    if reduction != "none":
        idx[1, 1] = idx[0, 0]
    check(
        "ScatterND",
        [("x", x), ("i", idx), ("u", _f32(rng, 2, 2, 3))],
        opset=18,
        reduction=reduction,
    )


def test_scatter_nd_rows(rng):
    x = _f32(rng, 6, 4)
    idx = np.array([[4], [-1], [0]], dtype=np.int64)
    check("ScatterND", [("x", x), ("i", idx), ("u", _f32(rng, 3, 4))], opset=13)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum(rng, exclusive, reverse, axis):
    x = _f32(rng, 5, 7)
    check("CumSum", [("x", x), ("=a", i64(axis))], opset=14, exclusive=exclusive, reverse=reverse)


@settings(max_examples=examples(8), deadline=None, derandomize=True)
@given(
    shape=st.lists(st.integers(1, 40), min_size=1, max_size=3),
    data=st.data(),
    exclusive=st.integers(0, 1),
    reverse=st.integers(0, 1),
)
def test_cumsum_blocks_match_numpy(shape, data, exclusive, reverse):  # noqa: ANN001
    """The two-level CumSum (blocks of ceil(sqrt(n))) on random shapes, lengths that are
    and are not squares, every axis and mode, against numpy's running sum."""
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(len(shape) * 100 + shape[0]).standard_normal(shape).astype("float32")
    want = np.flip(x, axis) if reverse else x
    want = np.cumsum(want.astype(np.float64), axis=axis)
    if exclusive:
        want = want - (np.flip(x, axis) if reverse else x)
    want = np.flip(want, axis) if reverse else want
    model = node_model(
        "CumSum", [("x", x), ("=a", i64(axis))], opset=14, exclusive=exclusive, reverse=reverse
    )
    (got,) = ember.compile(model, target="llvm").run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_cumsum_int(rng):
    x = rng.integers(-9, 9, (3, 6)).astype(np.int32)
    check("CumSum", [("x", x), ("=a", np.array(1, np.int32))], opset=14)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis,k", [(-1, 3), (0, 2), (1, 5)])
def test_topk(rng, largest, axis, k):
    x = _f32(rng, 4, 5, 6)
    check("TopK", [("x", x), ("=k", i64(k))], n_outputs=2, opset=11, axis=axis, largest=largest)


def test_topk_ties_keep_order_and_opset_1(rng):
    x = rng.integers(0, 3, (3, 8)).astype(np.float32)
    check("TopK", [("x", x), ("=k", i64(4))], n_outputs=2, opset=11)
    check("TopK", [("x", _f32(rng, 3, 7))], n_outputs=2, opset=1, k=2)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_large_k_ranks_every_element(rng, largest):
    """k above SELECT_MAX_K takes the O(n*n) ranking path instead of k selection passes."""
    x = rng.integers(-5, 5, (3, 14)).astype(np.float32)
    check("TopK", [("x", x), ("=k", i64(11))], n_outputs=2, opset=11, largest=largest)


@settings(max_examples=examples(10), deadline=None)
@given(st.integers(1, 12), st.integers(1, 4), st.booleans(), st.data())
def test_topk_property(n, rows, largest, data):
    k = data.draw(st.integers(1, n))
    x = np.random.default_rng(n).integers(-4, 4, (rows, n)).astype(np.float32)
    check("TopK", [("x", x), ("=k", i64(k))], n_outputs=2, opset=11, largest=int(largest))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(rng, axis):
    idx = rng.integers(-6, 6, (3, 4)).astype(np.int64)
    values = np.array([-0.5, 2.0], np.float32)
    check("OneHot", [("i", idx), ("=d", np.array(6, np.int64)), ("v", values)], opset=11, axis=axis)


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(rng, batch_axis, time_axis):
    x = _f32(rng, 5, 4, 3) if time_axis == 0 else _f32(rng, 4, 5, 3)
    lens = np.array([5, 1, 3, 2], dtype=np.int64)
    check(
        "ReverseSequence",
        [("x", x), ("l", lens)],
        opset=10,
        batch_axis=batch_axis,
        time_axis=time_axis,
    )


def test_constant_producing_ops(rng):
    x = _f32(rng, 3, 5)
    check("Size", [("x", x)], opset=13)
    check("EyeLike", [("x", x)], opset=9, k=1)
    check("EyeLike", [("x", x)], opset=9, k=-2, dtype=7)
    check("NonZero", [("=c", rng.integers(0, 2, (3, 4)).astype(np.float32))], opset=13)
    check(
        "Range",
        [
            ("=a", np.array(2.5, np.float32)),
            ("=b", np.array(-4, np.float32)),
            ("=c", np.array(-1.5, np.float32)),
        ],
        opset=11,
    )
    check(
        "Range",
        [("=a", i64(3).reshape(())), ("=b", i64(17).reshape(())), ("=c", i64(4).reshape(()))],
        opset=11,
    )
    from onnx import numpy_helper

    value = numpy_helper.from_array(np.array([3], np.int32))
    check("ConstantOfShape", [("=s", i64(2, 3))], opset=9, value=value)


@pytest.mark.parametrize("start,end", [(1, None), (-2, None), (0, -1), (-10, 10)])
def test_shape_start_end(rng, start, end):
    attrs = {"start": start} if end is None else {"start": start, "end": end}
    check("Shape", [("x", _f32(rng, 2, 3, 4))], opset=15, **attrs)


def test_nonzero_of_a_runtime_input_compiles_per_value(rng):
    """Its output's shape depends on the data: the model compiles per distinct input."""
    x = _f32(rng, 3, 5)
    x[x < 0.3] = 0
    check("NonZero", [("x", x)], opset=13)
    check("NonZero", [("x", np.zeros((3, 5), np.float32))], opset=13)


def test_gather_float_indices_is_an_error(rng):
    model = node_model("GatherElements", [("x", _f32(rng, 3, 2)), ("i", _f32(rng, 3, 2))], opset=13)
    with pytest.raises(ember.EmberError):
        ember.compile(model, target="llvm")


@settings(max_examples=examples(8), deadline=None, derandomize=True)
@given(
    shape=st.lists(st.integers(1, 30), min_size=1, max_size=3),
    data=st.data(),
    exclusive=st.integers(0, 1),
    reverse=st.integers(0, 1),
)
def test_cumprod_blocks_match_numpy(shape, data, exclusive, reverse):  # noqa: ANN001
    """CumProd (opset 26) on the same two levels, against numpy's running product of
    values near 1 (so long axes neither overflow nor vanish)."""
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(len(shape) * 100 + shape[0])
    x = (1 + 0.2 * rng.standard_normal(shape)).astype("float32")
    src = np.flip(x, axis) if reverse else x
    if exclusive:  # a 1 in front, the last element dropped
        ones = np.ones_like(np.take(src, [0], axis=axis))
        src = np.concatenate([ones, np.delete(src, -1, axis=axis)], axis=axis)
    want = np.cumprod(src.astype(np.float64), axis=axis)
    want = np.flip(want, axis) if reverse else want
    model = node_model(
        "CumProd", [("x", x), ("=a", i64(axis))], opset=26, exclusive=exclusive, reverse=reverse
    )
    (got,) = ember.compile(model, target="llvm").run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("stash", [None, 1, 11, 7])
def test_range_float16_follows_the_reference_with_each_stash_type(stash):
    """Range 27 steps float16 in float32 (or float64: ``stash_type=11``) and rounds each
    element, against onnx.reference across float16's spacing of 2 above 2048; another
    stash type is refused."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    attrs = {} if stash is None else {"stash_type": stash}
    consts = [
        helper.make_tensor(n, TensorProto.FLOAT16, [], [v])
        for n, v in (("s", 2040.0), ("l", 2061.0), ("d", 1.0))
    ]
    node = helper.make_node("Range", ["s", "l", "d"], ["y"], **attrs)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [21])
    graph = helper.make_graph([node], "g", [], [out], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    if stash == 7:
        with pytest.raises(ember.ArgumentError, match="stash_type must be 1"):
            ember.compile(model, target="llvm")
        return
    want = ReferenceEvaluator(model).run(None, {})[0]
    got = ember.compile(model, target="llvm").run({})[0]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
