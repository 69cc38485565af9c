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
    rs = [te.reduce_axis((0, kernel[d]), name=f"r{d}") for d in range(nsp)]
    zero = E.const(0, X.dtype)

    def f(n: E.PrimExpr, o: E.PrimExpr, *y: E.PrimExpr) -> E.PrimExpr:
        c = rc if groups == 1 else (o // Og) * Cg + rc
        ok = None
        qs = []
        for d in range(nsp):
            t = y[d] + pads_begin[d] - rs[d] * dilations[d]
            q = t // strides[d] if strides[d] > 1 else t
            cond = E.logical_and(t >= 0, q < spatial[d])
            if strides[d] > 1:
                cond = E.logical_and(cond, t % strides[d] == 0)
            ok = cond if ok is None else E.logical_and(ok, cond)
            qs.append(E.max_(E.min_(q, spatial[d] - 1), 0))
        w = W[(c, o % Og if groups > 1 else o, *rs)]
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
