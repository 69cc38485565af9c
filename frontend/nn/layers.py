"""The layers of ``ember.frontend.nn``, with PyTorch's parameter names, shapes and defaults.

Each layer emits the ONNX operators an exported PyTorch layer would: ``Linear`` a
``Gemm`` (2-D input) or ``MatMul`` + ``Add``, ``Conv2d`` a ``Conv`` (after a ``Pad`` for
the non-zero padding modes), ``LayerNorm`` a ``LayerNormalization``,
``MultiheadAttention`` the projections, a scaled ``MatMul``/``Softmax``/``MatMul`` per
head group and the output projection.

Every constructor takes PyTorch's arguments with PyTorch's defaults, and computes what
PyTorch's layer computes in evaluation mode (``model.eval()``): Ember compiles models
for inference, so ``Dropout`` is the identity and ``BatchNorm2d`` uses its running
statistics (or the batch's, with ``track_running_stats=False``, as PyTorch does). That
is the one deliberate difference: a fresh PyTorch module is in training mode, an Ember
one always evaluates. An argument that would compute something Ember cannot express
is an ``ArgumentError`` saying "not supported", never silently ignored.
"""

from __future__ import annotations

import math
import operator
import warnings
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.nn.module import Module, as_array, init_uniform
from ember.frontend.nn.tensor import Tensor, dtype_kind


def _pair(v: Any, what: str, minimum: int = 0) -> tuple[int, int]:
    """An int or a pair of ints, each at least ``minimum``, as a pair."""
    try:
        if isinstance(v, bool):
            raise TypeError
        pair = (operator.index(v),) * 2 if not isinstance(v, (tuple, list)) else tuple(v)
        if len(pair) != 2 or any(isinstance(p, bool) for p in pair):
            raise TypeError
        out = (operator.index(pair[0]), operator.index(pair[1]))
    except TypeError as e:
        raise ArgumentError(f"{what} must be an int or a pair of ints, got {v!r}") from e
    if min(out) < minimum:
        raise ArgumentError(f"{what} must be at least {minimum}, got {v!r}")
    return out


def _expect(x: Tensor, ndim: int, what: str) -> None:
    if x.ndim != ndim:
        raise ArgumentError(f"nn.{what} expects a {ndim}-D input, got shape {list(x.shape)}")


def _expect_float(x: Tensor, what: str) -> None:
    """Weights are float32; PyTorch refuses to mix them with another input dtype, and so do we
    (``x.float()`` converts)."""
    if x.dtype != "float32":
        raise ArgumentError(
            f"nn.{what} has float32 parameters and got a {x.dtype} input; use x.float()"
        )


def _has(module: Module, name: str) -> bool:
    return module._params.get(name) is not None


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
        return _has(self, "bias")

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != (self.in_features,):
            raise ArgumentError(
                f"nn.Linear({self.in_features}, {self.out_features}) got input {list(x.shape)}"
            )
        _expect_float(x, "Linear")
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
        self.kernel = _pair(kernel_size, "nn.Conv2d kernel_size", 1)
        self.stride = _pair(stride, "nn.Conv2d stride", 1)
        self.dilation = _pair(dilation, "nn.Conv2d dilation", 1)
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
        ph, pw = _pair(padding, "nn.Conv2d padding")
        return (ph, pw, ph, pw)

    @property
    def has_bias(self) -> bool:
        return _has(self, "bias")

    def forward(self, x: Tensor) -> Tensor:
        _expect(x, 4, "Conv2d")
        _expect_float(x, "Conv2d")
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


class _Activation(Module):
    op_type = ""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace  # no meaning in a traced graph; kept for PyTorch's signature
        self.attrs: dict[str, Any] = {}

    def forward(self, x: Tensor) -> Tensor:
        return x.unary(self.op_type, **self.attrs)


class ReLU(_Activation):
    op_type = "Relu"


class Sigmoid(_Activation):
    op_type = "Sigmoid"

    def __init__(self) -> None:
        super().__init__()


class Tanh(_Activation):
    op_type = "Tanh"

    def __init__(self) -> None:
        super().__init__()


class LeakyReLU(_Activation):
    """``max(0, x) + negative_slope * min(0, x)``; PyTorch's default slope is 0.01."""

    op_type = "LeakyRelu"

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__(inplace)
        self.negative_slope = float(negative_slope)
        self.attrs = {"alpha": self.negative_slope}


class GELU(_Activation):
    """GELU; exact (erf) by default, ``approximate="tanh"`` for the tanh form, as in PyTorch."""

    op_type = "Gelu"

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ArgumentError(
                f"nn.GELU: approximate must be 'none' or 'tanh', got {approximate!r}"
            )
        self.approximate = approximate
        self.attrs = {"approximate": approximate}


class Identity(Module):
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


class Softmax(Module):
    """Softmax over ``dim``. PyTorch's default ``dim=None`` picks a dim from the rank
    (0 for 0-, 1- and 3-D inputs, else 1) with a deprecation warning; so does this."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        dim = self.dim
        if dim is None:
            warnings.warn(
                "nn.Softmax: implicit dimension choice is deprecated (as in PyTorch); pass dim=",
                UserWarning,
                stacklevel=2,
            )
            dim = 0 if x.ndim in (0, 1, 3) else 1
        return x.softmax(dim)


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


class LayerNorm(Module):
    """Normalise over the last ``len(normalized_shape)`` dims; ``weight`` (ones) and
    ``bias`` (zeros) of that shape unless ``elementwise_affine=False`` / ``bias=False``."""

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        shape = (
            (operator.index(normalized_shape),)
            if not isinstance(normalized_shape, (tuple, list))
            else tuple(operator.index(d) for d in normalized_shape)
        )
        self.normalized_shape, self.eps = shape, float(eps)
        self.elementwise_affine = elementwise_affine
        self.size = shape[-1] if len(shape) == 1 else shape
        ones, zeros = np.ones(shape, np.float32), np.zeros(shape, np.float32)
        self.param("weight", ones if elementwise_affine else None, shape=shape)
        self.param("bias", zeros if elementwise_affine and bias else None, shape=shape)

    def forward(self, x: Tensor) -> Tensor:
        k = len(self.normalized_shape)
        if x.shape[x.ndim - k :] != self.normalized_shape or x.ndim < k:
            raise ArgumentError(
                f"nn.LayerNorm({list(self.normalized_shape)}) got input {list(x.shape)}"
            )
        _expect_float(x, "LayerNorm")
        t = x.tracer
        scale = (
            self.traced(t, "weight")
            if _has(self, "weight")
            else t.constant(np.ones(self.normalized_shape, np.float32), f"{self._scope}.ones")
        )
        ins = [x.name, scale.name]
        if _has(self, "bias"):
            ins.append(self.traced(t, "bias").name)
        return t.node("LayerNormalization", ins, x.shape, axis=-k, epsilon=self.eps)


class BatchNorm2d(Module):
    # PyTorch fills a missing num_batches_tracked in load_state_dict (older checkpoints).
    _optional_state = frozenset({"num_batches_tracked"})

    """Batch norm in evaluation mode, with PyTorch's names and buffers (``running_mean``,
    ``running_var``, ``num_batches_tracked``). ``momentum`` only matters in training and is
    kept for the signature; ``track_running_stats=False`` normalises with the batch's own
    statistics (biased variance), as PyTorch does in evaluation mode."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        c = (num_features,)
        self.num_features, self.eps, self.momentum = num_features, float(eps), momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.param("weight", np.ones(c, np.float32) if affine else None, shape=c)
        self.param("bias", np.zeros(c, np.float32) if affine else None, shape=c)
        track = track_running_stats
        self.param("running_mean", np.zeros(c, np.float32) if track else None, shape=c)
        self.param("running_var", np.ones(c, np.float32) if track else None, shape=c)
        count = np.array(0, np.int64) if track else None
        self.param("num_batches_tracked", count, shape=(), dtype="int64")

    def _param_or(self, t: Any, name: str, fill: float) -> Tensor:
        if _has(self, name):
            return self.traced(t, name)
        return t.constant(np.full(self.num_features, fill, np.float32), f"{self._scope}.{name}")

    def forward(self, x: Tensor) -> Tensor:
        _expect(x, 4, "BatchNorm2d")
        _expect_float(x, "BatchNorm2d")
        if x.shape[1] != self.num_features:
            raise ArgumentError(f"nn.BatchNorm2d({self.num_features}) got {x.shape[1]} channels")
        t = x.tracer
        weight, bias = self._param_or(t, "weight", 1.0), self._param_or(t, "bias", 0.0)
        if not _has(self, "running_mean"):
            return self._batch_stats(x, weight, bias)
        ins = [x.name, weight.name, bias.name]
        ins += [self.traced(t, "running_mean").name, self.traced(t, "running_var").name]
        return t.node("BatchNormalization", ins, x.shape, epsilon=self.eps)

    def _batch_stats(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        centred = x - x.mean((0, 2, 3))
        var = (centred * centred).mean((0, 2, 3))
        normed = centred / (var + self.eps).unary("Sqrt")
        c = (1, self.num_features, 1, 1)
        return normed * weight.reshape(*c) + bias.reshape(*c)


class MaxPool2d(Module):
    """Max pooling with PyTorch's arguments; ``ceil_mode`` windows must start inside the
    input or its left padding, as in PyTorch. ``return_indices`` is not supported."""

    op_type = "MaxPool"

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        if return_indices:
            raise ArgumentError("nn.MaxPool2d: return_indices=True is not supported")
        name = f"nn.{type(self).__name__}"
        self.kernel_size = self.k = _pair(kernel_size, f"{name} kernel_size", 1)
        self.stride = self.s = _pair(kernel_size if stride is None else stride, f"{name} stride", 1)
        self.padding = self.p = _pair(padding, f"{name} padding")
        self.dilation = _pair(dilation, f"{name} dilation", 1)
        self.ceil_mode = bool(ceil_mode)
        if any(p > k // 2 for p, k in zip(self.p, self.k)):  # PyTorch's rule (not dilated)
            raise ArgumentError(
                f"{name}: padding {list(self.p)} must be at most half the kernel {list(self.k)}"
            )

    def _out_size(self, size: int, d: int) -> int:
        """PyTorch's pooling output size for spatial dim ``d``."""
        k, s, p, dl = self.k[d], self.s[d], self.p[d], self.dilation[d]
        span = size + 2 * p - dl * (k - 1) - 1
        out = (-(-span // s) if self.ceil_mode else span // s) + 1
        if self.ceil_mode and (out - 1) * s >= size + p:  # the last window starts inside
            out -= 1
        if out < 1:
            raise ArgumentError(f"nn.{type(self).__name__}: input size {size} gives no output")
        return out

    def _attrs(self) -> dict[str, Any]:
        return {
            "kernel_shape": list(self.k),
            "strides": list(self.s),
            "pads": [self.p[0], self.p[1], self.p[0], self.p[1]],
            "ceil_mode": int(self.ceil_mode),
        }

    def forward(self, x: Tensor) -> Tensor:
        _expect(x, 4, type(self).__name__)
        n, c, h, w = x.shape
        size = (self._out_size(h, 0), self._out_size(w, 1))
        attrs = {**self._attrs(), "dilations": list(self.dilation)}
        return x.tracer.node(self.op_type, [x.name], (n, c, *size), x.dtype, **attrs)


class AvgPool2d(MaxPool2d):
    """Average pooling with PyTorch's arguments and defaults: ``count_include_pad=True``
    (the zero padding counts in the divisor; windows that ``ceil_mode`` lets run past the
    padding do not), and ``divisor_override`` to divide every window's sum by one number."""

    op_type = "AveragePool"

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode=ceil_mode)
        if divisor_override is not None and (
            isinstance(divisor_override, bool) or int(divisor_override) <= 0
        ):
            raise ArgumentError(
                f"nn.AvgPool2d: divisor_override must be > 0, not {divisor_override}"
            )
        self.count_include_pad, self.divisor_override = bool(count_include_pad), divisor_override

    def forward(self, x: Tensor) -> Tensor:
        _expect(x, 4, "AvgPool2d")
        if x.dtype not in ("float16", "float32", "float64"):
            raise ArgumentError(f"nn.AvgPool2d takes a float input, got {x.dtype}")
        n, c, h, w = x.shape
        size = (self._out_size(h, 0), self._out_size(w, 1))
        if self.divisor_override is None:
            attrs = {**self._attrs(), "count_include_pad": int(self.count_include_pad)}
            return x.tracer.node("AveragePool", [x.name], (n, c, *size), x.dtype, **attrs)
        # Window sums: pad every window out to its full size (ceil_mode's overhang too), so
        # the average counts k*k elements, and scale by k*k / divisor.
        extra = [
            (o - 1) * s + k - (d + 2 * p)
            for o, s, k, d, p in zip(size, self.s, self.k, (h, w), self.p)
        ]
        hi = [p + max(e, 0) for p, e in zip(self.p, extra)]
        attrs = {
            "kernel_shape": list(self.k),
            "strides": list(self.s),
            "pads": [self.p[0], self.p[1], hi[0], hi[1]],
            "count_include_pad": 1,
        }
        avg = x.tracer.node("AveragePool", [x.name], (n, c, *size), x.dtype, **attrs)
        return avg * (self.k[0] * self.k[1] / self.divisor_override)


class AdaptiveAvgPool2d(Module):
    """PyTorch's adaptive average pooling: output cell ``i`` of a dim of size ``n`` averages
    input ``floor(i*n/out) .. ceil((i+1)*n/out)``; ``None`` keeps a dim's size."""

    def __init__(self, output_size: int | tuple[int | None, int | None]) -> None:
        super().__init__()
        sizes = output_size if isinstance(output_size, (tuple, list)) else (output_size,) * 2
        if len(sizes) != 2 or any(
            s is not None and (isinstance(s, bool) or operator.index(s) < 1) for s in sizes
        ):
            raise ArgumentError(f"nn.AdaptiveAvgPool2d: bad output_size {output_size!r}")
        self.output_size = tuple(sizes)

    def forward(self, x: Tensor) -> Tensor:
        _expect(x, 4, "AdaptiveAvgPool2d")
        outs = [x.shape[2 + d] if o is None else int(o) for d, o in enumerate(self.output_size)]
        if outs == [1, 1]:
            return x.tracer.node("GlobalAveragePool", [x.name], (*x.shape[:2], 1, 1), x.dtype)
        for d, out in enumerate(outs):  # a rectangle's mean is the mean of its rows' means
            x = _adaptive_mean(x, 2 + d, out)
        return x


def _adaptive_mean(x: Tensor, axis: int, out: int) -> Tensor:
    n = x.shape[axis]
    if n == out:
        return x
    cells = []
    for i in range(out):
        lo, hi = (i * n) // out, -(-((i + 1) * n) // out)
        cells.append(_slice(x, axis, lo, hi).mean((axis,)))
    if len(cells) == 1:
        return cells[0]
    shape = tuple(out if d == axis else s for d, s in enumerate(x.shape))
    return x.tracer.node("Concat", [c.name for c in cells], shape, x.dtype, axis=axis)


def _slice(x: Tensor, axis: int, lo: int, hi: int) -> Tensor:
    t = x.tracer
    consts = [t.constant(np.array([v], np.int64), "slice") for v in (lo, hi, axis)]
    shape = tuple(hi - lo if d == axis else s for d, s in enumerate(x.shape))
    return t.node("Slice", [x.name, *(c.name for c in consts)], shape, x.dtype)


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
    from ember.frontend.nn.module import _RNG

    return _RNG[0].standard_normal(shape).astype(np.float32)


def _xavier_uniform(shape: tuple[int, int]) -> np.ndarray:
    from ember.frontend.nn.module import _RNG

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
        if _has(self, "in_proj_bias"):
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
            _expect_float(x, "MultiheadAttention")
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


class Sequential(Module):
    def __init__(self, *layers: Module) -> None:
        super().__init__()
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)
        self.layers = list(layers)

    def __getitem__(self, i: int) -> Module:
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
