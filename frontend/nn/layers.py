"""The layers of ``ember.frontend.nn``, with PyTorch's parameter names and shapes.

Each layer emits the ONNX operators an exported PyTorch layer would: ``Linear`` a
``Gemm`` (2-D input) or ``MatMul`` + ``Add``, ``Conv2d`` a ``Conv``, ``LayerNorm`` a
``LayerNormalization``, ``MultiheadAttention`` the projections, a scaled
``MatMul``/``Softmax``/``MatMul`` per head group and the output projection.
Everything runs in inference mode: ``Dropout`` is the identity, ``BatchNorm2d``
uses its running statistics.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.nn.module import Module, init_uniform
from ember.frontend.nn.tensor import Tensor


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _expect(x: Tensor, ndim: int, what: str) -> None:
    if x.ndim != ndim:
        raise ArgumentError(f"nn.{what} expects a {ndim}-D input, got shape {list(x.shape)}")


class Linear(Module):
    """``y = x @ weight.T + bias``; weight is (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.param("weight", init_uniform((out_features, in_features), in_features))
        self.has_bias = bias
        if bias:
            self.param("bias", init_uniform((out_features,), in_features))

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.in_features:
            raise ArgumentError(
                f"nn.Linear({self.in_features}, {self.out_features}) got input {list(x.shape)}"
            )
        t = x.tracer
        w = self.traced(t, "weight")
        out_shape = (*x.shape[:-1], self.out_features)
        if x.ndim == 2:
            ins = [x.name, w.name] + ([self.traced(t, "bias").name] if self.has_bias else [])
            return t.node("Gemm", ins, out_shape, transB=1)
        wt = t.constant(np.ascontiguousarray(self._params["weight"].T), f"{self._scope}.weight_t")
        y = t.node("MatMul", [x.name, wt.name], out_shape)
        return y + self.traced(t, "bias") if self.has_bias else y


class Conv2d(Module):
    """2-D convolution, NCHW; weight is (out, in / groups, kh, kw)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ArgumentError(f"nn.Conv2d: groups={groups} must divide both channel counts")
        self.kernel, self.stride = _pair(kernel_size), _pair(stride)
        self.padding, self.dilation, self.groups = _pair(padding), _pair(dilation), groups
        self.in_channels, self.out_channels = in_channels, out_channels
        fan_in = in_channels // groups * self.kernel[0] * self.kernel[1]
        self.param(
            "weight", init_uniform((out_channels, in_channels // groups, *self.kernel), fan_in)
        )
        self.has_bias = bias
        if bias:
            self.param("bias", init_uniform((out_channels,), fan_in))

    def forward(self, x: Tensor) -> Tensor:
        _expect(x, 4, "Conv2d")
        n, c, h, w = x.shape
        if c != self.in_channels:
            raise ArgumentError(f"nn.Conv2d expects {self.in_channels} channels, got {c}")
        size = [
            (d + 2 * p - dl * (k - 1) - 1) // s + 1
            for d, p, dl, k, s in zip((h, w), self.padding, self.dilation, self.kernel, self.stride)
        ]
        t = x.tracer
        ins = [x.name, self.traced(t, "weight").name]
        if self.has_bias:
            ins.append(self.traced(t, "bias").name)
        ph, pw = self.padding
        return t.node(
            "Conv",
            ins,
            (n, self.out_channels, *size),
            kernel_shape=list(self.kernel),
            strides=list(self.stride),
            pads=[ph, pw, ph, pw],
            dilations=list(self.dilation),
            group=self.groups,
        )


class _Activation(Module):
    op_type = ""
    attrs: dict[str, Any] = {}

    def forward(self, x: Tensor) -> Tensor:
        return x.unary(self.op_type, **self.attrs)


class ReLU(_Activation):
    op_type = "Relu"


class Sigmoid(_Activation):
    op_type = "Sigmoid"


class Tanh(_Activation):
    op_type = "Tanh"


class GELU(_Activation):
    """GELU; ``approximate="tanh"`` for the tanh form, as in PyTorch."""

    op_type = "Gelu"

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ArgumentError(
                f"nn.GELU: approximate must be 'none' or 'tanh', got {approximate!r}"
            )
        self.attrs = {"approximate": approximate}


class Identity(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class Dropout(Identity):
    """Inference: the identity."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p


class Softmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return x.softmax(self.dim)


class Flatten(Module):
    """Flatten all dimensions after the first (PyTorch's default ``start_dim=1``)."""

    def forward(self, x: Tensor) -> Tensor:
        rest = int(np.prod(x.shape[1:]))
        return x.tracer.node("Flatten", [x.name], (x.shape[0], rest), x.dtype, axis=1)


class LayerNorm(Module):
    """Normalise over the last dimension; ``weight`` and ``bias`` of that size."""

    def __init__(self, normalized_shape: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.size, self.eps = normalized_shape, eps
        self.param("weight", np.ones(normalized_shape, np.float32))
        self.param("bias", np.zeros(normalized_shape, np.float32))

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.size:
            raise ArgumentError(f"nn.LayerNorm({self.size}) got input {list(x.shape)}")
        t = x.tracer
        ins = [x.name, self.traced(t, "weight").name, self.traced(t, "bias").name]
        return t.node("LayerNormalization", ins, x.shape, axis=-1, epsilon=self.eps)


class BatchNorm2d(Module):
    """Inference batch norm with running statistics (PyTorch's names)."""

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.param("weight", np.ones(num_features, np.float32))
        self.param("bias", np.zeros(num_features, np.float32))
        self.param("running_mean", np.zeros(num_features, np.float32))
        self.param("running_var", np.ones(num_features, np.float32))

    def forward(self, x: Tensor) -> Tensor:
        _expect(x, 4, "BatchNorm2d")
        t = x.tracer
        names = ["weight", "bias", "running_mean", "running_var"]
        ins = [x.name, *(self.traced(t, n).name for n in names)]
        return t.node("BatchNormalization", ins, x.shape, epsilon=self.eps)


class MaxPool2d(Module):
    def __init__(self, kernel_size: int, stride: int | None = None, padding: int = 0) -> None:
        super().__init__()
        self.k, self.s, self.p = _pair(kernel_size), _pair(stride or kernel_size), _pair(padding)

    op_type = "MaxPool"

    def forward(self, x: Tensor) -> Tensor:
        _expect(x, 4, type(self).__name__)
        n, c, h, w = x.shape
        size = [(d + 2 * p - k) // s + 1 for d, p, k, s in zip((h, w), self.p, self.k, self.s)]
        return x.tracer.node(
            self.op_type,
            [x.name],
            (n, c, *size),
            kernel_shape=list(self.k),
            strides=list(self.s),
            pads=[self.p[0], self.p[1], self.p[0], self.p[1]],
        )


class AvgPool2d(MaxPool2d):
    op_type = "AveragePool"


class AdaptiveAvgPool2d(Module):
    """Only output size 1 (global average pooling), the case classifiers use."""

    def __init__(self, output_size: int = 1) -> None:
        super().__init__()
        if _pair(output_size) != (1, 1):
            raise ArgumentError("nn.AdaptiveAvgPool2d supports output_size=1 only")

    def forward(self, x: Tensor) -> Tensor:
        _expect(x, 4, "AdaptiveAvgPool2d")
        return x.tracer.node("GlobalAveragePool", [x.name], (*x.shape[:2], 1, 1), x.dtype)


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by int64 indices."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.param("weight", _rng_normal((num_embeddings, embedding_dim)))

    def forward(self, ids: Tensor) -> Tensor:
        if not ids.dtype.startswith("int"):
            raise ArgumentError(f"nn.Embedding takes integer indices, got {ids.dtype}")
        t = ids.tracer
        w = self.traced(t, "weight")
        return t.node("Gather", [w.name, ids.name], (*ids.shape, w.shape[1]), axis=0)


def _rng_normal(shape: tuple[int, ...]) -> np.ndarray:
    from ember.frontend.nn.module import _RNG

    return _RNG[0].standard_normal(shape).astype(np.float32)


class MultiheadAttention(Module):
    """Self-attention as PyTorch's ``nn.MultiheadAttention(batch_first=True)`` computes it
    for ``mha(x, x, x)``: ``in_proj_weight`` (3E, E), ``out_proj`` a Linear(E, E)."""

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ArgumentError(f"nn.MultiheadAttention: {num_heads} heads must divide {embed_dim}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.param("in_proj_weight", init_uniform((3 * embed_dim, embed_dim), embed_dim))
        self.param("in_proj_bias", np.zeros(3 * embed_dim, np.float32))
        self.out_proj = Linear(embed_dim, embed_dim)

    def forward(self, x: Tensor) -> Tensor:
        _expect(x, 3, "MultiheadAttention")
        b, s, e = x.shape
        if e != self.embed_dim:
            raise ArgumentError(f"nn.MultiheadAttention({self.embed_dim}) got {list(x.shape)}")
        h, d = self.num_heads, e // self.num_heads
        t = x.tracer
        w, bias = self._params["in_proj_weight"], self._params["in_proj_bias"]
        heads = []
        for k in range(3):  # q, k, v: (b, s, e) -> (b, h, s, d)
            wk = t.constant(np.ascontiguousarray(w[k * e : (k + 1) * e].T), f"{self._scope}.w{k}")
            bk = t.constant(bias[k * e : (k + 1) * e], f"{self._scope}.b{k}")
            proj = t.node("MatMul", [x.name, wk.name], (b, s, e)) + bk
            heads.append(proj.reshape(b, s, h, d).transpose(0, 2, 1, 3))
        q, k_, v = heads
        scores = (q @ k_.transpose(0, 1, 3, 2)) * np.float32(1.0 / np.sqrt(d))
        ctx = scores.softmax(-1) @ v
        return self.out_proj(ctx.transpose(0, 2, 1, 3).reshape(b, s, e))


class Sequential(Module):
    def __init__(self, *layers: Module) -> None:
        super().__init__()
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)
        self.layers = list(layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
