"""N-D max and average pooling over channel-first layouts, with ONNX's options.

Pads (asymmetric), strides, dilations and ``ceil_mode`` are as ONNX defines them;
positions outside the input never count: max pooling ignores them, average pooling
divides by the number of real elements (``count_include_pad=False``) or by the
window clipped to the padded extent (``True``). Global pooling is a window the
size of the input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi import nan_order
from ember.tir.topi.reduce import acc_dtype
from ember.tir.topi.transform import static_shape


def pool_out_size(size: int, k: int, s: int, d: int, lo: int, hi: int, ceil_mode: bool) -> int:
    """Output extent of one pooled dim; with ``ceil_mode`` the last window must still start inside
    the input or left padding (ONNX's rule)."""
    span = size + lo + hi - d * (k - 1) - 1
    out = -(-span // s) + 1 if ceil_mode else span // s + 1
    if ceil_mode and (out - 1) * s >= size + lo:  # the last window must start inside
        out -= 1
    return out


@dataclass(frozen=True)
class Window:
    """A sliding window over the spatial dims: sizes, strides, dilations, begin/end pads."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dil: tuple[int, ...]
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    sizes: tuple[int, ...]

    def out_sizes(self, ceil_mode: bool, op: str) -> list[int]:
        """Output positions per spatial dim; an empty output is an ``ArgumentError``."""
        out = [
            pool_out_size(n, k, s, d, lo, hi, ceil_mode)
            for n, k, s, d, lo, hi in zip(
                self.sizes, self.kernel, self.strides, self.dil, self.lo, self.hi
            )
        ]
        if any(n <= 0 for n in out):
            raise ArgumentError(f"{op}: output would be empty ({out})")
        return out

    def taps(self, y: Sequence[E.PrimExpr], r: Sequence[Any]) -> list[E.PrimExpr]:
        """Input positions of tap ``r`` of the window at output ``y`` (may be in the padding)."""
        return [y[d] * self.strides[d] + r[d] * self.dil[d] - self.lo[d] for d in range(len(y))]

    def count(self, y: Sequence[E.PrimExpr], include_pad: bool) -> E.PrimExpr:
        """Taps of the window that count: real elements, or the padded extent if included."""
        total: E.PrimExpr = E.const(1, "int32")
        for d in range(len(y)):
            start, dil = y[d] * self.strides[d] - self.lo[d], self.dil[d]
            first, stop = (
                (-self.lo[d], self.sizes[d] + self.hi[d]) if include_pad else (0, self.sizes[d])
            )
            # taps start + m*dil (0 <= m < k) with first <= tap < stop
            m_lo = E.max_((first - start + dil - 1) // dil, 0)
            m_hi = E.min_((stop - start + dil - 1) // dil, self.kernel[d])
            total = total * E.max_(m_hi - m_lo, 1)
        return total


def padded_read(
    X: Tensor, lead: Sequence[E.PrimExpr], pos: Sequence[E.PrimExpr], fill: E.PrimExpr
) -> E.PrimExpr:
    """``X[*lead, *pos]``, or ``fill`` where ``pos`` falls outside X's trailing dims.

    The index is clamped as well, so the load stays in bounds whichever branch a
    vectorized select evaluates.
    """
    sizes = static_shape(X)[len(lead) :]
    inside = None
    for p, n in zip(pos, sizes):
        ok = E.logical_and(p >= 0, p < n)
        inside = ok if inside is None else E.logical_and(inside, ok)
    clamped = [E.max_(E.min_(p, n - 1), 0) for p, n in zip(pos, sizes)]
    value = X[(*lead, *clamped)]
    return value if inside is None else E.select(inside, value, fill)


def pool_nd(
    X: Tensor,
    kind: str,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int] | None = None,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
    name: str = "pool",
) -> Tensor:
    """Pool the spatial dims of ``X`` (N, C, *spatial); ``kind`` is "max" or "avg"."""
    xs = static_shape(X)
    nsp = len(xs) - 2
    if nsp < 1 or len(kernel) != nsp:
        raise ArgumentError(f"pool: kernel {list(kernel)} does not fit input {list(xs)}")
    if kind not in ("max", "avg"):
        raise ArgumentError(f"pool: kind must be 'max' or 'avg', got {kind!r}")
    dil = tuple(dilations or (1,) * nsp)
    w = Window(tuple(kernel), tuple(strides), dil, tuple(pads[:nsp]), tuple(pads[nsp:]), xs[2:])
    out_sp = w.out_sizes(ceil_mode, "pool")
    rs = [te.reduce_axis((0, kernel[d]), name=f"r{d}") for d in range(nsp)]
    fill = te.min_value(X.dtype) if kind == "max" else E.const(0, X.dtype)
    # a NaN in a max window gives NaN (nan_order); padding (-inf) never wins
    reducer = nan_order.max_nan if kind == "max" else te.sum
    # an average of 16-bit floats sums and divides in float32, as onnxruntime
    acc = X.dtype if kind == "max" else acc_dtype(X.dtype)

    def tap(i: Sequence[E.PrimExpr]) -> E.PrimExpr:
        v = padded_read(X, i[:2], w.taps(i[2:], rs), fill)
        return v if v.dtype == acc else E.cast(acc, v)

    red = te.compute(
        (*xs[:2], *out_sp),
        lambda *i: reducer(tap(i), axis=tuple(rs)),
        name=name if kind == "max" else f"{name}_sum",
        tag=f"pool_{kind}",
    )
    if kind == "max":
        return red

    def average(*i: E.PrimExpr) -> E.PrimExpr:
        value = red[i] / E.cast(acc, w.count(i[2:], count_include_pad))
        return value if acc == X.dtype else E.cast(X.dtype, value)

    return te.compute(red.shape, average, name=name, tag="pool_avg")


def softmax_axis(X: Tensor, axis: int, log: bool = False, name: str = "softmax") -> Tensor:
    """Softmax (or log-softmax) of an N-D tensor along ``axis``, stabilised by the maximum.

    16-bit floats exponentiate, sum and divide in float32 and round once at the end, as
    onnxruntime does: a 1000-wide float16 row summed in float16 is off by 1-2%.
    """
    xs = static_shape(X)
    n = xs[axis]
    acc = acc_dtype(X.dtype)
    k1 = te.reduce_axis((0, n), name="k1")
    k2 = te.reduce_axis((0, n), name="k2")
    red_shape = xs[:axis] + xs[axis + 1 :]

    def at(i: Sequence[E.PrimExpr], k: E.PrimExpr) -> tuple[E.PrimExpr, ...]:
        return (*i[:axis], k, *i[axis:])

    def wide(v: E.PrimExpr) -> E.PrimExpr:
        return v if v.dtype == acc else E.cast(acc, v)

    mx = te.compute(red_shape, lambda *i: te.max(X[at(i, k1)], axis=k1), name=f"{name}_max")
    sm = te.compute(
        red_shape,
        lambda *i: te.sum(te.exp(wide(X[at(i, k2)]) - wide(mx[i])), axis=k2),
        name=f"{name}_sum",
    )

    def out(*i: E.PrimExpr) -> E.PrimExpr:
        r = (*i[:axis], *i[axis + 1 :])
        shifted = wide(X[i]) - wide(mx[r])
        value = shifted - te.log(sm[r]) if log else te.exp(shifted) / sm[r]
        return value if acc == X.dtype else E.cast(X.dtype, value)

    return te.compute(xs, out, name=name, tag="softmax")
