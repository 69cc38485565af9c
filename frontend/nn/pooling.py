"""Pooling layers of ``ember.frontend.nn`` with PyTorch's arguments, defaults and output sizes.

``MaxPool2d`` and ``AvgPool2d`` emit ONNX ``MaxPool``/``AveragePool``, whose Ember
implementation clips windows as PyTorch does (a ``ceil_mode`` window must start inside
the input or its left padding; the divisor of ``count_include_pad`` is the window clipped
to the padded input). ``AdaptiveAvgPool2d`` is a global average for output 1, else
slices averaged one spatial dim at a time.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.nn.checks import expect_ndim, pair
from ember.frontend.nn.module import Module
from ember.frontend.nn.tensor import Tensor


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
        self.kernel_size = self.k = pair(kernel_size, f"{name} kernel_size", 1)
        self.stride = self.s = pair(kernel_size if stride is None else stride, f"{name} stride", 1)
        self.padding = self.p = pair(padding, f"{name} padding")
        self.dilation = pair(dilation, f"{name} dilation", 1)
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
        expect_ndim(x, 4, type(self).__name__)
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
        if divisor_override is not None:
            _positive_int(divisor_override, "nn.AvgPool2d divisor_override")
        self.count_include_pad, self.divisor_override = bool(count_include_pad), divisor_override

    def forward(self, x: Tensor) -> Tensor:
        expect_ndim(x, 4, "AvgPool2d")
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
        if len(sizes) != 2:
            raise ArgumentError(f"nn.AdaptiveAvgPool2d: bad output_size {output_size!r}")
        what = "nn.AdaptiveAvgPool2d output_size"
        self.output_size = tuple(None if s is None else _positive_int(s, what) for s in sizes)

    def forward(self, x: Tensor) -> Tensor:
        expect_ndim(x, 4, "AdaptiveAvgPool2d")
        outs = [x.shape[2 + d] if o is None else int(o) for d, o in enumerate(self.output_size)]
        if outs == [1, 1]:
            return x.tracer.node("GlobalAveragePool", [x.name], (*x.shape[:2], 1, 1), x.dtype)
        for d, out in enumerate(outs):  # a rectangle's mean is the mean of its rows' means
            x = _adaptive_mean(x, 2 + d, out)
        return x


def _positive_int(value: Any, what: str) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError as e:
        raise ArgumentError(f"{what} must be a positive int, got {value!r}") from e
    if number < 1:
        raise ArgumentError(f"{what} must be a positive int, got {value!r}")
    return number


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
