"""N-D grouped transposed convolution (ONNX ConvTranspose) over channel-first layouts.

The gradient of ``conv_nd`` with respect to its input, written as a gather so it is
one reduction stage: output position ``y`` takes input position ``q`` through tap
``r`` when ``y + pad_begin - r * dilation == q * stride``. Weights are
(C_in, C_out / groups, *kernel). The output size is given by the caller (the
ONNX converter works it out from ``output_shape``, ``output_padding`` and
``auto_pad``); positions no input reaches are zero (plus the bias). float16 and
bfloat16 accumulate in float32 and round once, as onnxruntime does (see
:func:`.conv.add_bias_and_round`). ONNX Col2Im is the same gather with one-hot
weights, so :func:`col2im` walks these taps too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.conv import add_bias_and_round
from ember.tir.topi.reduce import acc_dtype, widen
from ember.tir.topi.transform import static_shape


def conv_transpose_out_size(
    size: int, k: int, stride: int, dil: int, pad_lo: int, pad_hi: int, out_pad: int
) -> int:
    """Output extent of one dim of a transposed convolution (ONNX ``ConvTranspose`` without
    ``output_shape``)."""
    return stride * (size - 1) + out_pad + (k - 1) * dil + 1 - pad_lo - pad_hi


@dataclass(frozen=True)
class _Dim:
    """One spatial dim of a transposed convolution: which taps reach which inputs.

    With dilation 1 only every stride-th tap reaches an input; a "phased" dim walks
    just those (tap ``r = (y + pad) % s + s * j`` for step ``j``), cutting the
    reduction by the stride. Otherwise it walks every tap and tests divisibility.
    """

    size: int
    kernel: int
    stride: int
    dil: int
    pad: int

    @property
    def phased(self) -> bool:
        return self.stride > 1 and self.dil == 1 and self.pad >= 0

    @property
    def steps(self) -> int:
        return -(-self.kernel // self.stride) if self.phased else self.kernel

    def tap(self, y: E.PrimExpr, j: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr, E.PrimExpr]:
        """(kernel tap, clamped input position, validity) of step ``j`` at output ``y``."""
        s, t = self.stride, y + self.pad
        if self.phased:
            r, q = t % s + j * s, t // s - j
            ok = E.logical_and(r < self.kernel, E.logical_and(q >= 0, q < self.size))
            r = E.min_(r, self.kernel - 1)
        else:
            r, t = j, t - j * self.dil
            q = t // s if s > 1 else t
            ok = E.logical_and(t >= 0, q < self.size)
            if s > 1:
                ok = E.logical_and(ok, t % s == 0)
        return r, E.max_(E.min_(q, self.size - 1), 0), ok


def _check(xs: tuple[int, ...], ws: tuple[int, ...], groups: int, out: Sequence[int]) -> None:
    if len(xs) < 3 or len(ws) != len(xs):
        raise ArgumentError(
            f"conv_transpose: input {list(xs)} and weights {list(ws)} ranks do not fit"
        )
    if groups < 1 or xs[1] % groups or ws[0] != xs[1]:
        raise ArgumentError(
            f"conv_transpose: {xs[1]} input channels, weights {list(ws)} and group={groups} "
            "do not fit"
        )
    if len(out) != len(xs) - 2 or any(s <= 0 for s in out):
        raise ArgumentError(f"conv_transpose: output size {list(out)} is not valid")


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
    _check(xs, ws, groups, out_spatial)
    nsp = len(xs) - 2
    Og, Cg = ws[1], xs[1] // groups
    dims = [_Dim(xs[2 + d], ws[2 + d], strides[d], dilations[d], pads_begin[d]) for d in range(nsp)]
    rc = te.reduce_axis((0, Cg), name="rc")
    rs = [te.reduce_axis((0, dm.steps), name=f"r{d}") for d, dm in enumerate(dims)]
    acc = acc_dtype(X.dtype)
    zero = E.const(0, acc)

    def f(n: E.PrimExpr, o: E.PrimExpr, *y: E.PrimExpr) -> E.PrimExpr:
        c = rc if groups == 1 else (o // Og) * Cg + rc
        taps = [dm.tap(y[d], rs[d]) for d, dm in enumerate(dims)]
        ok = taps[0][2]
        for t in taps[1:]:
            ok = E.logical_and(ok, t[2])
        w = W[(c, o % Og if groups > 1 else o, *[t[0] for t in taps])]
        x = widen(X[(n, c, *[t[1] for t in taps])], acc)
        return te.sum(E.select(ok, x * widen(w, acc), zero), axis=(rc, *rs))

    O = Og * groups
    out = te.compute(
        (xs[0], O, *out_spatial),
        lambda *i: f(*i),
        name=name if bias is None and acc == X.dtype else f"{name}_nb",
        tag="conv_transpose",
    )
    if bias is not None and static_shape(bias) != (O,):
        raise ArgumentError(
            f"conv_transpose: bias must have shape [{O}], got {list(static_shape(bias))}"
        )
    return add_bias_and_round(out, bias, X.dtype, name)


def col2im(
    X: Tensor,
    image: Sequence[int],
    block: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
) -> Tensor:
    """ONNX Col2Im: columns (N, C * prod(block), prod(blocks)) summed back into images
    (N, C, *image). It is the transposed convolution above with one-hot weights (column
    row ``c * prod(block) + flat(r)`` feeds channel ``c`` through tap ``r`` alone), so it
    walks the same taps, without the weights or the sum over channels. ``pads`` are
    (begin..., end...)."""
    xs = static_shape(X)
    nsp = len(image)
    nblocks = [
        (image[d] + pads[d] + pads[nsp + d] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
        for d in range(nsp)
    ]
    taps = math.prod(block)
    if len(xs) != 3 or xs[1] % taps or xs[2] != math.prod(nblocks) or min(nblocks) < 1:
        raise ArgumentError(
            f"col2im: input {list(xs)} does not hold blocks {list(block)} of image "
            f"{list(image)} ({math.prod(nblocks)} block positions)"
        )
    dims = [_Dim(nblocks[d], block[d], strides[d], dilations[d], pads[d]) for d in range(nsp)]
    rs = [te.reduce_axis((0, dm.steps), name=f"r{d}") for d, dm in enumerate(dims)]
    acc = acc_dtype(X.dtype)

    def flat(index: Sequence[E.PrimExpr], shape: Sequence[int]) -> E.PrimExpr:
        out = index[0]
        for i, n in zip(index[1:], shape[1:]):
            out = out * n + i
        return out

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        n, c, y = i[0], i[1], i[2:]
        at = [dm.tap(y[d], rs[d].var) for d, dm in enumerate(dims)]
        ok = at[0][2]
        for t in at[1:]:
            ok = E.logical_and(ok, t[2])
        row = c * taps + flat([t[0] for t in at], block)
        x = widen(X[(n, row, flat([t[1] for t in at], nblocks))], acc)
        return te.sum(E.select(ok, x, E.const(0, acc)), axis=tuple(rs))

    out = te.compute((xs[0], xs[1] // taps, *image), f, name="col2im", tag="col2im")
    return add_bias_and_round(out, None, X.dtype, "col2im_round")
