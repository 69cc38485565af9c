"""ONNX Attention (opset 23 on) and RotaryEmbedding, as the chains of Ember ops they mean.

Attention is written out the way exporters write it before opset 23 (MatMul, scale,
mask, Softmax, MatMul), so the graph pass that fuses that chain
(``frontend/passes/fuse_attention.py``) gives it the fused kernel where its form allows;
the rest of the op — 3-D inputs split into heads, a KV cache concatenated, grouped KV
heads repeated, a soft cap, causal and boolean masks, padded key lengths — becomes the
ops around it. The numbers follow ONNX's reference implementation, including which
scores ``qk_matmul_output`` returns for each mode (0 and 1: after the soft cap, 2: with
the mask added, 3: after the softmax).
"""

from __future__ import annotations

import math

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter


def _heads(ctx: ConvertContext, x: str, heads: int, what: str) -> str:
    """A 3-D (batch, sequence, heads·size) input as (batch, heads, sequence, size)."""
    b, s, hidden = ctx.type_of(x).dims
    if not heads or hidden % heads:
        raise ArgumentError(f"Attention: {what} hidden size {hidden} is not {heads} heads")
    split = ctx.emit1("reshape", [x], {"shape": (b, s, heads, hidden // heads)})
    return ctx.emit1("transpose", [split], {"perm": (0, 2, 1, 3)})


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
    if kv_heads != q_heads:  # grouped-query attention: each KV head serves a run of Q heads
        if q_heads % kv_heads:
            raise ArgumentError(f"Attention: {q_heads} Q heads do not group over {kv_heads}")
        index = ctx.const(np.repeat(np.arange(kv_heads, dtype=np.int64), q_heads // kv_heads))
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
