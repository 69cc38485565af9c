"""ONNX Attention (opset 23) and the NLL / softmax cross-entropy losses, on random data
with odd sizes: Attention against ONNX's own reference evaluator (numpy), the losses
against onnxruntime (the reference evaluator divides a ``mean`` with ``ignore_index=-1``
and no weights by every position, ignored ones too, where the operator's definition,
onnxruntime and PyTorch divide by the positions kept)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from tests.frontend.ops.shape_models import node_model

pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _compare(model, feeds, rtol=1e-4, atol=1e-5, reference="onnx"):
    if reference == "onnx":
        want = ReferenceEvaluator(model).run(None, feeds)
    else:
        ort = pytest.importorskip("onnxruntime")
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        want = session.run(None, feeds)
    got = ember.compile(model, target="llvm").run(feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "form",
    ["4d", "3d_gqa", "causal_past", "bool_mask_short", "softcap_mode2", "padded_kv"],
)
def test_attention_forms_match_the_reference(rng, form):
    B, Sq, Skv, D, Dv = 2, 5, 7, 6, 3
    attrs: dict = {}
    outputs = 1
    if form == "3d_gqa":  # 6 Q heads over 2 KV heads, (batch, sequence, hidden) inputs
        q, k, v = _f32(rng, B, Sq, 6 * D), _f32(rng, B, Skv, 2 * D), _f32(rng, B, Skv, 2 * Dv)
        attrs = {"q_num_heads": 6, "kv_num_heads": 2, "scale": 0.3}
        slots = [("q", q), ("k", k), ("v", v)]
    else:
        q, k, v = _f32(rng, B, 3, Sq, D), _f32(rng, B, 3, Skv, D), _f32(rng, B, 3, Skv, Dv)
        slots = [("q", q), ("k", k), ("v", v)]
    if form == "causal_past":  # 4 cached keys before the 7 new ones, present outputs too
        slots += [None, ("pk", _f32(rng, B, 3, 4, D)), ("pv", _f32(rng, B, 3, 4, Dv))]
        attrs, outputs = {"is_causal": 1}, 3
    if form == "bool_mask_short":  # a mask over fewer keys than there are, padded -inf
        mask = rng.random((Sq, Skv - 2)) > 0.3
        mask[:, 0] = True  # every row keeps a key
        slots.append(("m", mask))
    if form == "softcap_mode2":
        slots.append(("m", _f32(rng, B, 1, Sq, Skv)))
        attrs, outputs = {"softcap": 2.0, "qk_matmul_output_mode": 2}, 4
    if form == "padded_kv":  # (the reference needs a full-size mask beside the lengths)
        slots += [("m", _f32(rng, B, 1, Sq, Skv)), None, None, ("n", np.array([7, 3], np.int64))]
    model = node_model("Attention", slots, n_outputs=outputs, opset=24, **attrs)
    if form == "softcap_mode2":  # only Y and qk_matmul_output
        del model.graph.output[1:3]
        model.graph.node[0].output[1] = model.graph.node[0].output[2] = ""
    feeds = {s[0]: s[1] for s in slots if s is not None}
    _compare(model, feeds)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2, -1])
def test_losses_match_the_reference(rng, op, reduction, weighted, ignore):
    N, C, d1, d2 = 3, 5, 4, 3
    x = _f32(rng, N, C, d1, d2)
    target = rng.integers(0, C, (N, d1, d2)).astype(np.int64)
    if ignore is not None:
        target[0, :2, 1] = ignore  # some positions ignored, -1 lying outside the classes
    slots = [("x", x), ("t", target)]
    if weighted:
        slots.append(("w", rng.random(C).astype(np.float32) + 0.5))
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    model = node_model(op, slots, opset=13, **attrs)
    _compare(model, {s[0]: s[1] for s in slots}, reference="ort")


def test_cross_entropy_returns_log_probabilities_too(rng):
    x, target = _f32(rng, 4, 7), rng.integers(0, 7, 4).astype(np.int64)
    model = node_model("SoftmaxCrossEntropyLoss", [("x", x), ("t", target)], n_outputs=2, opset=13)
    _compare(model, {"x": x, "t": target}, reference="ort")


def test_a_target_of_the_wrong_shape_names_the_op(rng):
    x, target = _f32(rng, 4, 7), rng.integers(0, 7, 5).astype(np.int64)
    model = node_model("NegativeLogLikelihoodLoss", [("x", x), ("t", target)], opset=13)
    with pytest.raises(ember.ArgumentError, match="NegativeLogLikelihoodLoss: target"):
        ember.compile(model)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_op_takes_the_fused_kernel(rng, causal):
    """The chain the converter writes is the one the fusion pass recognises: one
    ``attention`` node (whose kernel never stores the scores), same numbers."""
    q, k, v = _f32(rng, 1, 2, 33, 16), _f32(rng, 1, 2, 33, 16), _f32(rng, 1, 2, 33, 16)
    model = node_model("Attention", [("q", q), ("k", k), ("v", v)], opset=23, is_causal=causal)
    assert [n.op for n in ember.compile(model).graph.nodes] == ["attention"]
    _compare(model, {"q": q, "k": k, "v": v})


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("form", ["4d_positions", "3d_partial"])
def test_rotary_embedding_matches_the_reference(rng, interleaved, form):
    B, S, H, D = 2, 5, 3, 10
    if form == "4d_positions":  # caches of 9 positions, each token picks its own
        x = _f32(rng, B, H, S, D)
        positions = rng.integers(0, 9, (B, S)).astype(np.int64)
        cos, sin = _f32(rng, 9, D // 2), _f32(rng, 9, D // 2)
        slots, attrs = [("x", x), ("c", cos), ("s", sin), ("p", positions)], {}
    else:  # (batch, sequence, hidden), only the first 6 features of each head rotate
        x = _f32(rng, B, S, H * D)
        cos, sin = _f32(rng, B, S, 3), _f32(rng, B, S, 3)
        slots, attrs = [("x", x), ("c", cos), ("s", sin)], {"num_heads": H}
        attrs["rotary_embedding_dim"] = 6
    model = node_model("RotaryEmbedding", slots, opset=23, interleaved=interleaved, **attrs)
    _compare(model, {s[0]: s[1] for s in slots})


@pytest.mark.parametrize("form", ["past_bias_silu", "zeros_state", "kernel_one"])
def test_causal_conv_with_state_matches_the_reference(rng, form):
    B, C, L, k = 2, 5, 7, 1 if form == "kernel_one" else 3
    slots = [("x", _f32(rng, B, C, L)), ("w", _f32(rng, C, 1, k))]
    attrs = {}
    if form == "past_bias_silu":
        slots += [("b", _f32(rng, C)), ("s", _f32(rng, B, C, k - 1))]
        attrs["activation"] = "silu"
    model = node_model("CausalConvWithState", slots, n_outputs=2, opset=27, **attrs)
    _compare(model, {s[0]: s[1] for s in slots})


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_matches_the_reference(rng, rule):
    """Odd sizes, grouped heads (6 over 2), a past state, per-feature decay."""
    B, T, Hq, Hkv, dk, dv = 2, 5, 6, 2, 3, 4
    slots = [
        ("q", _f32(rng, B, T, Hq * dk)),
        ("k", _f32(rng, B, T, Hkv * dk) * 0.5),
        ("v", _f32(rng, B, T, Hkv * dv)),
        ("s", _f32(rng, B, Hkv, dk, dv)),
    ]
    slots.append(
        ("g", -rng.random((B, T, Hkv * dk)).astype(np.float32)) if "gated" in rule else None
    )
    if "delta" in rule:
        slots.append(("beta", rng.random((B, T, Hkv)).astype(np.float32)))
    attrs = {"q_num_heads": Hq, "kv_num_heads": Hkv, "update_rule": rule}
    model = node_model("LinearAttention", slots, n_outputs=2, opset=27, **attrs)
    _compare(model, {s[0]: s[1] for s in slots if s is not None})


def _mod_graph(name, node):
    from onnx import TensorProto, helper

    info = helper.make_tensor_value_info
    return helper.make_graph(
        [node], name, [info("s", TensorProto.FLOAT, None)], [info("o", TensorProto.FLOAT, None)]
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_flex_attention_inlines_its_score_and_prob_mods(rng, dtype):
    """A soft cap as score_mod (tanh through a Constant), a power as prob_mod, grouped
    heads (4 over 2), odd lengths; float16 is computed in float32 as the reference does."""
    from onnx import TensorProto, helper

    cap = helper.make_node("Tanh", ["s"], ["o"])
    square = helper.make_node("Mul", ["s", "s"], ["o"])
    node = helper.make_node(
        "FlexAttention",
        ["q", "k", "v"],
        ["y"],
        domain="ai.onnx.preview",
        scale=0.4,
        score_mod=_mod_graph("score", cap),
        prob_mod=_mod_graph("prob", square),
    )
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    shapes = {"q": (2, 4, 5, 6), "k": (2, 2, 7, 6), "v": (2, 2, 7, 3)}
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, elem, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", elem, (2, 4, 5, 3))],
    )
    opsets = [helper.make_opsetid("", 23), helper.make_opsetid("ai.onnx.preview", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    feeds = {n: rng.standard_normal(s).astype(dtype) for n, s in shapes.items()}
    tol = 1e-5 if dtype == np.float32 else 4e-3
    _compare(model, feeds, rtol=tol, atol=tol)
