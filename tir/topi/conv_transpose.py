"""N-D grouped transposed convolution (ONNX ConvTranspose) over channel-first layouts.

The gradient of ``conv_nd`` with respect to its input, written as a gather so it is
one reduction stage: output position ``y`` takes input position ``q`` through tap
``r`` when ``y + pad_begin - r * dilation == q * stride``. Weights are
(C_in, C_out / groups, *kernel). The output size is given by the caller (the
ONNX converter works it out from ``output_shape``, ``output_padding`` and
``auto_pad``); positions no input reaches are zero (plus the bias).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.transform import static_shape


def conv_transpose_out_size(
    size: int, k: int, stride: int, dil: int, pad_lo: int, pad_hi: int, out_pad: int
) -> int:
    return stride * (size - 1) + out_pad + (k - 1) * dil + 1 - pad_lo - pad_hi


def conv_transpose_nd(
    X: Tensor,
    W: Tensor,
    bias: Tensor | None,
    strides: Sequence[int],
    pads_begin: Sequence[int],
    dilations: Sequence[int],
    out_spatial: Sequence[int],
    groups: int = 1,
    name: str = "conv_transpose",
) -> Tensor:
    """``out[n, o, *y] = sum_{c, *r} X[n, c, *q] * W[c, o % Og, *r]`` over the taps where
    ``y + pad_begin - r * dilation = q * stride`` lands on an input position ``q``."""
    xs, ws = static_shape(X), static_shape(W)
    nsp = len(xs) - 2
    if nsp < 1 or len(ws) != len(xs):
        raise ArgumentError(
            f"conv_transpose: input {list(xs)} and weights {list(ws)} ranks do not fit"
        )
    N, C, *spatial = xs
    Cw, Og, *kernel = ws
    if groups < 1 or C % groups or Cw != C:
        raise ArgumentError(
            f"conv_transpose: {C} input channels, weights {list(ws)} and group={groups} do not fit"
        )
    if len(out_spatial) != nsp or any(s <= 0 for s in out_spatial):
        raise ArgumentError(f"conv_transpose: output size {list(out_spatial)} is not valid")
    Cg = C // groups
    rc = te.reduce_axis((0, Cg), name="rc")
    # with dilation 1 only every stride-th tap reaches an input; a "phase" axis j walks
    # just those (tap r = (y + pad) % s + s * j), cutting the reduction by the stride
    phased = [strides[d] > 1 and dilations[d] == 1 and pads_begin[d] >= 0 for d in range(nsp)]
    extents = [-(-kernel[d] // strides[d]) if phased[d] else kernel[d] for d in range(nsp)]
    rs = [te.reduce_axis((0, extents[d]), name=f"r{d}") for d in range(nsp)]
    zero = E.const(0, X.dtype)

    def tap(d: int, y: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr, E.PrimExpr]:
        """(kernel tap, input position, validity) of reduction step rs[d] at output y."""
        s, t = strides[d], y + pads_begin[d]
        if phased[d]:
            r = t % s + rs[d] * s
            q = t // s - rs[d]
            ok = E.logical_and(r < kernel[d], E.logical_and(q >= 0, q < spatial[d]))
            return E.min_(r, kernel[d] - 1), q, ok
        t = t - rs[d] * dilations[d]
        q = t // s if s > 1 else t
        ok = E.logical_and(t >= 0, q < spatial[d])
        if s > 1:
            ok = E.logical_and(ok, t % s == 0)
        return rs[d], q, ok

    def f(n: E.PrimExpr, o: E.PrimExpr, *y: E.PrimExpr) -> E.PrimExpr:
        c = rc if groups == 1 else (o // Og) * Cg + rc
        ok, qs, taps = None, [], []
        for d in range(nsp):
            r, q, cond = tap(d, y[d])
            ok = cond if ok is None else E.logical_and(ok, cond)
            qs.append(E.max_(E.min_(q, spatial[d] - 1), 0))
            taps.append(r)
        w = W[(c, o % Og if groups > 1 else o, *taps)]
        return te.sum(E.select(ok, X[(n, c, *qs)] * w, zero), axis=(rc, *rs))

    O = Og * groups
    out = te.compute(
        (N, O, *out_spatial),
        lambda *i: f(*i),
        name=name if bias is None else f"{name}_nb",
        tag="conv_transpose",
    )
    if bias is None:
        return out
    if static_shape(bias) != (O,):
        raise ArgumentError(
            f"conv_transpose: bias must have shape [{O}], got {list(static_shape(bias))}"
        )
    return te.compute(out.shape, lambda *i: out[i] + bias[i[1]], name=name, tag="broadcast")
