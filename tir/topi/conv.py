"""N-D grouped convolution over channel-first layouts (NCW, NCHW, NCDHW) for the graph.

``nn.conv2d_nchw`` is the plain 2-D form the tuned templates use; this one takes any
number of spatial dims, groups, dilations, asymmetric pads and a bias. Padding is
read through a bounds test inside the reduction (no padded copy), so the compute
is one reduction stage plus, with a bias, one broadcast stage. float16 and bfloat16
convolutions accumulate in float32, add the bias there and round once (one more stage
that casts back where there is no bias), as onnxruntime does.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.pool import padded_read
from ember.tir.topi.reduce import acc_dtype, widen
from ember.tir.topi.transform import static_shape


def conv_out_size(size: int, k: int, stride: int, dil: int, pad_lo: int, pad_hi: int) -> int:
    """Output extent of one convolved dim, given its padding on each side; shared by every conv
    compute so their shapes agree."""
    return (size + pad_lo + pad_hi - dil * (k - 1) - 1) // stride + 1


def pad_spatial(
    X: Tensor, lo: Sequence[int], hi: Sequence[int], name: str = "pad", value: float = 0.0
) -> Tensor:
    """``X`` with its trailing dims padded by ``lo``/``hi`` elements of ``value``.

    A separate stage (tag ``"pad"``): the convolution that reads it then indexes affinely,
    so its inner loop vectorizes; a schedule may still inline it.
    """
    if not any(lo) and not any(hi):
        return X
    xs = static_shape(X)
    lead = len(xs) - len(lo)
    shape = (*xs[:lead], *(n + a + b for n, a, b in zip(xs[lead:], lo, hi)))
    fill = E.const(value, X.dtype)

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        pos = [p - a for p, a in zip(i[lead:], lo)]
        return padded_read(X, i[:lead], pos, fill)

    return te.compute(shape, f, name=name, tag="pad")


def conv_nd(
    X: Tensor,
    W: Tensor,
    bias: Tensor | None,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    groups: int = 1,
    name: str = "conv",
) -> Tensor:
    """``out[n, o, *y] = sum_{c, *r} X[n, g*Cg + c, *(y*s + r*d - pad)] * W[o, c, *r] (+ b[o])``.

    ``pads`` is ONNX's ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]``; padding is a
    separate stage (:func:`pad_spatial`).
    """
    xs, ws = static_shape(X), static_shape(W)
    nsp = len(xs) - 2
    if nsp < 1 or len(ws) != len(xs):
        raise ArgumentError(f"conv: input {list(xs)} and weights {list(ws)} ranks do not fit")
    N, C, *spatial = xs
    O, Cg, *kernel = ws
    if groups < 1 or C % groups or O % groups or Cg * groups != C:
        raise ArgumentError(
            f"conv: {C} input channels, weights {list(ws)} and group={groups} do not fit"
        )
    lo, hi = list(pads[:nsp]), list(pads[nsp:])
    out_sp = [
        conv_out_size(spatial[d], kernel[d], strides[d], dilations[d], lo[d], hi[d])
        for d in range(nsp)
    ]
    if any(s <= 0 for s in out_sp):
        raise ArgumentError(f"conv: output would be empty ({out_sp})")
    rc = te.reduce_axis((0, Cg), name="rc")
    rs = [te.reduce_axis((0, kernel[d]), name=f"r{d}") for d in range(nsp)]
    og = O // groups
    acc = acc_dtype(X.dtype)

    P = pad_spatial(X, lo, hi, name=f"{name}_pad")

    def f(n: E.PrimExpr, o: E.PrimExpr, *y: E.PrimExpr) -> E.PrimExpr:
        c = rc if groups == 1 else (o // og) * Cg + rc
        pos = [y[d] * strides[d] + rs[d] * dilations[d] for d in range(nsp)]
        return te.sum(widen(P[(n, c, *pos)], acc) * widen(W[(o, rc, *rs)], acc), axis=(rc, *rs))

    bare = bias is None and acc == X.dtype
    out = te.compute(
        (N, O, *out_sp), lambda *i: f(*i), name=name if bare else f"{name}_nb", tag="conv"
    )
    if bias is not None and static_shape(bias) != (O,):
        raise ArgumentError(f"conv: bias must have shape [{O}], got {list(static_shape(bias))}")
    return add_bias_and_round(out, bias, X.dtype, name)


def add_bias_and_round(out: Tensor, bias: Tensor | None, dtype: str, name: str) -> Tensor:
    """``out[n, o, ...] + bias[o]`` (per output channel) rounded to ``dtype`` once: the
    last stage of a convolution accumulated in a wider type. ``out`` itself where there is
    nothing to add or round."""
    if bias is None and out.dtype == dtype:
        return out

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        v = out[i] if bias is None else out[i] + widen(bias[i[1]], out.dtype)
        return v if v.dtype == dtype else E.cast(dtype, v)

    return te.compute(out.shape, f, name=name, tag="broadcast")
