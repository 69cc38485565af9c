"""The layers of ``ember.frontend.nn``, with PyTorch's parameter names, shapes and defaults.

Each layer emits the ONNX operators an exported PyTorch layer would: ``Linear`` a
``Gemm`` (2-D input) or ``MatMul`` + ``Add``, ``Conv2d`` a ``Conv`` (after a ``Pad`` for
the non-zero padding modes), ``LayerNorm`` a ``LayerNormalization``,
``MultiheadAttention`` (``attention.py``) the projections, a scaled
``MatMul``/``Softmax``/``MatMul`` per head group and the output projection; the
activations live in ``activation.py``, the normalisations in ``normalization.py``, the
pooling layers in ``pooling.py`` (all re-exported here), the shared argument checks in
``checks.py``.

Every constructor takes PyTorch's arguments with PyTorch's defaults, and computes what
PyTorch's layer computes in evaluation mode (``model.eval()``): Ember compiles models
for inference, so ``Dropout`` is the identity and ``BatchNorm2d`` uses its running
statistics (or the batch's, with ``track_running_stats=False``, as PyTorch does). That
is the one deliberate difference: a fresh PyTorch module is in training mode, an Ember
one always evaluates. An argument that would compute something Ember cannot express
is an ``ArgumentError`` saying "not supported", never silently ignored. Image layers
take batched (N, C, H, W) inputs; PyTorch's unbatched (C, H, W) form is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.nn.activation import (  # noqa: F401 - re-exported: the layers' names
    GELU,
    LeakyReLU,
    ReLU,
    Sigmoid,
    Softmax,
    Tanh,
)
from ember.frontend.nn.checks import expect_float, expect_ndim, has_param, pair
from ember.frontend.nn.module import _RNG, Module, init_uniform
from ember.frontend.nn.normalization import BatchNorm2d, LayerNorm  # noqa: F401 - re-exported
from ember.frontend.nn.tensor import Tensor


class Linear(Module):
    """``y = x @ weight.T + bias``; weight is (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.param("weight", init_uniform((out_features, in_features), in_features))
        b = init_uniform((out_features,), in_features) if bias else None
        self.param("bias", b, shape=(out_features,))

    @property
    def has_bias(self) -> bool:
        return has_param(self, "bias")

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != (self.in_features,):
            raise ArgumentError(
                f"nn.Linear({self.in_features}, {self.out_features}) got input {list(x.shape)}"
            )
        expect_float(x, "Linear")
        t = x.tracer
        w = self.traced(t, "weight")
        out_shape = (*x.shape[:-1], self.out_features)
        if x.ndim == 2:
            ins = [x.name, w.name] + ([self.traced(t, "bias").name] if self.has_bias else [])
            return t.node("Gemm", ins, out_shape, transB=1)
        wt = t.constant(np.ascontiguousarray(self._params["weight"].T), f"{self._scope}.weight_t")
        y = t.node("MatMul", [x.name, wt.name], out_shape)
        return y + self.traced(t, "bias") if self.has_bias else y


_PAD_MODES = {"zeros": None, "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


class Conv2d(Module):
    """2-D convolution, NCHW; weight is (out, in / groups, kh, kw).

    ``padding`` is an int, a pair, ``"valid"`` or ``"same"`` (stride 1 only, the extra
    pixel of an even kernel on the bottom/right, as PyTorch); ``padding_mode`` is
    ``"zeros"``, ``"reflect"``, ``"replicate"`` or ``"circular"``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | str = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
    ) -> None:
        super().__init__()
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ArgumentError(f"nn.Conv2d: groups={groups} must divide both channel counts")
        if padding_mode not in _PAD_MODES:
            raise ArgumentError(
                f"nn.Conv2d: padding_mode must be one of {list(_PAD_MODES)}, got {padding_mode!r}"
            )
        self.kernel = pair(kernel_size, "nn.Conv2d kernel_size", 1)
        self.stride = pair(stride, "nn.Conv2d stride", 1)
        self.dilation = pair(dilation, "nn.Conv2d dilation", 1)
        self.pads = self._resolve_padding(padding)  # (top, left, bottom, right)
        self.padding = padding if isinstance(padding, str) else self.pads[:2]
        self.groups, self.padding_mode = groups, padding_mode
        self.in_channels, self.out_channels = in_channels, out_channels
        fan_in = in_channels // groups * self.kernel[0] * self.kernel[1]
        shape = (out_channels, in_channels // groups, *self.kernel)
        self.param("weight", init_uniform(shape, fan_in))
        b = init_uniform((out_channels,), fan_in) if bias else None
        self.param("bias", b, shape=(out_channels,))

    def _resolve_padding(self, padding: Any) -> tuple[int, int, int, int]:
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding == "same":
            if self.stride != (1, 1):
                raise ArgumentError("nn.Conv2d: padding='same' needs stride 1 (as in PyTorch)")
            total = [d * (k - 1) for d, k in zip(self.dilation, self.kernel)]
            return (
                total[0] // 2,
                total[1] // 2,
                total[0] - total[0] // 2,
                total[1] - total[1] // 2,
            )
        if isinstance(padding, str):
            raise ArgumentError(
                f"nn.Conv2d: padding must be 'valid', 'same' or ints, got {padding!r}"
            )
        ph, pw = pair(padding, "nn.Conv2d padding")
        return (ph, pw, ph, pw)

    @property
    def has_bias(self) -> bool:
        return has_param(self, "bias")

    def forward(self, x: Tensor) -> Tensor:
        expect_ndim(x, 4, "Conv2d")
        expect_float(x, "Conv2d")
        n, c, h, w = x.shape
        if c != self.in_channels:
            raise ArgumentError(f"nn.Conv2d expects {self.in_channels} channels, got {c}")
        pads = list(self.pads)
        mode = _PAD_MODES[self.padding_mode]
        if mode is not None and any(pads):
            x = _pad(x, pads, mode, "nn.Conv2d")
            pads = [0, 0, 0, 0]
        size = [
            (d + lo + hi - dl * (k - 1) - 1) // s + 1
            for d, lo, hi, dl, k, s in zip(
                x.shape[2:], pads[:2], pads[2:], self.dilation, self.kernel, self.stride
            )
        ]
        if min(size) < 1:
            raise ArgumentError(f"nn.Conv2d: input {list(x.shape)} is smaller than the kernel")
        t = x.tracer
        ins = [x.name, self.traced(t, "weight").name]
        if self.has_bias:
            ins.append(self.traced(t, "bias").name)
        return t.node(
            "Conv",
            ins,
            (n, self.out_channels, *size),
            kernel_shape=list(self.kernel),
            strides=list(self.stride),
            pads=pads,
            dilations=list(self.dilation),
            group=self.groups,
        )


def _pad(x: Tensor, pads: list[int], mode: str, what: str) -> Tensor:
    """Pad H and W of an NCHW tensor (pads: top, left, bottom, right) with an ONNX mode.

    PyTorch refuses reflect padding of at least the size and circular padding beyond it;
    so do we, rather than compute something PyTorch would not.
    """
    for d, size in ((0, x.shape[2]), (1, x.shape[3])):
        worst = max(pads[d], pads[d + 2])
        if (mode == "reflect" and worst >= size) or (mode == "wrap" and worst > size):
            raise ArgumentError(f"{what}: padding {worst} is too large for {mode} on size {size}")
    full = np.array([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], dtype=np.int64)
    t = x.tracer
    p = t.constant(full, "pads")
    shape = (*x.shape[:2], x.shape[2] + pads[0] + pads[2], x.shape[3] + pads[1] + pads[3])
    return t.node("Pad", [x.name, p.name], shape, x.dtype, mode=mode)


class Identity(Module):
    """``torch.nn.Identity``: passes its input through, as models use it for a removed layer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()  # PyTorch's Identity takes and ignores any arguments

    def forward(self, x: Tensor) -> Tensor:
        return x


class Dropout(Identity):
    """The identity: PyTorch's dropout in evaluation mode (Ember compiles for inference)."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"nn.Dropout: p must be between 0 and 1, got {p}")
        self.p, self.inplace = p, inplace


class Flatten(Module):
    """Flatten dims ``start_dim`` .. ``end_dim`` into one (PyTorch's defaults 1 and -1)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        nd = max(x.ndim, 1)
        s, e = self.start_dim, self.end_dim
        if not (-nd <= s < nd and -nd <= e < nd) or s % nd > e % nd:
            raise ArgumentError(
                f"nn.Flatten({s}, {e}) does not fit an input of shape {list(x.shape)}"
            )
        s, e = s % nd, e % nd
        shape = (*x.shape[:s], int(np.prod(x.shape[s : e + 1])), *x.shape[e + 1 :])
        return x.reshape(*shape)


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by integer indices.

    ``padding_idx`` zeroes that row at initialisation, as PyTorch (it only changes
    gradients otherwise). ``max_norm`` renormalises rows as they are read, which is not
    supported; ``_weight`` gives the initial table.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Any = None,
        _freeze: bool = False,
    ) -> None:
        super().__init__()
        if max_norm is not None:
            raise ArgumentError("nn.Embedding: max_norm is not supported")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ArgumentError(
                    f"nn.Embedding: padding_idx {padding_idx} is out of range "
                    f"for {num_embeddings} embeddings"
                )
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        shape = (num_embeddings, embedding_dim)
        if _weight is None:
            weight = _rng_normal(shape)
            if padding_idx is not None:
                weight[padding_idx] = 0.0
            self.param("weight", weight)
        else:
            self.param("weight", None, shape=shape)
            self.weight = _weight  # checked like any assignment

    def forward(self, ids: Tensor) -> Tensor:
        if ids.dtype not in ("int32", "int64"):
            raise ArgumentError(f"nn.Embedding takes int32 or int64 indices, got {ids.dtype}")
        t = ids.tracer
        w = self.traced(t, "weight")
        return t.node("Gather", [w.name, ids.name], (*ids.shape, w.shape[1]), axis=0)


def _rng_normal(shape: tuple[int, ...]) -> np.ndarray:
    return _RNG[0].standard_normal(shape).astype(np.float32)


class Sequential(Module):
    """Layers applied in order; children named "0", "1", ... as in PyTorch, so
    ``seq[1] = layer`` (or ``setattr(seq, "1", layer)``) replaces one in the next export."""

    def __init__(self, *layers: Module) -> None:
        super().__init__()
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)

    @property
    def layers(self) -> list[Module]:
        return list(self._children.values())

    def __getitem__(self, i: int) -> Module:
        return self.layers[i]

    def __setitem__(self, i: int, layer: Module) -> None:
        setattr(self, list(self._children)[i], layer)

    def __len__(self) -> int:
        return len(self._children)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
