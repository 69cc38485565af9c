"""``ai.onnx.ml`` TreeEnsemble and ArrayFeatureExtractor on random forests and data.

Forests are drawn at random (depths, features, every comparison mode, set members,
missing-value tracking, several targets) over features from a small set of values with
NaNs among them, so equal, member and missing cases all occur, and checked against a
walk of the trees written here from the operator's text, one sample at a time, against
ONNX's reference (which ignores post_transform) and against onnxruntime (whose
post_transform numbers 1 and 2 are swapped against ONNX's text). ArrayFeatureExtractor
is checked against onnxruntime.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from tests.nightly import examples

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ML = "ai.onnx.ml"
VALUES = np.array([-1.5, 0.0, 1.0, 2.5, 4.0])  # the features' values, with NaN


def random_forest(
    rng, features, trees, targets, modes, max_depth=4, leaf_prob=0.3, member_values=VALUES,
    dtype=np.float32,
):  # fmt: skip
    """ONNX TreeEnsemble attributes of a random forest, its nodes numbered in preorder
    (true branch first), the order ONNX's reference reads set members in."""
    nodes: list[dict[str, Any]] = []
    leaves: list[tuple[float, int]] = []

    def grow(depth: int) -> tuple[int, int]:  # (index, is_leaf)
        if depth == max_depth or (depth and rng.random() < leaf_prob):
            leaves.append((float(rng.uniform(-3, 3)), int(rng.integers(targets))))
            return len(leaves) - 1, 1
        mode = int(rng.choice(modes))
        node = {
            "feature": int(rng.integers(features)),
            "mode": mode,
            "split": float(rng.choice(VALUES)) + (0.0 if rng.random() < 0.5 else 0.3),
            "missing": int(rng.random() < 0.4),
            "members": sorted(rng.choice(member_values, int(rng.integers(1, 4)), replace=False)),
        }
        nodes.append(node)
        index = len(nodes) - 1
        node["true"] = grow(depth + 1)
        node["false"] = grow(depth + 1)
        return index, 0

    roots = [grow(0)[0] for _ in range(trees)]
    members = [v for n in nodes if n["mode"] == 6 for v in [*n["members"], math.nan]]
    attrs = {
        "nodes_featureids": [n["feature"] for n in nodes],
        "nodes_modes": numpy_helper.from_array(
            np.array([n["mode"] for n in nodes], np.uint8), "nodes_modes"
        ),
        "nodes_splits": numpy_helper.from_array(
            np.array([n["split"] for n in nodes], dtype), "nodes_splits"
        ),
        "nodes_truenodeids": [n["true"][0] for n in nodes],
        "nodes_trueleafs": [n["true"][1] for n in nodes],
        "nodes_falsenodeids": [n["false"][0] for n in nodes],
        "nodes_falseleafs": [n["false"][1] for n in nodes],
        "nodes_missing_value_tracks_true": [n["missing"] for n in nodes],
        "leaf_weights": numpy_helper.from_array(
            np.array([w for w, _ in leaves], dtype), "leaf_weights"
        ),
        "leaf_targetids": [t for _, t in leaves],
        "tree_roots": roots,
        "n_targets": targets,
    }
    if members:
        attrs["membership_values"] = numpy_helper.from_array(
            np.array(members, dtype), "membership_values"
        )
    return attrs


def _array(attrs, name):
    a = attrs[name]
    return numpy_helper.to_array(a) if isinstance(a, onnx.TensorProto) else np.asarray(a)


def np_tree_ensemble(x, attrs, aggregate=1, transform=0):
    """TreeEnsemble from its text: walk each tree per sample, aggregate, transform."""
    feature = _array(attrs, "nodes_featureids")
    modes = _array(attrs, "nodes_modes")
    splits = _array(attrs, "nodes_splits").astype(x.dtype)
    missing = _array(attrs, "nodes_missing_value_tracks_true")
    weights = _array(attrs, "leaf_weights").astype(np.float64)
    target = _array(attrs, "leaf_targetids")
    members, sets = _array(attrs, "membership_values") if "membership_values" in attrs else [], []
    current: list[float] = []
    for v in members:
        if np.isnan(v):
            sets.append(set(current))
            current = []
        else:
            current.append(float(v))
    set_of = dict(zip(np.flatnonzero(modes == 6), sets))
    tests = [np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal]
    n_targets = attrs["n_targets"]
    trees = len(attrs["tree_roots"])
    info = np.finfo(x.dtype)
    start = {0: 0.0, 1: 0.0, 2: float(info.max), 3: float(info.min)}[aggregate]
    out = np.full((len(x), n_targets), start)
    for b, row in enumerate(x):
        for root in attrs["tree_roots"]:
            at, leaf = root, False
            while not leaf:
                v = row[feature[at]]
                if modes[at] == 6:
                    go = float(v) in set_of[at]
                else:
                    go = bool(tests[modes[at]](v, splits[at]))
                go = go or bool(missing[at] and np.isnan(v))
                side = "true" if go else "false"
                at, leaf = attrs[f"nodes_{side}nodeids"][at], attrs[f"nodes_{side}leafs"][at]
            w, t = weights[at], target[at]
            if aggregate in (0, 1):
                out[b, t] += w / trees if aggregate == 0 else w
            else:
                out[b, t] = (min if aggregate == 2 else max)(out[b, t], w)
    if transform == 1:
        e = np.exp(out - out.max(axis=1, keepdims=True))
        out = e / e.sum(axis=1, keepdims=True)
    elif transform == 2:
        out = 1 / (1 + np.exp(-out))
    elif transform == 3:
        nz = np.abs(out) > 1e-7
        e = np.where(nz, np.exp(out - out.max(axis=1, keepdims=True)), 0.0)
        out = e / e.sum(axis=1, keepdims=True)
    elif transform == 4:
        from scipy.special import erfinv

        out = np.sqrt(2) * erfinv(2 * out - 1)
    return out.astype(x.dtype)


def tree_model(x, attrs, aggregate=1, transform=0):
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, aggregate_function=aggregate,
        post_transform=transform, **attrs,
    )  # fmt: skip
    code = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [node],
        "forest",
        [helper.make_tensor_value_info("X", code, list(x.shape))],
        [helper.make_tensor_value_info("Y", code, [x.shape[0], attrs["n_targets"]])],
    )
    opsets = [helper.make_opsetid(ML, 5), helper.make_opsetid("", 21)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def samples(rng, n, features, dtype=np.float32, nan=0.15):
    x = rng.choice(VALUES, (n, features)).astype(dtype)
    x[rng.random(x.shape) < nan] = np.nan
    return x


def _ember(model, x, target="llvm"):
    return ember.compile(model, target=target).run({"X": x})[0]


ALL_MODES = list(range(7))


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_matches_the_walk_and_the_onnx_reference(rng, aggregate):
    from onnx.reference import ReferenceEvaluator

    # the reference ends a member set at a member 0.0 (it tests the value's truth, not NaN)
    members = VALUES[VALUES != 0]
    attrs = random_forest(rng, 5, 7, 3, ALL_MODES, member_values=members)
    x = samples(rng, 37, 5)
    model = tree_model(x, attrs, aggregate)
    got = _ember(model, x)
    np.testing.assert_allclose(got, np_tree_ensemble(x, attrs, aggregate), rtol=1e-5, atol=1e-5)
    want = ReferenceEvaluator(model).run(None, {"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# onnxruntime numbers post_transform LOGISTIC 1 and SOFTMAX 2, ONNX's text the reverse
ORT_TRANSFORM = {0: 0, 1: 2, 2: 1, 3: 3}


@pytest.mark.parametrize("transform", [0, 1, 2, 3])
def test_tree_ensemble_post_transforms_match_onnxruntime(rng, transform):
    ort = pytest.importorskip("onnxruntime")
    attrs = random_forest(rng, 4, 5, 4, [0, 1, 2, 3, 4, 5], dtype=np.float64)
    x = samples(rng, 23, 4, np.float64)
    got = _ember(tree_model(x, attrs, 1, transform), x)
    np.testing.assert_allclose(got, np_tree_ensemble(x, attrs, 1, transform), rtol=1e-6)
    ort_model = tree_model(x, attrs, 1, ORT_TRANSFORM[transform])
    sess = ort.InferenceSession(ort_model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, {"X": x})[0], rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_probit(rng, dtype):
    """An AVERAGE of leaf weights in (0, 1) is a probability; its normal quantile is
    right to Giles' approximation's accuracy."""
    pytest.importorskip("scipy")
    attrs = random_forest(rng, features=3, trees=4, targets=1, modes=[0, 3])
    weights = rng.uniform(0.02, 0.98, len(attrs["leaf_targetids"]))
    attrs["leaf_weights"] = numpy_helper.from_array(weights.astype(np.float32), "leaf_weights")
    x = samples(rng, 19, 3, dtype)
    got = _ember(tree_model(x, attrs, 0, 4), x)
    np.testing.assert_allclose(got, np_tree_ensemble(x, attrs, 0, 4), rtol=2e-6, atol=2e-6)


def test_tree_ensemble_float16_and_a_one_leaf_tree(rng):
    """float16 features (compared widened); a tree that is one leaf (a node whose two
    branches name the same leaf) gives that leaf."""
    attrs = random_forest(rng, features=3, trees=3, targets=2, modes=[0, 4])
    attrs["nodes_featureids"].append(0)
    attrs["nodes_truenodeids"].append(0)
    attrs["nodes_falsenodeids"].append(0)
    attrs["nodes_trueleafs"].append(1)
    attrs["nodes_falseleafs"].append(1)
    attrs["nodes_missing_value_tracks_true"].append(0)
    for name in ("nodes_modes", "nodes_splits"):
        a = numpy_helper.to_array(attrs[name])
        attrs[name] = numpy_helper.from_array(np.append(a, a[:1]), name)
    attrs["tree_roots"].append(len(attrs["nodes_featureids"]) - 1)
    x = samples(rng, 11, 3, np.float16)
    got = _ember(tree_model(x, attrs), x)
    want = np_tree_ensemble(x.astype(np.float32), attrs).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3)


@settings(max_examples=examples(10), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    features=st.integers(1, 6),
    trees=st.integers(1, 9),
    targets=st.integers(1, 4),
    depth=st.integers(1, 6),
    modes=st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True),
    aggregate=st.integers(0, 3),
    n=st.integers(1, 13),
)
def test_tree_ensemble_property(seed, features, trees, targets, depth, modes, aggregate, n):
    """Random forests of every shape and mode mix: the tables' walk and the text's agree."""
    rng = np.random.default_rng(seed)
    attrs = random_forest(rng, features, trees, targets, modes, max_depth=depth)
    x = samples(rng, n, features)
    got = _ember(tree_model(x, attrs, aggregate), x)
    np.testing.assert_allclose(got, np_tree_ensemble(x, attrs, aggregate), rtol=1e-5, atol=1e-5)


@pytest.mark.nvrtc
def test_tree_ensemble_on_cuda(rng, monkeypatch):
    """The generic CUDA schedule of the walk, in the emulator (which checks every load)."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    attrs = random_forest(rng, features=4, trees=3, targets=2, modes=ALL_MODES)
    x = samples(rng, 9, 4)
    got = _ember(tree_model(x, attrs), x, target="cuda")
    np.testing.assert_allclose(got, np_tree_ensemble(x, attrs), rtol=1e-5, atol=1e-5)


def test_tree_ensemble_refuses_a_cycle(rng):
    attrs = random_forest(rng, features=2, trees=1, targets=1, modes=[0], leaf_prob=0.0)
    attrs["nodes_truenodeids"][1], attrs["nodes_trueleafs"][1] = 0, 0
    x = samples(rng, 3, 2)
    with pytest.raises(ember.ArgumentError, match="cycle"):
        ember.compile(tree_model(x, attrs), target="llvm")


# ---- ArrayFeatureExtractor ---------------------------------------------------------


def _afe_model(x, idx):
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    out = (*x.shape[:-1], idx.size) if x.ndim > 1 else (1, idx.size)
    graph = helper.make_graph(
        [node],
        "afe",
        [
            helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape),
            helper.make_tensor_value_info("i", TensorProto.INT64, idx.shape),
        ],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), out)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(ML, 1), helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    return model


@pytest.mark.parametrize(
    "shape, idx",
    [
        ((3, 7), [[6, 0, 3]]),
        ((2, 3, 5), [4, 4, 1, 0]),
        ((9,), [8, 2]),
        ((4, 5), [[1, 2], [3, 0]]),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_array_feature_extractor_matches_onnxruntime(rng, shape, idx, dtype):
    ort = pytest.importorskip("onnxruntime")
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    i = np.array(idx, np.int64)
    model = _afe_model(x, i)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "i": i})[0]
    got = ember.compile(model, target="llvm").run({"x": x, "i": i})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_array_feature_extractor_refuses_an_index_out_of_range(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    lib = ember.compile(_afe_model(x, np.array([0, 1], np.int64)), target="llvm")
    with pytest.raises(ember.ArgumentError, match="outside"):
        lib.run({"x": x, "i": np.array([1, 4], np.int64)})
