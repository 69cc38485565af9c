"""ONNX Attention (opset 23 on), RotaryEmbedding, CausalConvWithState, LinearAttention and
FlexAttention (preview), as the chains of Ember ops they mean.

Attention is written out the way exporters write it before opset 23 (MatMul, scale,
mask, Softmax, MatMul), so the graph pass that fuses that chain
(``frontend/passes/fuse_attention.py``) gives it the fused kernel where its form allows;
the rest of the op — 3-D inputs split into heads, a KV cache concatenated, grouped KV
heads repeated, a soft cap, causal and boolean masks, padded key lengths — becomes the
ops around it. The numbers follow ONNX's reference implementation, including which
scores ``qk_matmul_output`` returns for each mode (0 and 1: after the soft cap, 2: with
the mask added, 3: after the softmax). CausalConvWithState is a depthwise convolution
over the past state and the input joined; LinearAttention's recurrence is written out one
token at a time (up to 128 tokens), float32 throughout as the reference computes it.
"""

from __future__ import annotations

import math

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.frontend.onnx_import.subgraph import inline_subgraph


def _heads(ctx: ConvertContext, x: str, heads: int, what: str) -> str:
    """A 3-D (batch, sequence, heads·size) input as (batch, heads, sequence, size)."""
    b, s, hidden = ctx.type_of(x).dims
    if not heads or hidden % heads:
        raise ArgumentError(f"Attention: {what} hidden size {hidden} is not {heads} heads")
    split = ctx.emit1("reshape", [x], {"shape": (b, s, heads, hidden // heads)})
    return ctx.emit1("transpose", [split], {"perm": (0, 2, 1, 3)})


def _head_index(ctx: ConvertContext, q_heads: int, kv_heads: int) -> str | None:
    """Grouped-query attention: the KV head each Q head reads (a run of Q heads per KV
    head, as a gather index along the head axis), or None where the counts are equal."""
    if kv_heads == q_heads:
        return None
    if q_heads % kv_heads:
        raise ArgumentError(f"{ctx.op_type}: {q_heads} Q heads do not group over {kv_heads}")
    return ctx.const(np.repeat(np.arange(kv_heads, dtype=np.int64), q_heads // kv_heads))


def _optional(ctx: ConvertContext, i: int) -> str | None:
    return ctx.input(i) if ctx.num_inputs > i and ctx.has_input(i) else None


def _scalar(ctx: ConvertContext, value: float, dtype: str) -> str:
    return ctx.const(np.array(value, dtype=dtype))


def _mask_bias(ctx: ConvertContext, mask: str, total: int, dtype: str) -> str:
    """The additive bias a mask means: a boolean one is 0 where true and -inf where
    false; either is padded with -inf out to the keys a KV cache adds."""
    t = ctx.type_of(mask)
    if t.dtype == "bool":
        zero, ninf = _scalar(ctx, 0.0, dtype), _scalar(ctx, -np.inf, dtype)
        mask = ctx.emit1("where", [mask, zero, ninf])
    short = total - int(t.shape[-1])
    if short > 0:
        pad = np.full((*(int(d) for d in t.shape[:-1]), short), -np.inf, dtype=dtype)
        mask = ctx.emit1("concat", [mask, ctx.const(pad)], {"axis": len(t.shape) - 1})
    return mask


def _causal(q_len: int, total: int, past: int, dtype: str) -> np.ndarray:
    """-inf above the diagonal that starts after ``past`` cached keys: query ``i`` sees
    keys ``j <= past + i`` (upper-left aligned when there is no cache)."""
    rows = np.arange(q_len)[:, None]
    cols = np.arange(total)[None, :]
    return np.where(cols - past > rows, -np.inf, 0.0).astype(dtype)


def _padding_bias(ctx: ConvertContext, lengths: str, batch: int, total: int, dtype: str) -> str:
    """-inf at key positions at or past each batch's ``nonpad_kv_seqlen``: (batch, 1, 1, keys)."""
    positions = ctx.const(np.arange(total, dtype=np.int64).reshape(1, total))
    column = ctx.emit1("reshape", [lengths], {"shape": (batch, 1)})
    keep = ctx.emit1("less", [positions, column])
    bias = ctx.emit1("where", [keep, _scalar(ctx, 0.0, dtype), _scalar(ctx, -np.inf, dtype)])
    return ctx.emit1("reshape", [bias], {"shape": (batch, 1, 1, total)})


@converter("Attention", since=23)
def attention(ctx: ConvertContext) -> list[str]:
    """ONNX Attention: softmax(Q Kᵀ · scale + bias) V with its cache and mask forms."""
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    qt = ctx.type(0)
    dtype = qt.dtype
    if not all(ctx.type(i).is_static for i in range(3)):
        raise ArgumentError(f"Attention: needs static Q, K and V shapes, got {qt}")
    three_d = qt.ndim == 3
    if three_d:
        kv_heads = int(ctx.attr("kv_num_heads", 0))
        q = _heads(ctx, q, int(ctx.attr("q_num_heads", 0)), "Q")
        k = _heads(ctx, k, kv_heads, "K")
        v = _heads(ctx, v, kv_heads, "V")
    elif qt.ndim != 4:
        raise ArgumentError(f"Attention: Q must be 3-D or 4-D, got {qt}")
    batch, q_heads, q_len, head_size = ctx.type_of(q).dims
    past_key, past_value = _optional(ctx, 4), _optional(ctx, 5)
    past = 0
    if past_key is not None and past_value is not None:
        past = int(ctx.type_of(past_key).dims[2])
        k = ctx.emit1("concat", [past_key, k], {"axis": 2})
        v = ctx.emit1("concat", [past_value, v], {"axis": 2})
    present_key, present_value = k, v
    head_size_v = ctx.type_of(v).dims[3]
    kv_heads, total = ctx.type_of(k).dims[1], ctx.type_of(k).dims[2]
    index = _head_index(ctx, q_heads, kv_heads)
    if index is not None:
        k = ctx.emit1("gather", [k, index], {"axis": 1})
        v = ctx.emit1("gather", [v, index], {"axis": 1})

    scale = ctx.attr("scale", None)
    scale = 1.0 / math.sqrt(head_size) if scale is None else float(scale)
    kt = ctx.emit1("transpose", [k], {"perm": (0, 1, 3, 2)})
    scores = ctx.emit1("matmul", [q, kt])
    scores = ctx.emit1("multiply", [scores, _scalar(ctx, scale, dtype)])
    softcap = float(ctx.attr("softcap", 0.0))
    if softcap > 0:
        capped = ctx.emit1("divide", [scores, _scalar(ctx, softcap, dtype)])
        capped = ctx.emit1("tanh", [capped])
        scores = ctx.emit1("multiply", [capped, _scalar(ctx, softcap, dtype)])
    qk = scores

    biases = []
    mask = _optional(ctx, 3)
    if mask is not None:
        biases.append(_mask_bias(ctx, mask, total, dtype))
    if ctx.attr("is_causal", 0):
        biases.append(ctx.const(_causal(q_len, total, past, dtype)))
    lengths = _optional(ctx, 6)
    if lengths is not None:
        biases.append(_padding_bias(ctx, lengths, batch, total, dtype))
    for bias in biases:
        scores = ctx.emit1("add", [scores, bias])

    probs = ctx.emit1("softmax", [scores], {"axis": 3})
    out = ctx.emit1("matmul", [probs, v])
    if three_d:
        out = ctx.emit1("transpose", [out], {"perm": (0, 2, 1, 3)})
        out = ctx.emit1("reshape", [out], {"shape": (batch, q_len, q_heads * head_size_v)})
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise ArgumentError(f"Attention: qk_matmul_output_mode {mode} is not 0-3")
    qk_out = {0: qk, 1: qk, 2: scores, 3: probs}[mode]
    return [out, present_key, present_value, qk_out][: ctx.num_outputs]


def _last_axis_slice(ctx: ConvertContext, x: str, begin: int, step: int, count: int) -> str:
    shape = ctx.type_of(x).dims
    return ctx.emit1(
        "slice",
        [x],
        {
            "begin": (0,) * (len(shape) - 1) + (begin,),
            "step": (1,) * (len(shape) - 1) + (step,),
            "shape": (*shape[:-1], count),
        },
    )


@converter("RotaryEmbedding", since=23)
def rotary_embedding(ctx: ConvertContext) -> list[str]:
    """ONNX RotaryEmbedding: the first ``rotary_embedding_dim`` features of each head
    rotated pairwise by the cached angle of the token's position, as halves or
    interleaved pairs, the rest passed through."""
    xt = ctx.type(0)
    if not xt.is_static or xt.ndim not in (3, 4):
        raise ArgumentError(f"RotaryEmbedding: input must be 3-D or 4-D and static, got {xt}")
    x = ctx.input(0)
    if xt.ndim == 4:  # (batch, heads, sequence, size) -> (batch, sequence, heads, size)
        x = ctx.emit1("transpose", [x], {"perm": (0, 2, 1, 3)})
    else:
        b, s, hidden = xt.dims
        heads = int(ctx.attr("num_heads", 0))
        if not heads or hidden % heads:
            raise ArgumentError(f"RotaryEmbedding: hidden size {hidden} is not {heads} heads")
        x = ctx.emit1("reshape", [x], {"shape": (b, s, heads, hidden // heads)})
    b, s, heads, size = ctx.type_of(x).dims
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or size
    half = rot // 2
    if rot % 2 or rot > size:
        raise ArgumentError(f"RotaryEmbedding: rotary_embedding_dim {rot} for heads of {size}")
    cos, sin = ctx.input(1), ctx.input(2)
    if ctx.num_inputs > 3 and ctx.has_input(3):  # caches indexed by position
        cos = ctx.emit1("gather", [cos, ctx.input(3)], {"axis": 0})
        sin = ctx.emit1("gather", [sin, ctx.input(3)], {"axis": 0})
    for cache in (cos, sin):
        if tuple(ctx.type_of(cache).dims) != (b, s, half):
            raise ArgumentError(
                f"RotaryEmbedding: cos/sin caches give {ctx.type_of(cache)} per token, "
                f"expected ({b}, {s}, {half})"
            )
    cos = ctx.emit1("reshape", [cos], {"shape": (b, s, 1, half)})
    sin = ctx.emit1("reshape", [sin], {"shape": (b, s, 1, half)})
    interleaved = bool(ctx.attr("interleaved", 0))
    if interleaved:
        x1, x2 = (_last_axis_slice(ctx, x, k, 2, half) for k in (0, 1))
    else:
        x1, x2 = (_last_axis_slice(ctx, x, k * half, 1, half) for k in (0, 1))
    real = ctx.emit1(
        "subtract", [ctx.emit1("multiply", [cos, x1]), ctx.emit1("multiply", [sin, x2])]
    )
    imag = ctx.emit1("add", [ctx.emit1("multiply", [sin, x1]), ctx.emit1("multiply", [cos, x2])])
    if interleaved:
        pairs = [ctx.emit1("reshape", [p], {"shape": (b, s, heads, half, 1)}) for p in (real, imag)]
        joined = ctx.emit1("concat", pairs, {"axis": 4})
        rotated = ctx.emit1("reshape", [joined], {"shape": (b, s, heads, rot)})
    else:
        rotated = ctx.emit1("concat", [real, imag], {"axis": 3})
    if rot < size:
        rest = _last_axis_slice(ctx, x, rot, 1, size - rot)
        rotated = ctx.emit1("concat", [rotated, rest], {"axis": 3})
    if xt.ndim == 4:
        return ctx.emit("transpose", [rotated], {"perm": (0, 2, 1, 3)})
    return ctx.emit("reshape", [rotated], {"shape": tuple(xt.shape)})


@converter("CausalConvWithState", since=27)
def causal_conv_with_state(ctx: ConvertContext) -> list[str]:
    """ONNX CausalConvWithState: a depthwise 1-D convolution over the input with its
    ``k - 1`` previous positions (the past state, else zeros) in front, an optional SiLU,
    and those positions' successors as the present state for the next call."""
    xt, wt = ctx.type(0), ctx.type(1)
    if xt.ndim != 3 or wt.ndim != 3 or wt.dims[1] != 1 or wt.dims[0] != xt.dims[1]:
        raise ArgumentError(
            f"CausalConvWithState: input {xt} must be (batch, channels, length) and weight "
            f"{wt} (channels, 1, k)"
        )
    batch, channels, length = xt.dims
    k = wt.dims[2]
    activation = ctx.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise ArgumentError(f"CausalConvWithState: activation '{activation}' is not supported")
    past = _optional(ctx, 3)
    if past is None:
        past = ctx.const(np.zeros((batch, channels, k - 1), dtype=xt.dtype))
    padded = ctx.emit1("concat", [past, ctx.input(0)], {"axis": 2}) if k > 1 else ctx.input(0)
    inputs = [padded, ctx.input(1)]
    bias = _optional(ctx, 2)
    if bias is not None:
        inputs.append(bias)
    attrs = {"strides": (1,), "pads": (0, 0), "dilations": (1,), "group": channels}
    out = ctx.emit1("conv", inputs, attrs)
    if activation != "none":
        out = ctx.emit1("multiply", [out, ctx.emit1("sigmoid", [out])])
    if k == 1:  # no state: an empty (batch, channels, 0) tensor
        return [out, ctx.const(np.zeros((batch, channels, 0), dtype=xt.dtype))]
    present = _last_axis_slice(ctx, padded, length, 1, k - 1)
    return [out, present]


LINEAR_ATTENTION_MAX_STEPS = 128
"""The longest sequence LinearAttention is written out for, one recurrence step per token
(each a handful of small ops); a longer one is refused rather than made a huge graph."""


def _step(ctx: ConvertContext, x: str, t: int) -> str:
    """Token ``t`` of a (batch, heads, tokens, features) tensor, the token axis kept."""
    b, h, _, f = ctx.type_of(x).dims
    attrs = {"begin": (0, 0, t, 0), "step": (1,) * 4, "shape": (b, h, 1, f)}
    return ctx.emit1("slice", [x], attrs)


def _per_head(ctx: ConvertContext, x: str, heads: int) -> str:
    """A (batch, tokens, heads or heads·features) input as float32 (batch, heads, tokens, f)."""
    if ctx.type_of(x).dtype != "float32":
        x = ctx.emit1("cast", [x], {"dtype": "float32"})
    b, t, last = ctx.type_of(x).dims
    split = ctx.emit1("reshape", [x], {"shape": (b, t, heads, last // heads)})
    return ctx.emit1("transpose", [split], {"perm": (0, 2, 1, 3)})


@converter("LinearAttention", since=27)
def linear_attention(ctx: ConvertContext) -> list[str]:
    """ONNX LinearAttention: a recurrent state of key-value outer products, decayed
    (``gated``), corrected toward the value it should retrieve (``delta``), read by each
    query. Written out token by token in float32 (as the reference computes), at most
    :data:`LINEAR_ATTENTION_MAX_STEPS` tokens."""
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ArgumentError(f"LinearAttention: update_rule '{rule}' is not supported")
    q_heads, kv_heads = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
    if q_heads <= 0 or kv_heads <= 0:
        raise ArgumentError(f"LinearAttention: {q_heads} Q heads over {kv_heads} KV heads")
    if not all(ctx.type(i).ndim == 3 and ctx.type(i).is_static for i in range(3)):
        raise ArgumentError("LinearAttention: query, key and value must be static (B, T, H·D)")
    out_dtype = ctx.type(0).dtype
    batch, steps, _ = ctx.type(0).dims
    if steps > LINEAR_ATTENTION_MAX_STEPS:
        raise ArgumentError(
            f"LinearAttention over {steps} tokens is not supported (at most "
            f"{LINEAR_ATTENTION_MAX_STEPS}: the recurrence is written out per token)"
        )
    q = _per_head(ctx, ctx.input(0), q_heads)
    k = _per_head(ctx, ctx.input(1), kv_heads)
    v = _per_head(ctx, ctx.input(2), kv_heads)
    d_k, d_v = ctx.type_of(q).dims[3], ctx.type_of(v).dims[3]
    decay, beta = _optional(ctx, 4), _optional(ctx, 5)
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated != (decay is not None) or delta != (beta is not None):
        raise ArgumentError(
            f"LinearAttention: update_rule '{rule}' and the decay/beta inputs given disagree"
        )
    decay_width = 1  # a decay per head, or per head and key feature
    if decay is not None:
        decay_width = 1 if ctx.type_of(decay).dims[2] == kv_heads else d_k
        decay = ctx.emit1("exp", [_per_head(ctx, decay, kv_heads)])  # (B, H, T, 1 or d_k)
    if beta is not None:
        beta = _per_head(ctx, beta, ctx.type_of(beta).dims[2])  # (B, H or 1, T, 1)
    past = _optional(ctx, 3)
    state_dtype = ctx.type_of(past).dtype if past is not None else out_dtype
    if past is None:
        state = ctx.const(np.zeros((batch, kv_heads, d_k, d_v), dtype=np.float32))
    elif state_dtype != "float32":
        state = ctx.emit1("cast", [past], {"dtype": "float32"})
    else:
        state = past
    scale = ctx.attr("scale", None)
    scale = 1.0 / math.sqrt(d_k) if not scale else float(scale)
    repeat = _head_index(ctx, q_heads, kv_heads)  # each KV head's state read by Q heads
    outs = []
    for t in range(steps):
        k_t, v_t = _step(ctx, k, t), _step(ctx, v, t)  # (B, H, 1, d)
        if decay is not None:
            shape = (batch, kv_heads, decay_width, 1)  # scales the state's rows
            g = ctx.emit1("reshape", [_step(ctx, decay, t)], {"shape": shape})
            state = ctx.emit1("multiply", [state, g])
        if beta is not None:
            retrieved = ctx.emit1("matmul", [k_t, state])  # (B, H, 1, d_v)
            error = ctx.emit1("subtract", [v_t, retrieved])
            v_t = ctx.emit1("multiply", [_step(ctx, beta, t), error])
        column = ctx.emit1("reshape", [k_t], {"shape": (batch, kv_heads, d_k, 1)})
        state = ctx.emit1("add", [state, ctx.emit1("multiply", [column, v_t])])
        read = state if repeat is None else ctx.emit1("gather", [state, repeat], {"axis": 1})
        outs.append(ctx.emit1("matmul", [_step(ctx, q, t), read]))  # (B, Hq, 1, d_v)
    out = outs[0] if steps == 1 else ctx.emit1("concat", outs, {"axis": 2})
    out = ctx.emit1("multiply", [out, _scalar(ctx, scale, "float32")])
    out = ctx.emit1("transpose", [out], {"perm": (0, 2, 1, 3)})
    out = ctx.emit1("reshape", [out], {"shape": (batch, steps, q_heads * d_v)})
    if out_dtype != "float32":
        out = ctx.emit1("cast", [out], {"dtype": out_dtype})
    if state_dtype != "float32":
        state = ctx.emit1("cast", [state], {"dtype": state_dtype})
    return [out, state]


_SOFTMAX_DTYPES = {1: "float32", 10: "float16", 11: "float64"}  # softmax_precision codes


@converter("FlexAttention", since=1, domain="ai.onnx.preview")
def flex_attention(ctx: ConvertContext) -> list[str]:
    """ONNX FlexAttention (preview): attention whose scores and probabilities pass through
    the model's own ``score_mod`` and ``prob_mod`` graphs, inlined here on the whole
    (batch, heads, queries, keys) tensor; grouped KV heads repeated; float16 computed in
    float32 (or ``softmax_precision``)."""
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    if not all(ctx.type(i).ndim == 4 and ctx.type(i).is_static for i in range(3)):
        raise ArgumentError("FlexAttention: Q, K and V must be static 4-D tensors")
    dtype = ctx.type(0).dtype
    q_heads, head_size = ctx.type(0).dims[1], ctx.type(0).dims[3]
    kv_heads = ctx.type(1).dims[1]
    index = _head_index(ctx, q_heads, kv_heads)
    if index is not None:
        k = ctx.emit1("gather", [k, index], {"axis": 1})
        v = ctx.emit1("gather", [v, index], {"axis": 1})
    precision = ctx.attr("softmax_precision", None)
    if precision is not None and int(precision) not in _SOFTMAX_DTYPES:
        raise ArgumentError(f"FlexAttention: softmax_precision {precision} is not supported")
    compute = _SOFTMAX_DTYPES[int(precision)] if precision is not None else dtype
    if precision is None and dtype == "float16":
        compute = "float32"
    scale = ctx.attr("scale", None)
    scale = 1.0 / math.sqrt(head_size) if scale is None else float(scale)
    kt = ctx.emit1("transpose", [k], {"perm": (0, 1, 3, 2)})
    scores = ctx.emit1("multiply", [ctx.emit1("matmul", [q, kt]), _scalar(ctx, scale, dtype)])
    if compute != dtype:
        scores = ctx.emit1("cast", [scores], {"dtype": compute})
    for name, stage in (("score_mod", None), ("prob_mod", "softmax")):
        if stage == "softmax":
            scores = ctx.emit1("softmax", [scores], {"axis": 3})
        if ctx.has_attr(name):
            graph = ctx.attr(name)
            if len(graph.input) != 1 or len(graph.output) != 1:
                raise ArgumentError(f"FlexAttention: {name} must take one tensor and give one")
            (scores,) = inline_subgraph(ctx, graph, {graph.input[0].name: scores})
            if ctx.type_of(scores).dtype != compute:
                scores = ctx.emit1("cast", [scores], {"dtype": compute})
    if ctx.type_of(v).dtype != compute:
        v = ctx.emit1("cast", [v], {"dtype": compute})
    out = ctx.emit1("matmul", [scores, v])
    vt = ctx.type(2).dtype
    return [out if compute == vt else ctx.emit1("cast", [out], {"dtype": vt})]
