"""``nn.MultiheadAttention``: PyTorch's attention layer in evaluation mode, traced to ONNX.

The projections are ``MatMul`` (+ bias), the heads a reshape/transpose to (N, h, L, d),
then a scaled ``MatMul``, the additive masks, ``Softmax`` and ``MatMul``, and the output
projection; the weights PyTorch returns are the softmax averaged over heads.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.nn.checks import expect_float, has_param
from ember.frontend.nn.layers import Linear
from ember.frontend.nn.module import _RNG, Module, as_array
from ember.frontend.nn.tensor import Tensor, dtype_kind


def _xavier_uniform(shape: tuple[int, int]) -> np.ndarray:
    bound = math.sqrt(6.0 / (shape[0] + shape[1]))
    return _RNG[0].uniform(-bound, bound, size=shape).astype(np.float32)


class MultiheadAttention(Module):
    """PyTorch's ``nn.MultiheadAttention`` in evaluation mode.

    ``forward(query, key, value)`` returns ``(attn_output, attn_weights)`` like PyTorch:
    with the default ``batch_first=False`` inputs are (L, N, E); weights are (N, L, S),
    averaged over heads unless ``average_attn_weights=False`` (then (N, heads, L, S)), and
    None with ``need_weights=False``. Unbatched (L, E) inputs work too. Parameters:
    ``in_proj_weight`` (3E, E) and ``in_proj_bias``, or ``q/k/v_proj_weight`` when
    ``kdim``/``vdim`` differ from E; ``out_proj`` a Linear(E, E). Dropout is off in
    evaluation. ``attn_mask`` and ``key_padding_mask`` are traced tensors or array data,
    bool (True: not attended) or float (added to the scores); ``is_causal`` is, as in
    PyTorch, only a hint that ``attn_mask`` is causal. ``key`` and ``value`` default to
    ``query`` (an Ember convenience; PyTorch requires them). Not supported:
    ``add_bias_kv`` and ``add_zero_attn``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
    ) -> None:
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads:
            raise ArgumentError(f"nn.MultiheadAttention: {num_heads} heads must divide {embed_dim}")
        if add_bias_kv or add_zero_attn:
            raise ArgumentError(
                "nn.MultiheadAttention: add_bias_kv/add_zero_attn are not supported"
            )
        e = embed_dim
        self.embed_dim, self.num_heads, self.head_dim = e, num_heads, e // num_heads
        self.kdim, self.vdim = kdim or e, vdim or e
        self.dropout, self.batch_first = dropout, batch_first
        self.same_dims = self.kdim == e and self.vdim == e
        if self.same_dims:
            self.param("in_proj_weight", _xavier_uniform((3 * e, e)))
        else:
            self.param("q_proj_weight", _xavier_uniform((e, e)))
            self.param("k_proj_weight", _xavier_uniform((e, self.kdim)))
            self.param("v_proj_weight", _xavier_uniform((e, self.vdim)))
        self.param("in_proj_bias", np.zeros(3 * e, np.float32) if bias else None, shape=(3 * e,))
        self.out_proj = Linear(e, e, bias=bias)
        if bias:
            self.out_proj.bias = np.zeros(e, np.float32)

    def _proj_weight(self, k: int) -> np.ndarray:
        e = self.embed_dim
        if self.same_dims:
            return self._params["in_proj_weight"][k * e : (k + 1) * e]
        return self._params[("q_proj_weight", "k_proj_weight", "v_proj_weight")[k]]

    def _project(self, x: Tensor, k: int) -> Tensor:
        """Projection ``k`` (q, k, v) of batch-first ``x`` (N, L, dim), split into heads
        (N, h, L, d)."""
        t = x.tracer
        b, s, _ = x.shape
        e, h, d = self.embed_dim, self.num_heads, self.head_dim
        w = t.constant(np.ascontiguousarray(self._proj_weight(k).T), f"{self._scope}.w{k}")
        proj = t.node("MatMul", [x.name, w.name], (b, s, e))
        if has_param(self, "in_proj_bias"):
            proj = proj + t.constant(
                self._params["in_proj_bias"][k * e : (k + 1) * e], f"{self._scope}.b{k}"
            )
        return proj.reshape(b, s, h, d).transpose(0, 2, 1, 3)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        key_padding_mask: Any = None,
        need_weights: bool = True,
        attn_mask: Any = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        if is_causal and attn_mask is None:  # PyTorch: is_causal is only a hint about attn_mask
            raise ArgumentError("nn.MultiheadAttention: is_causal needs attn_mask (as in PyTorch)")
        key = query if key is None else key
        value = key if value is None else value
        unbatched = query.ndim == 2
        self._check_inputs(query, key, value)
        q, k, v = (self._batch_first(x, unbatched) for x in (query, key, value))
        n, length, e = q.shape
        qh, kh, vh = (self._project(x, i) for i, x in enumerate((q, k, v)))
        scale = np.float32(1.0 / math.sqrt(self.head_dim))
        scores = (qh * scale) @ kh.transpose(0, 1, 3, 2)  # (N, h, L, S)
        mask = self._mask(q.tracer, attn_mask, key_padding_mask, scores.shape, unbatched)
        weights = (scores if mask is None else scores + mask).softmax(-1)
        ctx = (weights @ vh).transpose(0, 2, 1, 3).reshape(n, length, e)
        out = self.out_proj(ctx)
        if unbatched:
            out = out.reshape(length, e)
        elif not self.batch_first:
            out = out.transpose(1, 0, 2)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean((1,), keepdims=False)
        if unbatched:
            weights = weights.reshape(*weights.shape[1:])
        return out, weights

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        layout = "(N, L, " if self.batch_first else "(L, N, "
        for x, dim, what in ((query, self.embed_dim, "query"), (key, self.kdim, "key"),
                             (value, self.vdim, "value")):  # fmt: skip
            if x.ndim != query.ndim or x.ndim not in (2, 3) or x.shape[-1] != dim:
                raise ArgumentError(
                    f"nn.MultiheadAttention({self.embed_dim}): {what} of shape {list(x.shape)} "
                    f"(expected {layout}{dim}) or unbatched (L, {dim}))"
                )
            expect_float(x, "MultiheadAttention")
        seq = 1 if self.batch_first and query.ndim == 3 else 0
        batch = 1 - seq
        if key.shape[seq] != value.shape[seq] or (
            query.ndim == 3 and not query.shape[batch] == key.shape[batch] == value.shape[batch]
        ):
            raise ArgumentError(
                f"nn.MultiheadAttention: query {list(query.shape)}, key {list(key.shape)} "
                f"and value {list(value.shape)} do not fit together"
            )

    def _mask(
        self,
        tracer: Any,
        attn_mask: Any,
        key_padding_mask: Any,
        shape: tuple[int, ...],
        unbatched: bool,
    ) -> Tensor | None:
        """The additive mask for scores of ``shape`` (N, h, L, S), PyTorch's way: a bool mask
        puts -inf where it is True, a float mask is added; ``attn_mask`` is (L, S) or
        (N*h, L, S) ((h, L, S) unbatched), ``key_padding_mask`` (N, S) ((S,) unbatched)."""
        n, h, length, s = shape
        total = None
        if attn_mask is not None:
            forms = {2: (1, 1, length, s), 3: (n, h, length, s)}
            allowed = {(length, s), (n * h, length, s)}
            m = _additive_mask(tracer, attn_mask, "attn_mask", allowed)
            total = m.reshape(*forms[m.ndim])
        if key_padding_mask is not None:
            allowed = {(s,) if unbatched else (n, s)}
            m = _additive_mask(tracer, key_padding_mask, "key_padding_mask", allowed)
            m = m.reshape(n, 1, 1, s)
            total = m if total is None else total + m
        return total

    def _batch_first(self, x: Tensor, unbatched: bool) -> Tensor:
        if unbatched:
            return x.reshape(1, *x.shape)
        return x if self.batch_first else x.transpose(1, 0, 2)


def _additive_mask(tracer: Any, mask: Any, what: str, shapes: set[tuple[int, ...]]) -> Tensor:
    """``mask`` (a traced Tensor or array data) as a float32 tensor to add to the scores:
    -inf where a bool mask is True, a float mask as it is (PyTorch's ``_canonical_mask``)."""
    if isinstance(mask, Tensor):
        if mask.dtype == "bool":
            ninf = tracer.constant(np.array(-np.inf, np.float32), "mask_inf")
            zero = tracer.constant(np.array(0.0, np.float32), "mask_zero")
            mask = tracer.node("Where", [mask.name, ninf.name, zero.name], mask.shape, "float32")
        elif dtype_kind(mask.dtype) == 2:
            mask = mask.to("float32")
        else:
            raise ArgumentError(
                f"nn.MultiheadAttention: {what} must be bool or float, got {mask.dtype}"
            )
    else:
        data = as_array(mask, f"nn.MultiheadAttention {what}")
        if data.dtype.kind not in "bf":
            raise ArgumentError(
                f"nn.MultiheadAttention: {what} must be bool or float, got {data.dtype}"
            )
        data = np.where(data, -np.inf, 0.0) if data.dtype.kind == "b" else data
        mask = tracer.constant(data.astype(np.float32), what)
    if mask.shape not in shapes:
        raise ArgumentError(
            f"nn.MultiheadAttention: {what} of shape {list(mask.shape)}, expected one of "
            f"{sorted(list(x) for x in shapes)}"
        )
    return mask
