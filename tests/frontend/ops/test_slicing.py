"""Slice, Split, Pad, Tile, Expand, DepthToSpace/SpaceToDepth, Compress, Trilu vs onnxruntime."""

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


SLICES = [
    # starts, ends, axes, steps
    ([1, 0], [3, 5], None, None),
    ([-4, 1], [100, -1], [2, 1], [1, 2]),
    ([5, -1], [-100, 0], [1, 2], [-1, -2]),
    ([0], [-1], [-1], [3]),
    ([1000], [-1000], [0], [-1]),
    ([2**62], [-(2**62)], [1], [-3]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice_inputs(rng, starts, ends, axes, steps):
    x = _f32(rng, 3, 7, 6)
    slots = [("x", x), ("=s", i64(*starts)), ("=e", i64(*ends))]
    slots.append(("=a", i64(*axes)) if axes is not None else None)
    slots.append(("=t", i64(*steps)) if steps is not None else None)
    check("Slice", slots, opset=13)


def test_slice_attributes_before_opset_10(rng):
    x = _f32(rng, 5, 6, 3)
    check("Slice", [("x", x)], opset=9, starts=[1, -4], ends=[100, -1], axes=[0, 1])
    check("Slice", [("x", x)], opset=9, starts=[0, 1, 1], ends=[2, 5, 3])


@settings(max_examples=examples(15), deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.data(),
)
def test_slice_property(shape, data):
    """Any in-range-or-clamped (start, end, step) on any axis agrees with onnxruntime."""
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype("float32")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    step = data.draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))
    start = data.draw(st.integers(-n - 2, n + 2))
    end = data.draw(st.integers(-n - 2, n + 2))
    if len(range(*slice(start, end, step).indices(n))) == 0:
        return  # a zero-size result: Ember does not support zero-size tensors
    slots = [("x", x), ("=s", i64(start)), ("=e", i64(end)), ("=a", i64(axis)), ("=t", i64(step))]
    check("Slice", slots, opset=13)


@pytest.mark.parametrize("start", [1, -2])
def test_slice_of_a_runtime_start_compiles_per_value(rng, start):
    check("Slice", [("x", _f32(rng, 4, 5)), ("s", i64(start)), ("=e", i64(3))], opset=13)


def _slice_from_run_time_starts(shape, axes, size):
    """A model slicing ``size`` elements from run-time starts ``s`` (ends ``s + size``)."""
    from onnx import TensorProto, helper

    out = [size if d in axes else n for d, n in enumerate(shape)]
    c = helper.make_tensor("c", TensorProto.INT64, [], [size])
    nodes = [
        helper.make_node("Constant", [], ["c"], value=c),
        helper.make_node("Add", ["s", "c"], ["e"]),
        helper.make_node("Slice", ["x", "s", "e", "a"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "slice",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("s", TensorProto.INT64, [len(axes)]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [helper.make_tensor("a", TensorProto.INT64, [len(axes)], axes)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _onnx_slice(x, starts, axes, size):
    index = [slice(None)] * x.ndim
    for a, s in zip(axes, starts):
        index[a] = slice(s, s + size)
    return x[tuple(index)]


@settings(max_examples=examples(12), deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.data(),
)
def test_slice_of_run_time_starts_with_a_static_length(shape, data):
    """Ends that are the run-time starts plus a constant: one compile serves every start;
    a start ONNX would clamp (a shorter result) is refused at run time."""
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    size = data.draw(st.integers(1, min(shape[a] for a in axes)))
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype("float32")
    lib = ember.compile(_slice_from_run_time_starts(shape, axes, size), target="llvm")
    for _ in range(4):
        starts = [data.draw(st.integers(-shape[a] - 2, shape[a] + 2)) for a in axes]
        want = _onnx_slice(x, starts, axes, size)
        feeds = {"x": x, "s": np.array(starts, np.int64)}
        if any(want.shape[a] != size for a in axes):
            with pytest.raises(ember.ArgumentError, match="outside"):
                lib.run(feeds)
        else:
            np.testing.assert_array_equal(lib.run(feeds)[0], want)


def test_slice_of_run_time_starts_needs_no_constant(rng):
    """The import takes the starts as a run-time input (no compile per value)."""
    graph = ember.frontend.from_onnx(_slice_from_run_time_starts([5, 7], [1, 0], 2))
    assert "gather" in {n.op for n in graph.nodes}
    lib = ember.compile(graph, target="llvm")
    x = _f32(rng, 5, 7)
    got = lib.run({"x": x, "s": np.array([-3, 1], np.int64)})[0]
    np.testing.assert_array_equal(got, x[1:3, 4:6])


def test_slice_step_zero_is_an_error(rng):
    model = node_model(
        "Slice", [("x", _f32(rng, 4)), ("=s", i64(0)), ("=e", i64(3)), None, ("=t", i64(0))]
    )
    with pytest.raises(ember.ArgumentError, match="step of 0"):
        ember.compile(model, target="llvm")


@pytest.mark.parametrize(
    "opset,attrs,split",
    [
        (11, {"axis": 1, "split": [2, 3, 2]}, None),
        (11, {"axis": -1}, None),
        (13, {"axis": 0}, [1, 4]),
        (18, {"axis": 1, "num_outputs": 3}, None),  # 7 -> 3, 3, 1
        (18, {"axis": 2, "num_outputs": 2}, None),  # 5 -> 3, 2
    ],
)
def test_split(rng, opset, attrs, split):
    x = _f32(rng, 5, 7, 6 if attrs["axis"] == -1 else 5)
    n = len(split) if split else attrs.get("num_outputs", len(attrs.get("split", [0, 0, 0])))
    if attrs.get("axis") == -1:
        n = 2
    slots = [("x", x), ("=sp", i64(*split)) if split else None]
    check("Split", slots, n_outputs=n, opset=opset, **attrs)


def test_split_uneven_without_num_outputs_is_an_error(rng):
    model = node_model("Split", [("x", _f32(rng, 7))], n_outputs=2, opset=13)
    with pytest.raises(ember.ArgumentError, match="split_node"):
        ember.compile(model, target="llvm")


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [[0, 1, 2, 1, 2, 0], [1, 0, -1, 2, 3, 1]])
def test_pad_modes(rng, mode, pads):
    x = _f32(rng, 3, 5, 4)
    slots = [("x", x), ("=p", i64(*pads)), ("=v", np.array(1.5, np.float32))]
    check("Pad", slots, opset=13, mode=mode)


def test_pad_wrap_and_axes_opset_19(rng):
    x = _f32(rng, 2, 5, 3)
    check("Pad", [("x", x), ("=p", i64(2, 1, 4, 0, 2, 2))], opset=19, mode="wrap")
    check("Pad", [("x", x), ("=p", i64(1, 2, 3, 1)), None, ("=a", i64(0, -1))], opset=19)


def test_pad_attribute_before_opset_11(rng):
    x = _f32(rng, 3, 4)
    check("Pad", [("x", x)], opset=10, pads=[1, 2, 0, 3], value=-2.0)
    check("Pad", [("x", x)], opset=2, pads=[2, 1, 1, 2], mode="reflect")


def test_pad_int_data(rng):
    x = rng.integers(-50, 50, (4, 3)).astype(np.int32)
    check("Pad", [("x", x), ("=p", i64(1, 0, 2, 2)), ("=v", np.array(7, np.int32))], opset=13)


@settings(max_examples=examples(12), deadline=None)
@given(
    st.lists(st.integers(2, 5), min_size=1, max_size=3),
    st.sampled_from(["constant", "reflect", "edge"]),
    st.data(),
)
def test_pad_property(shape, mode, data):
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    lo = 0 if mode == "constant" else None
    pads = [
        data.draw(st.integers(lo or 0, min(shape[k % len(shape)] - 1, 3)))
        for k in range(2 * len(shape))
    ]
    check("Pad", [("x", x), ("=p", i64(*pads))], opset=13, mode=mode)


def test_pad_bad_mode_is_an_error(rng):
    model = node_model("Pad", [("x", _f32(rng, 3)), ("=p", i64(1, 1))], opset=13, mode="mirror")
    with pytest.raises(ember.ArgumentError, match="pad_node"):
        ember.compile(model, target="llvm")


@pytest.mark.parametrize("reps", [(2, 1, 3), (1, 3, 1)])
def test_tile(rng, reps):
    check("Tile", [("x", _f32(rng, 2, 3, 5)), ("=r", i64(*reps))], opset=13)


@pytest.mark.parametrize(
    "shape,target", [((3, 1), (2, 3, 4)), ((1, 5), (3, 1)), ((4,), (2, 1, 4)), ((2, 3), (2, 3))]
)
def test_expand(rng, shape, target):
    check("Expand", [("x", _f32(rng, *shape)), ("=s", i64(*target))], opset=13)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(rng, mode):
    check("DepthToSpace", [("x", _f32(rng, 2, 12, 3, 5))], opset=13, blocksize=2, mode=mode)


def test_space_to_depth(rng):
    check("SpaceToDepth", [("x", _f32(rng, 2, 3, 6, 9))], opset=13, blocksize=3)


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_compress(rng, axis):
    x = _f32(rng, 4, 5)
    cond = np.array([1, 0, 1, 1, 0], dtype=bool)[: 4 if axis == 0 else 5]
    attrs = {} if axis is None else {"axis": axis}
    check("Compress", [("x", x), ("=c", cond)], opset=11, **attrs)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -2, 1, 4])
def test_trilu(rng, upper, k):
    x = _f32(rng, 2, 5, 4)
    check("Trilu", [("x", x), ("=k", i64(k)) if k is not None else None], opset=14, upper=upper)


def _chain_model(x):
    """Slice -> Pad (reflect) -> Add -> Tile -> Transpose -> DepthToSpace: injective ops that
    fuse with each other and with elementwise ones."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(v, k)
        for k, v in {
            "s": i64(1, 0), "e": i64(-1, 100), "a": i64(2, 3), "t": i64(1, 2),
            "p": i64(0, 0, 1, 2, 0, 0, 2, 1), "r": i64(1, 2, 1, 1),
            "b": np.float32(0.25).reshape(1),
        }.items()
    ]  # fmt: skip
    nodes = [
        helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y1"]),
        helper.make_node("Pad", ["y1", "p"], ["y2"], mode="reflect"),
        helper.make_node("Add", ["y2", "b"], ["y3"]),
        helper.make_node("Tile", ["y3", "r"], ["y4"]),
        helper.make_node("Transpose", ["y4"], ["y5"], perm=[0, 1, 3, 2]),
        helper.make_node("DepthToSpace", ["y5"], ["y"], blocksize=2, mode="CRD"),
    ]
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("target", ["llvm", pytest.param("cuda", marks=pytest.mark.nvrtc)])
def test_chain_of_injective_ops_fuses_and_matches(rng, monkeypatch, target):
    from tests.frontend.onnx_models import run_ort

    if target == "cuda":
        pytest.importorskip("cuda")
        monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    x = _f32(rng, 1, 2, 7, 9)
    model = _chain_model(x)
    want = run_ort(model, {"x": x})[0]
    got = ember.compile(model, target=target).run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
