"""Products with constant weights run on pre-packed panels (``pack_dense_weights``): the
rewrite is checked on the graph, and every form against onnxruntime on odd shapes."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import ember
from ember.frontend.passes import pack_dense_weights
from ember.frontend.passes.pack_dense_weights import pack_panels, panel_width
from tests.frontend.onnx_models import check_against_ort, make_model
from tests.nightly import examples

pytest.importorskip("onnxruntime")


def _matmul(rng, a_shape, n):
    k = a_shape[-1]
    w = rng.standard_normal((k, n)).astype("float32")
    x = rng.standard_normal(a_shape).astype("float32")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    return make_model([node], {"x": x}, ["y"], {"w": w}), {"x": x}


def test_panels_hold_the_weights_with_zeros_past_n():
    w = np.arange(15, dtype="float32").reshape(3, 5)
    p = pack_panels(w, 4)
    assert p.shape == (2, 3, 4)
    np.testing.assert_array_equal(p[0], w[:, :4])
    np.testing.assert_array_equal(p[1][:, 0], w[:, 4])
    assert not p[1][:, 1:].any()


def test_the_rewrite_on_the_graph(avx512_tiles):
    model, _ = _matmul(np.random.default_rng(0), (7, 13), 70)
    g = ember.frontend.from_onnx(model)
    packed = pack_dense_weights(g).verify()
    (node,) = packed.nodes
    assert node.op == "dense_packed" and node.attrs == {"n": 70}
    assert packed.params[node.inputs[1]].shape == (2, 13, 64)
    assert "w" not in packed.params  # the unpacked copy is gone


@settings(max_examples=examples(15), deadline=None, derandomize=True)
@given(
    st.lists(st.integers(1, 5), min_size=0, max_size=2),
    st.integers(1, 37),
    st.integers(1, 41),
    st.integers(1, 150),
)
def test_matmul_with_constant_weights(batch, m, k, n):
    model, feeds = _matmul(np.random.default_rng(m * k + n), (*batch, m, k), n)
    check_against_ort(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "trans_b, alpha, beta, c_shape",
    [
        (1, 1.0, 1.0, (19,)),
        (0, 1.0, 0.5, (1, 19)),
        (1, 1.0, 2.0, (9, 19)),
        (1, 0.5, 1.0, (19,)),
        (0, 1.0, 1.0, None),
    ],
)
def test_gemm_forms(trans_b, alpha, beta, c_shape):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((9, 23)).astype("float32")
    w = rng.standard_normal((19, 23) if trans_b else (23, 19)).astype("float32")
    inits = {"w": w}
    ins = ["x", "w"]
    if c_shape is not None:
        inits["c"] = rng.standard_normal(c_shape).astype("float32")
        ins.append("c")
    node = helper.make_node("Gemm", ins, ["y"], name="g", transB=trans_b, alpha=alpha, beta=beta)
    model = make_model([node], {"x": x}, ["y"], inits)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)
    ops = [n.op for n in ember.compile(model).graph.nodes]
    assert ("dense_packed" in ops) == (alpha == 1.0)


def test_weights_that_are_inputs_are_not_packed():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 8)).astype("float32")
    w = rng.standard_normal((8, 3)).astype("float32")
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x, "w": w}, ["y"])
    check_against_ort(model, {"x": x, "w": w})
    assert [n.op for n in ember.compile(model).graph.nodes] == ["matmul"]


@pytest.mark.nvrtc
def test_packed_weights_on_cuda_in_the_emulator(monkeypatch):
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    model, feeds = _matmul(np.random.default_rng(6), (2, 5, 17), 33)
    lib = ember.compile(model, target="cuda -arch=sm_80")
    assert [n.op for n in lib.graph.nodes] == ["dense_packed"]
    want = feeds["x"] @ np.asarray(
        [i.float_data or np.frombuffer(i.raw_data, "float32") for i in model.graph.initializer][0]
    ).reshape(17, 33)
    np.testing.assert_allclose(lib.run(feeds)[0], want, rtol=1e-4, atol=1e-4)


def _cpu_group(rows: tuple[int, ...], k: int, n: int) -> tuple[Any, list[Any], bool]:
    """The CPU kernel of ``dense_packed + bias`` as a model gets it: the strategy's compute
    on panels as the pass packs them, then the group schedule; and whether the product
    spans whole panels (an injective stage keeping N columns reads it)."""
    from ember.codegen_llvm.schedules.generic import schedule_group
    from ember.codegen_llvm.strategy import compute_for
    from ember.tir import te

    nr = panel_width(n)
    a = te.placeholder((*rows, k), "float32", name="a")
    p = te.placeholder((-(-n // nr), k, nr), "float32", name="p")
    b = te.placeholder((n,), "float32", name="b")
    (d,) = compute_for("dense_packed", [a, p], {"n": n})
    out = te.compute(d.shape, lambda *i: d[i] + b[i[-1]], name="out")
    return schedule_group([out]), [a, p, b, out], d.op.name == "dense_packed_cols"


@pytest.mark.parametrize(
    "rows, k, n, whole",
    [
        ((9, 3), 11, 28, True),  # one panel, partly used (an LSTM's 4H gate columns)
        ((27,), 14, 20, True),
        ((8,), 9, 150, True),  # the column edge among other row and column blocks
        ((2, 5), 7, 70, False),  # the edge is the one column block: N stays
        ((1,), 5, 150, False),  # one row block
        ((6,), 5, 128, False),  # no edge
    ],
)
def test_cpu_kernel_spans_whole_panels_where_the_edge_would_run_scalar(
    rows, k, n, whole, avx512_tiles
):
    """Where N ends inside a weight panel and the edge tile would test its lanes against N
    (and run as scalar code), the product spans the whole panels and only the epilogue
    keeps N columns; the result matches numpy, bias and all, either way."""
    s, args, spans = _cpu_group(rows, k, n)
    assert spans == whole
    text = str(ember.lower(s, args))
    if whole:  # the register tile accumulates whole vectors: no lane is updated alone
        assert "dense_packed.local[ramp(" in text
        assert not re.search(r"dense_packed\.local\[(?!ramp\()[^\]]*\] = dense_packed", text)
    rng = np.random.default_rng(n)
    x = rng.standard_normal((*rows, k)).astype("float32")
    w = rng.standard_normal((k, n)).astype("float32")
    bias = rng.standard_normal(n).astype("float32")
    got = np.empty((*rows, n), "float32")
    ember.build(s, args, target="llvm")(x, pack_panels(w, panel_width(n)), bias, got)
    np.testing.assert_allclose(got, x @ w + bias, rtol=1e-5, atol=1e-5)


def _epilogue_group(
    rows: tuple[int, ...], k: int, n: int, tail: str
) -> tuple[Any, list[Any], bool]:
    """``dense_packed`` with an elementwise tail as a fused group has it: bias, erf-GELU
    and a residual (``gelu``), or a transposed read of the product (``transpose``); and
    whether the product spans whole panels (wider than the output)."""
    from ember.codegen_llvm.schedules.generic import schedule_group
    from ember.codegen_llvm.strategy import compute_for
    from ember.tir import te
    from ember.tir.topi.activation import erf

    nr = panel_width(n)
    a = te.placeholder((*rows, k), "float32", name="a")
    p = te.placeholder((-(-n // nr), k, nr), "float32", name="p")
    b = te.placeholder((n,), "float32", name="b")
    r = te.placeholder((*rows, n), "float32", name="r")
    (d,) = compute_for("dense_packed", [a, p], {"n": n})
    biased = te.compute(d.shape, lambda *i: d[i] + b[i[-1]], name="biased")
    if tail == "gelu":
        out = te.compute(
            d.shape,
            lambda *i: biased[i] * 0.5 * (erf(biased[i] * 0.7071067811865476) + 1.0) + r[i],
            name="out",
        )
    else:
        shape = (*rows[:-1], n, rows[-1])
        out = te.compute(shape, lambda *i: biased[(*i[:-2], i[-1], i[-2])] + 1.0, name="out")
    return schedule_group([out]), [a, p, b, r, out], d.op.name == "dense_packed_cols"


@settings(max_examples=examples(12), deadline=None, derandomize=True)
@given(
    st.lists(st.integers(1, 3), min_size=0, max_size=1),
    st.integers(1, 21),
    st.integers(1, 19),
    st.integers(1, 140),
)
def test_an_elementwise_tail_is_applied_to_each_register_tile(lead, m, k, n):
    """Bias, GELU and a residual after a packed GEMM run in the GEMM's own loops: one
    parallel loop and no product buffer, where the product keeps N columns (the
    whole-panel form keeps its buffer); the result matches numpy on odd shapes."""
    rows = (*lead, m)
    s, args, spans = _epilogue_group(rows, k, n, "gelu")
    text = str(ember.lower(s, args))
    product = re.search(r"dense_packed\w* = alloc", text)
    assert text.count("parallel(") <= 1 and bool(product) == spans
    rng = np.random.default_rng(m * k + n)
    x = rng.standard_normal((*rows, k)).astype("float32")
    w = rng.standard_normal((k, n)).astype("float32")
    bias, res = rng.standard_normal(n).astype("float32"), rng.standard_normal((*rows, n))
    got = np.full((*rows, n), np.nan, "float32")
    ember.build(s, args, target="llvm")(x, pack_panels(w, panel_width(n)), bias,
                                        res.astype("float32"), got)  # fmt: skip
    y = x.astype("float64") @ w + bias
    want = y * 0.5 * (1 + np.vectorize(math.erf)(y / np.sqrt(2))) + res.astype("float32")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_transposed_read_of_the_product_keeps_it_a_stage():
    """A tail reading the product at other indices than its own (a transpose) is not
    fused into the GEMM's tiles: the product is written whole first, and the result is
    still right."""
    rows, k, n = (5, 12), 9, 64
    s, args, spans = _epilogue_group(rows, k, n, "transpose")
    text = str(ember.lower(s, args))
    assert not spans and re.search(r"dense_packed\w* = alloc", text)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((*rows, k)).astype("float32")
    w = rng.standard_normal((k, n)).astype("float32")
    bias = rng.standard_normal(n).astype("float32")
    res = np.zeros((*rows, n), "float32")
    got = np.full((5, n, 12), np.nan, "float32")
    ember.build(s, args, target="llvm")(x, pack_panels(w, panel_width(n)), bias, res, got)
    np.testing.assert_allclose(got, np.swapaxes(x @ w + bias, -1, -2) + 1, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, n", [((1, 7), 33), ((2, 5, 7), 70), ((9, 16), 64)])
def test_fused_tails_match_onnxruntime_with_nan_and_inf(shape, n):
    """Tails a model writes after a constant-weight MatMul (bias, Relu, a product with an
    input, a cast to float16; bias, Sigmoid, a Where on a mask), fused into the GEMM's
    tiles, against onnxruntime, with NaN and Inf among the inputs."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal(shape).astype("float32")
    x.flat[0], x.flat[1] = np.nan, np.inf
    g = rng.standard_normal((*shape[:-1], n)).astype("float32")
    mask = rng.random(n) > 0.5
    inits = {
        "w": rng.standard_normal((shape[-1], n)).astype("float32"),
        "b": rng.standard_normal(n).astype("float32"),
    }
    mm = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"])]
    relu = mm + [
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Mul", ["r", "g"], ["p"]),
        helper.make_node("Cast", ["p"], ["y"], to=TensorProto.FLOAT16),
    ]
    check_against_ort(make_model(relu, {"x": x, "g": g}, ["y"], inits), {"x": x, "g": g},
                      rtol=1e-3, atol=1e-3)  # fmt: skip
    where = mm + [
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Where", ["c", "s", "a"], ["y"]),
    ]
    check_against_ort(make_model(where, {"x": x, "c": mask}, ["y"], inits), {"x": x, "c": mask},
                      rtol=1e-4, atol=1e-4)  # fmt: skip
