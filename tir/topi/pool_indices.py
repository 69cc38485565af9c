"""Max pooling with ONNX's Indices output, and its inverse MaxUnpool.

``max_pool_with_indices`` gives the pooled maxima and, for each, the int64 flat
index of the element that held it in the whole input (``(n * C + c) * H * W +
h * W + w``; with ``storage_order=1`` the spatial part is column-major,
``w * H + h``). Ties go to the first tap in row-major window order. MaxUnpool
writes each pooled value back at its index (flat in the shape the pooling implies,
zero-extended to ``output_shape``) and zeros elsewhere; written as a
gather, output position ``p`` looks at the pooled positions whose windows cover
it and takes the value whose index is ``p``; so each index must lie inside its own
window, as MaxPool's do (an arbitrary scatter is not supported).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi import nan_order
from ember.tir.topi.pool import Window, padded_read, pool_nd
from ember.tir.topi.transform import static_shape


def _flat(lead: Sequence[E.PrimExpr], pos: Sequence[E.PrimExpr], xs: Sequence[int]) -> E.PrimExpr:
    """Row-major flat int64 index of (*lead, *pos) in a tensor of shape ``xs``."""
    flat: E.PrimExpr = E.const(0, "int64")
    for v, n in zip((*lead, *pos), xs):
        flat = flat * n + E.cast("int64", v)
    return flat


def max_pool_with_indices(
    X: Tensor,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    ceil_mode: bool = False,
    storage_order: int = 0,
    name: str = "maxpool",
) -> list[Tensor]:
    """``[values, indices]`` of max pooling (see the module docstring)."""
    xs = static_shape(X)
    nsp = len(xs) - 2
    values = pool_nd(X, "max", kernel, strides, pads, dilations, ceil_mode, name=name)
    w = Window(
        tuple(kernel),
        tuple(strides),
        tuple(dilations),
        tuple(pads[:nsp]),
        tuple(pads[nsp:]),
        xs[2:],
    )
    rs = [te.reduce_axis((0, kernel[d]), name=f"r{d}") for d in range(nsp)]
    big = E.const(1 << 62, "int64")

    def first(*i: E.PrimExpr) -> E.PrimExpr:
        taps = w.taps(i[2:], rs)
        inside = None
        for p, n in zip(taps, xs[2:]):
            ok = E.logical_and(p >= 0, p < n)
            inside = ok if inside is None else E.logical_and(inside, ok)
        tap = padded_read(X, i[:2], taps, values[i])
        hit = E.logical_and(inside, nan_order.same_value(tap, values[i]))  # NaN finds NaN
        return te.min(E.select(hit, _flat(i[:2], taps, xs), big), axis=tuple(rs))

    rowmajor = te.compute(values.shape, first, name=f"{name}_argmax")
    if storage_order == 0 or nsp == 1:
        return [values, rowmajor]
    return [values, _column_major(rowmajor, xs[2:], f"{name}_indices")]


def _column_major(flat_idx: Tensor, spatial: Sequence[int], name: str) -> Tensor:
    """Row-major flat indices re-expressed with the spatial part column-major."""
    plane = 1
    for n in spatial:
        plane *= n

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        flat = flat_idx[i]
        out, rest = flat - flat % plane, flat % plane
        for d in reversed(range(len(spatial))):  # peel row-major digits, place column-major
            lower = 1
            for n in spatial[:d]:
                lower *= n
            out = out + (rest % spatial[d]) * lower
            rest = rest // spatial[d]
        return out

    return te.compute(flat_idx.shape, f, name=name)


def max_unpool(
    X: Tensor,
    indices: Tensor,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    out_spatial: Sequence[int],
    name: str = "maxunpool",
) -> Tensor:
    """Scatter ``X`` to the flat ``indices`` of an (N, C, *out_spatial) zero tensor."""
    xs, ins = static_shape(X), static_shape(indices)
    nsp = len(xs) - 2
    if ins != xs or len(kernel) != nsp or len(out_spatial) != nsp:
        raise ArgumentError(f"max_unpool: X {list(xs)} and indices {list(ins)} do not fit")
    out_shape = (*xs[:2], *out_spatial)
    # indices address the unpooled shape the pooling implies; a larger output_shape
    # pads it with zeros at the end (as onnx's reference does)
    full = [(xs[2 + d] - 1) * strides[d] + kernel[d] - pads[d] - pads[nsp + d] for d in range(nsp)]
    if any(o < f for o, f in zip(out_spatial, full)):
        raise ArgumentError(f"max_unpool: output size {list(out_spatial)} is below {full}")
    rs = [te.reduce_axis((0, -(-kernel[d] // strides[d])), name=f"r{d}") for d in range(nsp)]
    zero = E.const(0, X.dtype)

    def gather(*i: E.PrimExpr) -> E.PrimExpr:
        # pooled positions q whose window [q*s - pad, q*s - pad + k) covers p: q = q0 - r
        qs, ok = [], None
        for d in range(nsp):
            q = (i[2 + d] + pads[d]) // strides[d] - rs[d]
            start = q * strides[d] - pads[d]
            cond = E.logical_and(E.logical_and(q >= 0, q < xs[2 + d]), i[2 + d] < start + kernel[d])
            ok = cond if ok is None else E.logical_and(ok, cond)
            qs.append(E.max_(E.min_(q, xs[2 + d] - 1), 0))
        at = (*i[:2], *qs)
        for d in range(nsp):
            ok = E.logical_and(ok, i[2 + d] < full[d])
        hit = E.logical_and(ok, indices[at] == _flat(i[:2], i[2:], (*xs[:2], *full)))
        return te.max(E.select(hit, X[at], te.min_value(X.dtype)), axis=tuple(rs))

    found = te.compute(out_shape, gather, name=f"{name}_gather")
    low = te.min_value(X.dtype)
    return te.compute(
        out_shape, lambda *i: E.select(found[i] == low, zero, found[i]), name=name, tag="unpool"
    )
