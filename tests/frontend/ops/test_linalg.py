"""Einsum through Ember vs onnxruntime and numpy, over the common equation forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember.tir.topi.einsum import parse_einsum
from tests.frontend.onnx_models import check_against_ort, make_model
from tests.nightly import examples

EINSUM_CASES = [
    ("ij,jk->ik", [(3, 5), (5, 4)]),  # matmul
    ("bij,bjk->bik", [(2, 3, 5), (2, 5, 4)]),  # batch matmul
    ("ij->ji", [(3, 7)]),  # transpose
    ("ijk->", [(2, 3, 4)]),  # full sum
    ("ijk->j", [(2, 3, 4)]),  # partial sum
    ("i,j->ij", [(3,), (5,)]),  # outer product
    ("i,i", [(6,)] * 2),  # inner product, implicit output
    ("ii->i", [(4, 4)]),  # diagonal
    ("ii", [(5, 5)]),  # trace
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (1, 3, 5, 2)]),  # broadcast batch
    ("bii->bi", [(3, 4, 4)]),  # batch diagonal
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),  # chain
    ("ba", [(3, 4)]),  # implicit: sorted labels -> transpose
    ("...j,j", [(2, 3, 5), (5,)]),
]


def _einsum_model(eq, arrays):
    from onnx import helper

    names = [f"x{i}" for i in range(len(arrays))]
    node = helper.make_node("Einsum", names, ["y"], name="einsum_node", equation=eq)
    return make_model([node], dict(zip(names, arrays)), ["y"], opset=12)


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES)
def test_einsum(rng, eq, shapes):
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    model = _einsum_model(eq, arrays)
    got = ember.compile(model, target="llvm").run(feeds)[0]
    want = np.einsum(eq, *[a.astype(np.float64) for a in arrays])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("eq,shapes", [EINSUM_CASES[i] for i in (0, 1, 2, 4, 5, 9)])
def test_einsum_against_ort(rng, eq, shapes):
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    check_against_ort(_einsum_model(eq, arrays), feeds, rtol=1e-4, atol=1e-4)


def test_einsum_int64(rng):
    a, b = rng.integers(-5, 5, (3, 4)), rng.integers(-5, 5, (4, 2))
    got = ember.compile(_einsum_model("ij,jk->ik", [a, b]), target="llvm").run({"x0": a, "x1": b})
    np.testing.assert_array_equal(got[0], a @ b)


@pytest.mark.parametrize(
    "eq,shapes,msg",
    [
        ("ij,jk->ik", [(3, 5), (4, 2)], "label 'j'"),
        ("ij->ik", [(3, 5)], "output labels"),
        ("ij,jk", [(3, 5)], "terms for 1 inputs"),
        ("i1->i", [(3, 5)], "not valid"),
        ("ijk->i", [(3, 5)], "labels for 2 dims"),
    ],
)
def test_einsum_bad_equations_raise(eq, shapes, msg):
    with pytest.raises(ember.ArgumentError, match=msg):
        parse_einsum(eq, shapes)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_einsum_property(data):
    """Random two-operand equations over labels a-e with random output subsets."""
    letters = "abcde"
    sizes = {c: data.draw(st.integers(1, 4)) for c in letters}
    t1 = data.draw(st.lists(st.sampled_from(letters), min_size=1, max_size=3, unique=True))
    t2 = data.draw(st.lists(st.sampled_from(letters), min_size=1, max_size=3, unique=True))
    used = sorted(set(t1) | set(t2))
    out = data.draw(st.lists(st.sampled_from(used), max_size=len(used), unique=True))
    eq = f"{''.join(t1)},{''.join(t2)}->{''.join(out)}"
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    a = rng.standard_normal([sizes[c] for c in t1]).astype("float32")
    b = rng.standard_normal([sizes[c] for c in t2]).astype("float32")
    got = ember.compile(_einsum_model(eq, [a, b]), target="llvm").run({"x0": a, "x1": b})[0]
    want = np.einsum(eq, a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_einsum_ellipsis_right_aligns_like_numpy():
    spec = parse_einsum("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 2)])
    assert spec.inputs[1] == (".1", "j", "k")
    assert tuple(spec.sizes[lab] for lab in spec.output) == (2, 3, 4, 2)
    assert spec.reduced == ("j",)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (2, 3, 3), (2, 1, 4, 4)])
def test_det(rng, shape):
    from onnx import helper

    x = rng.standard_normal(shape).astype("float32")
    node = helper.make_node("Det", ["x"], ["y"], name="det_node")
    check_against_ort(make_model([node], {"x": x}, ["y"], opset=11), {"x": x}, rtol=1e-4, atol=1e-4)


def test_det_too_large_is_rejected(rng):
    from onnx import helper

    x = rng.standard_normal((6, 6)).astype("float32")
    node = helper.make_node("Det", ["x"], ["y"], name="det_node")
    with pytest.raises(ember.ArgumentError, match="det_node"):
        ember.compile(make_model([node], {"x": x}, ["y"], opset=11), target="llvm")
