"""ATen operators as Ember ops: one converter per op packet (``aten.convolution``...).

A converter gets the :class:`Emitter` of the graph under construction and the FX node's
arguments with every tensor argument already an Ember value name (a ``str``); it returns
the Ember value name of the result, or a tuple of them where the ATen op returns several
(``operator.getitem`` picks one; ``None`` stands for an output Ember does not compute, such
as batch norm's saved statistics or max pooling's indices). The set is what
``make_fx`` with the core ATen decompositions leaves of the usual CNN, MLP and
transformer layers; anything else is reported by the importer, all at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.ops.registry import normalize_axis

Converter = Callable[..., Any]
CONVERTERS: dict[str, Converter] = {}


class Emitter:
    """What a converter may ask of the graph under construction (see ``importer.py``)."""

    def emit(self, op: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None) -> str:
        raise NotImplementedError

    def const(self, array: np.ndarray) -> str:
        raise NotImplementedError

    def type(self, value: str) -> TensorType:
        raise NotImplementedError


def converts(*names: str) -> Callable[[Converter], Converter]:
    """Register a converter for the ATen op packets ``names`` (``"aten.relu"``)."""

    def register(fn: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = fn
        return fn

    return register


def _shape(e: Emitter, x: str) -> tuple[int, ...]:
    return tuple(int(d) for d in e.type(x).shape)


def _operand(e: Emitter, value: Any, like: str) -> str:
    """A tensor operand: an Ember value as is, a Python number as a constant of ``like``'s
    dtype (PyTorch's rule for a scalar beside a tensor of the same kind)."""
    if isinstance(value, str):
        return value
    return e.const(np.array(value, dtype=e.type(like).dtype))


def _binary(op: str) -> Converter:
    def convert(e: Emitter, a: Any, b: Any, alpha: float = 1, **kw: Any) -> str:
        if kw.get("rounding_mode") is not None:
            raise ArgumentError(f"{op}: rounding_mode {kw['rounding_mode']!r} is not supported")
        x = a if isinstance(a, str) else b
        a, b = _operand(e, a, x), _operand(e, b, x)
        if alpha != 1:
            b = e.emit("multiply", [b, e.const(np.array(alpha, dtype=e.type(b).dtype))])
        return e.emit(op, [a, b])

    return convert


for _aten, _ember in [
    ("aten.add", "add"), ("aten.sub", "subtract"), ("aten.mul", "multiply"),
    ("aten.div", "divide"), ("aten.pow", "pow"), ("aten.maximum", "max"),
    ("aten.minimum", "min"),
]:  # fmt: skip
    converts(_aten)(_binary(_ember))


def _unary(op: str) -> Converter:
    return lambda e, x, *args, **kw: e.emit(op, [x])


for _aten, _ember in [
    ("aten.relu", "relu"), ("aten.sigmoid", "sigmoid"), ("aten.tanh", "tanh"),
    ("aten.exp", "exp"), ("aten.log", "log"), ("aten.sqrt", "sqrt"), ("aten.neg", "neg"),
    ("aten.abs", "abs"), ("aten.erf", "erf"), ("aten.reciprocal", "reciprocal"),
    ("aten.sin", "sin"), ("aten.cos", "cos"),
]:  # fmt: skip
    converts(_aten)(_unary(_ember))


@converts("aten.rsqrt")
def rsqrt(e: Emitter, x: str) -> str:
    return e.emit("reciprocal", [e.emit("sqrt", [x])])


@converts("aten.gelu")
def gelu(e: Emitter, x: str, approximate: str = "none") -> str:
    return e.emit("gelu", [x], {"approximate": approximate})


@converts("aten.hardtanh", "aten.clamp")
def clamp(e: Emitter, x: str, lo: float | None = None, hi: float | None = None) -> str:
    return e.emit("clip", [x], {"min": lo, "max": hi})


@converts("aten.clone", "aten.detach", "aten.alias", "aten.contiguous", "aten.lift_fresh_copy")
def identity(e: Emitter, x: str, *args: Any, **kw: Any) -> str:
    return x


@converts("aten._to_copy")
def to_copy(e: Emitter, x: str, dtype: Any = None, **kw: Any) -> str:
    if dtype is None:
        return x
    name = str(dtype).removeprefix("torch.")
    return x if name == e.type(x).dtype else e.emit("cast", [x], {"dtype": name})


@converts("aten.view", "aten._unsafe_view", "aten.reshape")
def view(e: Emitter, x: str, shape: Sequence[int]) -> str:
    src = _shape(e, x)
    size = int(np.prod(src, dtype=np.int64))
    dims = [int(d) for d in shape]
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        dims[dims.index(-1)] = size // known if known else 0
    return e.emit("reshape", [x], {"shape": tuple(dims)})


@converts("aten.unsqueeze")
def unsqueeze(e: Emitter, x: str, dim: int) -> str:
    src = list(_shape(e, x))
    src.insert(normalize_axis(dim, len(src) + 1, "unsqueeze dim"), 1)
    return e.emit("reshape", [x], {"shape": tuple(src)})


@converts("aten.squeeze")
def squeeze(e: Emitter, x: str, dims: Any = None) -> str:
    src = _shape(e, x)
    if dims is None:
        axes = {i for i, d in enumerate(src) if d == 1}
    else:
        picked = [dims] if isinstance(dims, int) else list(dims)
        axes = {normalize_axis(d, len(src), "squeeze dim") for d in picked}
        axes = {a for a in axes if src[a] == 1}
    return e.emit("reshape", [x], {"shape": tuple(d for i, d in enumerate(src) if i not in axes)})


@converts("aten.permute")
def permute(e: Emitter, x: str, dims: Sequence[int]) -> str:
    n = len(_shape(e, x))
    return e.emit("transpose", [x], {"perm": tuple(normalize_axis(d, n) for d in dims)})


@converts("aten.t")
def t(e: Emitter, x: str) -> str:
    return x if len(_shape(e, x)) < 2 else e.emit("transpose", [x], {"perm": (1, 0)})


@converts("aten.transpose")
def transpose(e: Emitter, x: str, d0: int, d1: int) -> str:
    n = len(_shape(e, x))
    perm = list(range(n))
    a, b = normalize_axis(d0, n), normalize_axis(d1, n)
    perm[a], perm[b] = perm[b], perm[a]
    return e.emit("transpose", [x], {"perm": tuple(perm)})


@converts("aten.expand")
def expand(e: Emitter, x: str, shape: Sequence[int], **kw: Any) -> str:
    src = _shape(e, x)
    lead = len(shape) - len(src)
    dims = tuple(src[i - lead] if d == -1 else int(d) for i, d in enumerate(shape))
    return x if dims == src else e.emit("expand", [x], {"shape": dims})


@converts("aten.cat")
def cat(e: Emitter, xs: Sequence[str], dim: int = 0) -> str:
    n = len(_shape(e, xs[0]))
    return e.emit("concat", list(xs), {"axis": normalize_axis(dim, n, "cat dim")})


@converts("aten.mm", "aten.bmm", "aten.matmul")
def mm(e: Emitter, a: str, b: str) -> str:
    return e.emit("matmul", [a, b])


@converts("aten.addmm")
def addmm(e: Emitter, bias: str, a: str, b: str, beta: float = 1, alpha: float = 1) -> str:
    attrs = {"alpha": float(alpha), "beta": float(beta), "trans_a": False, "trans_b": False}
    return e.emit("gemm", [a, b, bias], attrs)


@converts("aten.convolution")
def convolution(
    e: Emitter,
    x: str,
    w: str,
    bias: str | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> str:
    if transposed:
        raise ArgumentError("aten.convolution: transposed convolutions are not supported yet")
    n = len(_shape(e, x)) - 2
    attrs = {
        "strides": _window(stride, n),
        "pads": _window(padding, n) * 2,
        "dilations": _window(dilation, n),
        "group": int(groups),
    }
    return e.emit("conv", [x, w] + ([bias] if bias is not None else []), attrs)


def _window(values: Sequence[int], n: int) -> tuple[int, ...]:
    """One value per spatial axis (PyTorch repeats a single one)."""
    values = tuple(int(v) for v in values)
    return values * n if len(values) == 1 else values


def _pool_attrs(
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
) -> dict[str, Any]:
    """A 2-D pooling window's attributes (an empty stride: the kernel's)."""
    k = _window(kernel, 2)
    return {
        "kernel": k,
        "strides": _window(stride, 2) if stride else k,
        "pads": _window(padding, 2) * 2,
        "dilations": _window(dilation, 2),
        "ceil_mode": bool(ceil_mode),
    }


@converts("aten.max_pool2d_with_indices")
def max_pool2d(
    e: Emitter,
    x: str,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[str, None]:
    attrs = _pool_attrs(kernel, stride, padding, dilation, ceil_mode)
    return e.emit("max_pool", [x], attrs), None


@converts("aten.avg_pool2d")
def avg_pool2d(
    e: Emitter,
    x: str,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> str:
    if divisor_override is not None:
        raise ArgumentError("aten.avg_pool2d: divisor_override is not supported")
    attrs = _pool_attrs(kernel, stride, padding, (1,), ceil_mode)
    attrs["count_include_pad"] = bool(count_include_pad)
    return e.emit("avg_pool", [x], attrs)


def _reduce(kind: str) -> Converter:
    def convert(e: Emitter, x: str, dims: Any = None, keepdim: bool = False, **kw: Any) -> str:
        n = len(_shape(e, x))
        picked = range(n) if dims is None or dims == [] else dims
        picked = [picked] if isinstance(picked, int) else picked
        axes = tuple(sorted({normalize_axis(int(d), n, f"{kind} dim") for d in picked}))
        return e.emit("reduce", [x], {"kind": kind, "axes": axes, "keepdims": bool(keepdim)})

    return convert


converts("aten.mean")(_reduce("mean"))
converts("aten.sum")(_reduce("sum"))
converts("aten.amax")(_reduce("max"))
converts("aten.amin")(_reduce("min"))


@converts("aten._softmax", "aten.softmax")
def softmax(e: Emitter, x: str, dim: int, *args: Any) -> str:
    return e.emit("softmax", [x], {"axis": normalize_axis(dim, len(_shape(e, x)))})


@converts("aten._log_softmax", "aten.log_softmax")
def log_softmax(e: Emitter, x: str, dim: int, *args: Any) -> str:
    return e.emit("log_softmax", [x], {"axis": normalize_axis(dim, len(_shape(e, x)))})


def _ones_like_channels(e: Emitter, value: str | None, size: int, dtype: str, fill: float) -> str:
    return value if value is not None else e.const(np.full(size, fill, dtype=dtype))


@converts("aten._native_batch_norm_legit_no_training")
def batch_norm(
    e: Emitter,
    x: str,
    w: str | None,
    b: str | None,
    mean: str,
    var: str,
    momentum: float,
    eps: float,
) -> tuple[str, None, None]:
    c, dtype = _shape(e, x)[1], e.type(x).dtype
    w = _ones_like_channels(e, w, c, dtype, 1.0)
    b = _ones_like_channels(e, b, c, dtype, 0.0)
    return e.emit("batch_norm", [x, w, b, mean, var], {"eps": float(eps)}), None, None


@converts("aten.native_batch_norm")
def native_batch_norm(
    e: Emitter,
    x: str,
    w: str | None,
    b: str | None,
    mean: str | None,
    var: str | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[str, None, None]:
    if training or mean is None or var is None:
        raise ArgumentError("aten.native_batch_norm: training mode is not supported (eval())")
    return batch_norm(e, x, w, b, mean, var, momentum, eps)


@converts("aten.native_layer_norm")
def layer_norm(
    e: Emitter, x: str, normalized: Sequence[int], w: str | None, b: str | None, eps: float
) -> tuple[str, None, None]:
    shape, dtype = _shape(e, x), e.type(x).dtype
    k = len(normalized)
    w = w if w is not None else e.const(np.ones(shape[-k:], dtype=dtype))
    attrs = {
        "axes": tuple(range(len(shape) - k, len(shape))),
        "eps": float(eps),
        "center": True,
        "acc": "float64" if dtype == "float64" else "float32",
    }
    return e.emit("normalize", [x, w] + ([b] if b is not None else []), attrs), None, None


@converts("aten.embedding")
def embedding(e: Emitter, weight: str, indices: str, *args: Any) -> str:
    return e.emit("gather", [weight, indices], {"axis": 0})


def _slice(e: Emitter, x: str, dim: int, start: int, end: int, step: int) -> str:
    shape = _shape(e, x)
    d = normalize_axis(dim, len(shape), "slice dim")
    size = shape[d]
    lo, hi, _ = slice(start, end, step).indices(size)
    begin, steps, out = [0] * len(shape), [1] * len(shape), list(shape)
    begin[d], steps[d], out[d] = lo, step, max(0, -(-(hi - lo) // step))
    return e.emit("slice", [x], {"begin": tuple(begin), "step": tuple(steps), "shape": tuple(out)})


@converts("aten.slice")
def slice_(
    e: Emitter, x: str, dim: int = 0, start: int | None = None, end: int | None = None,
    step: int = 1,
) -> str:  # fmt: skip
    if step < 1:
        raise ArgumentError(f"aten.slice: step {step} must be positive")
    return _slice(e, x, dim, start or 0, end if end is not None else 2**62, step)


@converts("aten.select")
def select(e: Emitter, x: str, dim: int, index: int) -> str:
    shape = _shape(e, x)
    d = normalize_axis(dim, len(shape), "select dim")
    i = index + shape[d] if index < 0 else index
    if not 0 <= i < shape[d]:
        raise ArgumentError(f"aten.select: index {index} is out of range for size {shape[d]}")
    picked = _slice(e, x, d, i, i + 1, 1)
    return e.emit("reshape", [picked], {"shape": shape[:d] + shape[d + 1 :]})


def _compare(op: str) -> Converter:
    def convert(e: Emitter, a: Any, b: Any) -> str:
        x = a if isinstance(a, str) else b
        return e.emit(op, [_operand(e, a, x), _operand(e, b, x)])

    return convert


for _aten, _ember in [
    ("aten.eq", "equal"), ("aten.lt", "less"), ("aten.le", "less_equal"),
    ("aten.gt", "greater"), ("aten.ge", "greater_equal"),
]:  # fmt: skip
    converts(_aten)(_compare(_ember))


@converts("aten.ne")
def ne(e: Emitter, a: Any, b: Any) -> str:
    return e.emit("logical_not", [_compare("equal")(e, a, b)])


@converts("aten.logical_not")
def logical_not(e: Emitter, x: str) -> str:
    if e.type(x).dtype != "bool":
        x = e.emit("cast", [x], {"dtype": "bool"})
    return e.emit("logical_not", [x])


@converts("aten.any")
def any_(e: Emitter, x: str, dims: Any = None, keepdim: bool = False) -> str:
    ints = e.emit("cast", [x], {"dtype": "int32"})
    top = _reduce("max")(e, ints, dims, keepdim)
    return e.emit("cast", [top], {"dtype": "bool"})


@converts("aten.where")
def where(e: Emitter, cond: str, a: Any, b: Any) -> str:
    x = a if isinstance(a, str) else b
    return e.emit("where", [cond, _operand(e, a, x), _operand(e, b, x)])


def _dtype_name(dtype: Any, default: str) -> str:
    return default if dtype is None else str(dtype).removeprefix("torch.")


@converts("aten.full_like")
def full_like(e: Emitter, x: str, value: float, dtype: Any = None, **kw: Any) -> str:
    name = _dtype_name(dtype, e.type(x).dtype)
    return e.const(np.full(_shape(e, x), value, dtype=name))


@converts("aten.full")
def full(e: Emitter, size: Sequence[int], value: float, dtype: Any = None, **kw: Any) -> str:
    kind = "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float32"
    return e.const(np.full(tuple(int(d) for d in size), value, dtype=_dtype_name(dtype, kind)))


@converts("aten.scalar_tensor")
def scalar_tensor(e: Emitter, value: float, dtype: Any = None, **kw: Any) -> str:
    return e.const(np.array(value, dtype=_dtype_name(dtype, "float32")))


@converts("aten.split_with_sizes", "aten.split")
def split(e: Emitter, x: str, sizes: Any, dim: int = 0) -> tuple[str, ...]:
    shape = _shape(e, x)
    d = normalize_axis(dim, len(shape), "split dim")
    if isinstance(sizes, int):  # aten.split.Tensor: chunks of one size, the last smaller
        sizes = [min(sizes, shape[d] - i) for i in range(0, shape[d], sizes)]
    starts = np.cumsum([0, *sizes])
    return tuple(_slice(e, x, d, int(a), int(b), 1) for a, b in zip(starts[:-1], starts[1:]))


@converts("aten.arange")
def arange(e: Emitter, start: float, end: float | None = None, step: float = 1, **kw: Any) -> str:
    if end is None:
        start, end = 0, start
    numbers = (start, end, step)
    kind = "float32" if any(isinstance(v, float) for v in numbers) else "int64"
    return e.const(np.arange(start, end, step, dtype=_dtype_name(kw.get("dtype"), kind)))


for _aten, _ember in [("aten.logical_and", "logical_and"), ("aten.logical_or", "logical_or")]:
    converts(_aten)(_compare(_ember))


@converts("aten.bitwise_not")
def bitwise_not(e: Emitter, x: str) -> str:
    return e.emit("logical_not" if e.type(x).dtype == "bool" else "bitwise_not", [x])


@converts("aten._scaled_dot_product_flash_attention_for_cpu")
def sdpa(
    e: Emitter,
    q: str,
    k: str,
    v: str,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    attn_mask: str | None = None,
    scale: float | None = None,
    **kw: Any,
) -> tuple[str, None]:
    """PyTorch's fused attention as Ember's ``attention`` op (one kernel that never stores
    the scores): a boolean mask becomes 0 / -inf, ``is_causal`` the upper triangle -inf."""
    if dropout_p:
        raise ArgumentError(f"scaled_dot_product_attention: dropout_p={dropout_p} (eval() only)")
    from ember.tir.topi.attention import AttentionLayout

    qs, ks = _shape(e, q), _shape(e, k)
    if len(qs) != 4 or len(ks) != 4:
        raise ArgumentError(f"scaled_dot_product_attention: 4-D Q and K expected, got {qs}, {ks}")
    dtype = e.type(q).dtype
    mask = attn_mask
    if mask is not None and e.type(mask).dtype == "bool":
        zero, ninf = (e.const(np.array(x, dtype=dtype)) for x in (0.0, -np.inf))
        mask = e.emit("where", [mask, zero, ninf])
    if is_causal:
        causal = np.triu(np.full((qs[2], ks[2]), -np.inf, dtype=dtype), 1)
        mask = e.const(causal) if mask is None else e.emit("add", [mask, e.const(causal)])
    attrs = {"scale": float(scale if scale is not None else qs[3] ** -0.5)}
    attrs.update(AttentionLayout().attrs())
    return e.emit("attention", [q, k, v] + ([mask] if mask is not None else []), attrs), None


def _linear(e: Emitter, x: str, weight: str, bias: str) -> str:
    """``x @ weight.T + bias`` over the last axis of ``x`` (weights are constants: the
    transpose folds at compile time)."""
    wt = e.emit("transpose", [weight], {"perm": (1, 0)})
    return e.emit("add", [e.emit("matmul", [x, wt]), bias])


@converts("aten._transformer_encoder_layer_fwd")
def transformer_encoder_layer(
    e: Emitter,
    src: str,
    embed_dim: int,
    num_heads: int,
    qkv_weight: str,
    qkv_bias: str,
    proj_weight: str,
    proj_bias: str,
    use_gelu: bool,
    norm_first: bool,
    eps: float,
    norm_weight_1: str,
    norm_bias_1: str,
    norm_weight_2: str,
    norm_bias_2: str,
    ffn_weight_1: str,
    ffn_bias_1: str,
    ffn_weight_2: str,
    ffn_bias_2: str,
    mask: str | None = None,
    mask_type: int | None = None,
) -> str:
    """``nn.TransformerEncoderLayer``'s fused inference path (batch first, no mask) as
    its plain parts: the attention as one ``attention`` op, layer norms before or after
    each residual as ``norm_first`` says, a ReLU or GELU feed-forward."""
    if mask is not None:
        from ember.errors import UnsupportedOperatorError

        raise UnsupportedOperatorError(
            "aten._transformer_encoder_layer_fwd with a mask is not supported (its fused "
            "path turns padded batches into nested tensors)"
        )
    batch, seq, width = _shape(e, src)
    if width != embed_dim or embed_dim % num_heads:
        raise ArgumentError(f"transformer encoder layer: {width} features in {num_heads} heads")
    head = embed_dim // num_heads

    def attention(x: str) -> str:
        qkv = _linear(e, x, qkv_weight, qkv_bias)
        parts = []
        for k in range(3):
            part = _slice(e, qkv, 2, k * embed_dim, (k + 1) * embed_dim, 1)
            part = e.emit("reshape", [part], {"shape": (batch, seq, num_heads, head)})
            parts.append(e.emit("transpose", [part], {"perm": (0, 2, 1, 3)}))
        out = sdpa(e, *parts)[0]
        out = e.emit("transpose", [out], {"perm": (0, 2, 1, 3)})
        out = e.emit("reshape", [out], {"shape": (batch, seq, embed_dim)})
        return _linear(e, out, proj_weight, proj_bias)

    def feed_forward(x: str) -> str:
        hidden = _linear(e, x, ffn_weight_1, ffn_bias_1)
        hidden = (
            e.emit("gelu", [hidden], {"approximate": "none"})
            if use_gelu
            else e.emit("relu", [hidden])
        )
        return _linear(e, hidden, ffn_weight_2, ffn_bias_2)

    def norm(x: str, w: str, b: str) -> str:
        return layer_norm(e, x, [embed_dim], w, b, eps)[0]

    x = src
    if norm_first:
        x = e.emit("add", [x, attention(norm(x, norm_weight_1, norm_bias_1))])
        return e.emit("add", [x, feed_forward(norm(x, norm_weight_2, norm_bias_2))])
    x = norm(e.emit("add", [x, attention(x)]), norm_weight_1, norm_bias_1)
    return norm(e.emit("add", [x, feed_forward(x)]), norm_weight_2, norm_bias_2)
