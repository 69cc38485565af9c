"""GELU fusion end to end: the erf GELU of BERT exporters and GPT-2's tanh GELU with its
``Pow``, after a GEMM, run as the GEMM with a ``gelu`` epilogue and match onnxruntime
(which fuses the same chains into its Gelu and FastGelu), on random data, on NaN and
infinities, and over the orders in which exporters write the factors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.frontend.testing.models import build_model

ort = pytest.importorskip("onnxruntime")
helper = pytest.importorskip("onnx.helper")

F32 = np.float32


def gelu_model(
    rng: np.random.Generator, kind: str, rows: int = 5, k: int = 12, n: int = 20,
    divide: bool = True, half_first: bool = False, swapped: bool = False,
) -> tuple[object, dict[str, np.ndarray]]:  # fmt: skip
    """``x @ W + b`` then GELU (``kind`` "erf" or "tanh") in primitives; ``divide`` by
    sqrt(2) or multiply by its reciprocal, ``half_first`` halves x before the product,
    ``swapped`` writes every commutative node's operands the other way round."""
    w = {
        "W": rng.standard_normal((k, n)).astype(F32),
        "b": rng.standard_normal(n).astype(F32),
        "r": np.array(np.sqrt(2.0) if divide else 1 / np.sqrt(2.0), F32),
        "one": np.array(1.0, F32),
        "half": np.array(0.5, F32),
        "three": np.array(3.0, F32),
        "c": np.array(0.044715, F32),
        "s": np.array(np.sqrt(2 / np.pi), F32),
    }
    nodes: list[object] = []

    def n_(op: str, a: str, b: str | None = None) -> str:
        ins = [a] if b is None else ([b, a] if swapped and op in ("Add", "Mul") else [a, b])
        out = f"{op}_{len(nodes)}"
        nodes.append(helper.make_node(op, ins, [out]))
        return out

    x = n_("Add", n_("MatMul", "x", "W"), "b")
    if kind == "erf":
        fn = n_("Erf", n_("Div", x, "r") if divide else n_("Mul", x, "r"))
    else:
        cube = n_("Mul", n_("Pow", x, "three"), "c")
        fn = n_("Tanh", n_("Mul", n_("Add", x, cube), "s"))
    one = n_("Add", fn, "one")
    y = n_("Mul", n_("Mul", x, "half"), one) if half_first else n_("Mul", n_("Mul", x, one), "half")
    inputs = {"x": rng.standard_normal((rows, k)).astype(F32)}
    return build_model(nodes, inputs, [y], w, opset=13), inputs


def _both(model: object, inputs: dict) -> tuple[np.ndarray, np.ndarray, object]:
    lib = ember.compile(model, target="llvm")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lib.run(inputs)[0], sess.run(None, inputs)[0], lib


@pytest.mark.parametrize("kind", ["erf", "tanh"])
def test_gelu_after_a_gemm_is_its_epilogue_and_matches_onnxruntime(rng, kind):  # noqa: ANN001
    model, inputs = gelu_model(rng, kind)
    got, want, lib = _both(model, inputs)
    assert [n.op for n in lib.graph.nodes if n.op != "reshape"][-1] == "gelu"
    assert len({n.group for n in lib.graph.nodes}) == 1  # one kernel: GEMM, bias, GELU
    assert not any(n.op in ("erf", "tanh", "pow", "divide") for n in lib.graph.nodes)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["erf", "tanh"])
def test_nan_and_infinities_come_out_as_onnxruntime_gives_them(rng, kind):  # noqa: ANN001
    """Large activations saturate (GELU of +-1e30 is the input or 0), a NaN stays NaN."""
    model, inputs = gelu_model(rng, kind, rows=4, k=3)
    x = inputs["x"]
    x[0, 0], x[1, 1], x[2, 2], x[3, 0] = np.nan, 1e30, -1e30, np.inf
    got, want, _ = _both(model, inputs)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_kernel_names_the_chains_nodes(rng):  # noqa: ANN001
    model, inputs = gelu_model(rng, "tanh")
    lib = ember.compile(model, target="llvm")
    (step,) = lib.steps
    assert "(Gelu)" in step.where and "(Pow)" in step.where and "(Tanh)" in step.where


@settings(max_examples=12, deadline=None)
@given(
    kind=st.sampled_from(["erf", "tanh"]),
    divide=st.booleans(),
    half_first=st.booleans(),
    swapped=st.booleans(),
    rows=st.integers(1, 9),
    k=st.integers(1, 17),
    n=st.integers(1, 37),
    seed=st.integers(0, 2**16),
)
def test_every_written_order_fuses_and_matches_onnxruntime(
    kind, divide, half_first, swapped, rows, k, n, seed
):  # noqa: ANN001
    rng = np.random.default_rng(seed)
    model, inputs = gelu_model(rng, kind, rows, k, n, divide, half_first, swapped)
    inputs["x"] *= F32(3.0)  # reach erf's and tanh's flat tails
    got, want, lib = _both(model, inputs)
    assert "gelu" in [node.op for node in lib.graph.nodes]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
