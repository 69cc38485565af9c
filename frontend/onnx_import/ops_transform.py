"""Converters for shape and data-movement ONNX ops.

Reshape, Flatten, Squeeze and Unsqueeze all become Ember's ``reshape`` with a
resolved static shape; Shape becomes a constant (the compiler needs static shapes,
so the shape subgraphs it feeds fold away at import).
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.graph import SHAPES_HINT
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.frontend.ops.registry import normalize_axis


def _static(ctx: ConvertContext, i: int) -> tuple[int, ...]:
    t = ctx.type(i)
    if not t.is_static:
        raise ArgumentError(
            f"{ctx.op_type}: input {i} has symbolic shape {t}; fix the input shapes " + SHAPES_HINT
        )
    return tuple(int(d) for d in t.shape)


def _reshape(ctx: ConvertContext, value: str, shape: tuple[int, ...]) -> list[str]:
    if ctx.type_of(value).shape == shape:
        return [value]
    return ctx.emit("reshape", [value], {"shape": tuple(int(d) for d in shape)})


def resolve_shape(src: tuple[int, ...], spec: np.ndarray, allowzero: bool) -> tuple[int, ...]:
    """ONNX Reshape's target: 0 copies the input dim (unless ``allowzero``), -1 is inferred."""
    dims = [int(d) for d in spec.reshape(-1)]
    if dims.count(-1) > 1:
        raise ArgumentError(f"Reshape: shape {dims} has more than one -1")
    out = []
    for k, d in enumerate(dims):
        if d == 0 and not allowzero:
            if k >= len(src):
                raise ArgumentError(f"Reshape: shape {dims} copies dim {k} of a {len(src)}-D input")
            d = src[k]
        out.append(d)
    total = int(np.prod(src, dtype=np.int64))
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise ArgumentError(f"Reshape: cannot reshape {list(src)} into {dims}")
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total or any(d < 0 for d in out):
        raise ArgumentError(f"Reshape: cannot reshape {list(src)} into {dims}")
    return tuple(out)


@converter("Reshape", since=5)
def reshape(ctx: ConvertContext) -> list[str]:
    """ONNX Reshape; the shape must be a constant (0 copies a dim unless ``allowzero``)."""
    src = _static(ctx, 0)
    shape = resolve_shape(src, ctx.constant(1), bool(ctx.attr("allowzero", 0)))
    return _reshape(ctx, ctx.input(0), shape)


@converter("Flatten", since=1)
def flatten(ctx: ConvertContext) -> list[str]:
    """ONNX Flatten, as a reshape to 2-D around ``axis``."""
    src = _static(ctx, 0)
    axis = ctx.attr("axis", 1)
    axis = axis + len(src) if axis < 0 else axis
    if not 0 <= axis <= len(src):
        raise ArgumentError(
            f"Flatten: axis {ctx.attr('axis', 1)} is out of range for {len(src)}-D input"
        )
    rows = int(np.prod(src[:axis], dtype=np.int64))
    return _reshape(ctx, ctx.input(0), (rows, int(np.prod(src[axis:], dtype=np.int64))))


def _squeeze(ctx: ConvertContext, axes: tuple[int, ...] | None) -> list[str]:
    src = _static(ctx, 0)
    if axes is None:
        keep = [d for d in src if d != 1]
    else:
        drop = {normalize_axis(a, len(src), "Squeeze axis") for a in axes}
        for a in drop:
            if src[a] != 1:
                raise ArgumentError(f"Squeeze: axis {a} has size {src[a]}, not 1")
        keep = [d for k, d in enumerate(src) if k not in drop]
    return _reshape(ctx, ctx.input(0), tuple(keep))


def _unsqueeze(ctx: ConvertContext, axes: tuple[int, ...]) -> list[str]:
    src = _static(ctx, 0)
    n = len(src) + len(axes)
    where = sorted(normalize_axis(a, n, "Unsqueeze axis") for a in axes)
    if len(set(where)) != len(where):
        raise ArgumentError(f"Unsqueeze: axes {list(axes)} repeat")
    it = iter(src)
    return _reshape(ctx, ctx.input(0), tuple(1 if k in where else next(it) for k in range(n)))


@converter("Squeeze", since=1, until=12)
def squeeze_1(ctx: ConvertContext) -> list[str]:
    """ONNX Squeeze before opset 13: the axes are an attribute."""
    axes = ctx.attr("axes", None)
    return _squeeze(ctx, tuple(axes) if axes is not None else None)


@converter("Squeeze", since=13)
def squeeze_13(ctx: ConvertContext) -> list[str]:
    """ONNX Squeeze from opset 13: the axes are a constant input."""
    axes = tuple(int(a) for a in ctx.constant(1).reshape(-1)) if ctx.has_input(1) else None
    return _squeeze(ctx, axes)


@converter("Unsqueeze", since=1, until=12)
def unsqueeze_1(ctx: ConvertContext) -> list[str]:
    """ONNX Unsqueeze before opset 13: the axes are an attribute."""
    return _unsqueeze(ctx, tuple(ctx.attr("axes")))


@converter("Unsqueeze", since=13)
def unsqueeze_13(ctx: ConvertContext) -> list[str]:
    """ONNX Unsqueeze from opset 13: the axes are a constant input."""
    return _unsqueeze(ctx, tuple(int(a) for a in ctx.constant(1).reshape(-1)))


@converter("Transpose", since=1)
def transpose(ctx: ConvertContext) -> list[str]:
    """ONNX Transpose (reversed axes by default); the identity permutation is no node."""
    ndim = ctx.type(0).ndim
    perm = tuple(ctx.attr("perm", tuple(reversed(range(ndim)))))
    if perm == tuple(range(ndim)):
        return [ctx.input(0)]
    return ctx.emit("transpose", [ctx.input(0)], {"perm": tuple(int(p) for p in perm)})


@converter("Shape", since=1)
def shape(ctx: ConvertContext) -> list[str]:
    """ONNX Shape, folded to a constant from the static shape (start and end from opset 15)."""
    src = _static(ctx, 0)
    start, end = 0, len(src)
    if ctx.opset >= 15:
        start = ctx.attr("start", 0)
        end = ctx.attr("end", len(src))
    return [ctx.const(np.array(src, dtype=np.int64)[slice(start, end)])]


@converter("Gather", since=1)
def gather(ctx: ConvertContext) -> list[str]:
    """ONNX Gather, with the axis normalized."""
    axis = normalize_axis(ctx.attr("axis", 0), ctx.type(0).ndim, "Gather axis")
    return ctx.emit("gather", [ctx.input(0), ctx.input(1)], {"axis": axis})


@converter("Concat", since=1)
def concat(ctx: ConvertContext) -> list[str]:
    """ONNX Concat; the axis is required from opset 4."""
    ndim = ctx.type(0).ndim
    axis = normalize_axis(
        ctx.attr("axis", 1) if ctx.opset < 4 else ctx.attr("axis"), ndim, "Concat axis"
    )
    values = ctx.inputs()
    # empty pieces add nothing (and a kernel cannot take a tensor without elements)
    nonempty = [v for v in values if not (ctx.type_of(v).is_static and ctx.type_of(v).size == 0)]
    values = nonempty or values[:1]
    if len(values) == 1:
        return values
    return ctx.emit("concat", values, {"axis": axis})
