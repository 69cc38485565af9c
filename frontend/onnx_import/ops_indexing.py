"""Converters for ONNX slicing and padding ops: Slice, Split, Pad, Tile, Expand,
DepthToSpace, SpaceToDepth, Compress, Trilu.

Each resolves ONNX's many argument forms (attributes that became inputs, negative and
out-of-range starts clamped as Python slices clamp, omitted axes) into the one
resolved form the Ember op takes; arguments that set a shape must be constants.

One exception: a Slice whose starts arrive at run time but whose ends are the starts
plus constants (a Loop body taking row ``i`` to ``i + 1`` of a tensor) has a static
shape, so it becomes a ``gather`` of the rows ``start + 0 .. start + size - 1`` along
each sliced axis. A start that ONNX would clamp (the slice would come out shorter) is
moved off the axis first, so the gather's index check refuses it at run time.
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError, UnsupportedOperatorError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.ops_transform import _reshape, _static
from ember.frontend.onnx_import.registry import converter
from ember.frontend.ops.registry import broadcast_shapes, normalize_axis


def const_ints(ctx: ConvertContext, i: int) -> tuple[int, ...]:
    """Constant input ``i`` as a tuple of Python ints."""
    return tuple(int(v) for v in np.asarray(ctx.constant(i)).reshape(-1))


def emit_slice(
    ctx: ConvertContext,
    value: str,
    src: tuple[int, ...],
    ranges: dict[int, tuple[int, int, int]],
) -> str:
    """Slice ``value`` with ``(start, end, step)`` per axis (Python slice semantics)."""
    begin, step, shape = [0] * len(src), [1] * len(src), list(src)
    for axis, (s, e, st) in ranges.items():
        if st == 0:
            raise ArgumentError(f"{ctx.op_type} '{ctx.name}': a slice step of 0 on axis {axis}")
        lo, _, _ = slice(s, e, st).indices(src[axis])
        begin[axis], step[axis] = lo, st
        shape[axis] = len(range(*slice(s, e, st).indices(src[axis])))
    if tuple(shape) == src and all(b == 0 for b in begin) and all(s == 1 for s in step):
        return value
    attrs = {"begin": tuple(begin), "step": tuple(step), "shape": tuple(shape)}
    return ctx.emit1("slice", [value], attrs)


def _slice(
    ctx: ConvertContext,
    starts: tuple[int, ...],
    ends: tuple[int, ...],
    axes: tuple[int, ...] | None,
    steps: tuple[int, ...] | None,
) -> list[str]:
    src = _static(ctx, 0)
    axes = tuple(range(len(starts))) if axes is None else axes
    steps = (1,) * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ArgumentError(
            f"Slice '{ctx.name}': starts {list(starts)}, ends {list(ends)}, axes {list(axes)} "
            f"and steps {list(steps)} differ in length"
        )
    ranges = {}
    for s, e, a, st in zip(starts, ends, axes, steps):
        axis = normalize_axis(a, len(src), "Slice axis")
        if axis in ranges:
            raise ArgumentError(f"Slice '{ctx.name}': axis {a} repeats")
        ranges[axis] = (s, e, st)
    return [emit_slice(ctx, ctx.input(0), src, ranges)]


@converter("Slice", since=1, until=9)
def slice_1(ctx: ConvertContext) -> list[str]:
    """ONNX Slice before opset 10: starts, ends and axes are attributes."""
    axes = ctx.attr("axes", None)
    return _slice(ctx, ctx.attr("starts"), ctx.attr("ends"), axes, None)


@converter("Slice", since=10)
def slice_10(ctx: ConvertContext) -> list[str]:
    """ONNX Slice from opset 10: starts, ends, axes and steps are constant inputs, or the
    starts arrive at run time and the ends are the starts plus constants."""
    axes = const_ints(ctx, 3) if ctx.has_input(3) else None
    steps = const_ints(ctx, 4) if ctx.has_input(4) else None
    if not ctx.is_constant(1) and all(s == 1 for s in steps or (1,)):
        sizes = _sizes_after_starts(ctx)
        if sizes is not None:
            return [_run_time_slice(ctx, sizes, axes)]
    return _slice(ctx, const_ints(ctx, 1), const_ints(ctx, 2), axes, steps)


def _plus_constant(ctx: ConvertContext, value: str) -> tuple[str, int]:
    """``value`` as ``base + c``: through reshapes, integer casts and additions of
    one-element constants back to the value they add to."""
    b = ctx.builder
    producers = {out: n for n in b.nodes for out in n.outputs}
    offset = 0
    while (node := producers.get(value)) is not None:
        ins = node.inputs
        consts = [b.params.get(i) for i in ins]
        if node.op == "reshape" or (node.op == "cast" and "int" in node.attrs["dtype"]):
            value = ins[0]
        elif node.op in ("add", "subtract") and consts[1] is not None and consts[1].size == 1:
            sign = 1 if node.op == "add" else -1
            value, offset = ins[0], offset + sign * int(consts[1].reshape(-1)[0])
        elif node.op == "add" and consts[0] is not None and consts[0].size == 1:
            value, offset = ins[1], offset + int(consts[0].reshape(-1)[0])
        else:
            break
    return value, offset


def _sizes_after_starts(ctx: ConvertContext) -> int | None:
    """The slice's static length, where every end is its start plus one constant that
    is positive; None otherwise."""
    start_base, start_offset = _plus_constant(ctx, ctx.input(1))
    end_base, end_offset = _plus_constant(ctx, ctx.input(2))
    if start_base != end_base or end_offset <= start_offset:
        return None
    return end_offset - start_offset


def _run_time_slice(ctx: ConvertContext, size: int, axes: tuple[int, ...] | None) -> str:
    """Gathers of ``size`` rows from each run-time start. A start that ONNX would clamp
    (past ``dim - size``, before ``-dim``, or negative with its end not) becomes ``dim``,
    which the gather's index check refuses."""
    src = _static(ctx, 0)
    starts = ctx.input(1)
    count = ctx.type(1).size
    axes = tuple(range(count)) if axes is None else axes
    axes = tuple(normalize_axis(a, len(src), "Slice axis") for a in axes)
    if len(axes) != count or len(set(axes)) != count or any(size > src[a] for a in axes):
        raise ArgumentError(
            f"Slice '{ctx.name}': {size} elements from run-time starts do not fit axes "
            f"{list(axes)} of {list(src)}"
        )

    def i64(values: object) -> str:
        return ctx.const(np.asarray(values, dtype=np.int64))

    if ctx.type(1).dtype != "int64":
        starts = ctx.emit1("cast", [starts], {"dtype": "int64"})
    starts = ctx.emit1("reshape", [starts], {"shape": (count,)})
    dims = i64([src[a] for a in axes])
    negative = ctx.emit1("less", [starts, i64(0)])
    fits_from_end = ctx.emit1(
        "logical_and",
        [
            ctx.emit1("less", [ctx.emit1("add", [starts, i64(size)]), i64(0)]),
            ctx.emit1("greater_equal", [ctx.emit1("add", [starts, dims]), i64(0)]),
        ],
    )
    from_end = ctx.emit1("where", [fits_from_end, ctx.emit1("add", [starts, dims]), dims])
    first = ctx.emit1("where", [negative, from_end, starts])  # in [0, dim - size], or dim
    out = ctx.input(0)
    for k, axis in enumerate(axes):
        row = emit_slice(ctx, first, (count,), {0: (k, k + 1, 1)})
        rows = ctx.emit1("add", [row, i64(np.arange(size))])
        out = ctx.emit1("gather", [out, rows], {"axis": axis})
    return out


def _split(ctx: ConvertContext, sizes: tuple[int, ...] | None) -> list[str]:
    src = _static(ctx, 0)
    axis = normalize_axis(ctx.attr("axis", 0), len(src), "Split axis")
    n = src[axis]
    if sizes is None:
        parts = ctx.num_outputs
        if ctx.opset >= 18 and ctx.has_attr("num_outputs"):
            parts = int(ctx.attr("num_outputs"))
            chunk = -(-n // parts)
            sizes = tuple(min(chunk, max(n - k * chunk, 0)) for k in range(parts))
        elif n % parts:
            raise ArgumentError(f"Split '{ctx.name}': {n} does not split into {parts} equal parts")
        else:
            sizes = (n // parts,) * parts
    if sum(sizes) != n or len(sizes) != ctx.num_outputs or any(s < 0 for s in sizes):
        raise ArgumentError(
            f"Split '{ctx.name}': sizes {list(sizes)} do not split {n} into "
            f"{ctx.num_outputs} outputs"
        )
    outs, at = [], 0
    for s in sizes:
        outs.append(emit_slice(ctx, ctx.input(0), src, {axis: (at, at + s, 1)}))
        at += s
    return outs


@converter("Split", since=1, until=12)
def split_1(ctx: ConvertContext) -> list[str]:
    """ONNX Split before opset 13: sizes from the ``split`` attribute (or an input, if given)."""
    if ctx.has_input(1):
        return _split(ctx, const_ints(ctx, 1))
    split = ctx.attr("split", None)
    return _split(ctx, tuple(split) if split else None)


@converter("Split", since=13)
def split_13(ctx: ConvertContext) -> list[str]:
    """ONNX Split from opset 13: sizes from input 1, or an even split (``num_outputs`` from 18)."""
    if ctx.has_input(1) and ctx.has_attr("num_outputs"):
        raise ArgumentError(f"Split '{ctx.name}': give either the split input or num_outputs")
    return _split(ctx, const_ints(ctx, 1) if ctx.has_input(1) else None)


PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad(ctx: ConvertContext, pads: tuple[int, ...], value: float | int) -> list[str]:
    mode = ctx.attr("mode", "constant")
    if mode not in PAD_MODES or (mode == "wrap" and ctx.opset < 19):
        raise ArgumentError(f"Pad '{ctx.name}': unknown mode {mode!r}")
    src = _static(ctx, 0)
    if len(pads) != 2 * len(src):
        raise ArgumentError(f"Pad '{ctx.name}': pads {list(pads)} need {2 * len(src)} entries")
    if not any(pads):
        return [ctx.input(0)]
    dtype = ctx.type(0).dtype
    value = bool(value) if dtype == "bool" else float(value) if "float" in dtype else int(value)
    attrs = {"pads": pads, "mode": mode, "value": value}
    return ctx.emit("pad", [ctx.input(0)], attrs)


@converter("Pad", since=1, until=1)
def pad_1(ctx: ConvertContext) -> list[str]:
    """ONNX Pad opset 1: the pads attribute was called ``paddings``."""
    return _pad(ctx, tuple(ctx.attr("paddings")), ctx.attr("value", 0.0))


@converter("Pad", since=2, until=10)
def pad_2(ctx: ConvertContext) -> list[str]:
    """ONNX Pad opsets 2-10: pads and value are attributes."""
    return _pad(ctx, tuple(ctx.attr("pads")), ctx.attr("value", 0.0))


@converter("Pad", since=11)
def pad_11(ctx: ConvertContext) -> list[str]:
    """ONNX Pad from opset 11: pads, value and (from 18) axes are constant inputs."""
    pads = const_ints(ctx, 1)
    value = ctx.constant(2).reshape(-1)[0].item() if ctx.has_input(2) else 0
    if ctx.opset >= 18 and ctx.has_input(3):
        ndim = ctx.type(0).ndim
        axes = [normalize_axis(a, ndim, "Pad axis") for a in const_ints(ctx, 3)]
        if len(pads) != 2 * len(axes):
            raise ArgumentError(f"Pad '{ctx.name}': pads {list(pads)} do not fit axes {axes}")
        full = [0] * (2 * ndim)
        for k, a in enumerate(axes):
            full[a], full[ndim + a] = pads[k], pads[len(axes) + k]
        pads = tuple(full)
    return _pad(ctx, pads, value)


@converter("Tile", since=6)
def tile(ctx: ConvertContext) -> list[str]:
    """ONNX Tile; a tile by all ones is no node."""
    reps = const_ints(ctx, 1)
    if all(r == 1 for r in reps) and len(reps) == ctx.type(0).ndim:
        return [ctx.input(0)]
    return ctx.emit("tile", [ctx.input(0)], {"repeats": reps})


@converter("Expand", since=8)
def expand(ctx: ConvertContext) -> list[str]:
    """ONNX Expand, which broadcasts both ways; an expand to the same shape is no node."""
    src = _static(ctx, 0)
    shape = broadcast_shapes(src, const_ints(ctx, 1))  # ONNX Expand broadcasts both ways
    if shape == src:
        return [ctx.input(0)]
    return ctx.emit("expand", [ctx.input(0)], {"shape": tuple(int(d) for d in shape)})


def _blocks(ctx: ConvertContext) -> tuple[int, tuple[int, int, int, int]]:
    src = _static(ctx, 0)
    bs = int(ctx.attr("blocksize"))
    if len(src) != 4 or bs < 1:
        raise ArgumentError(f"{ctx.op_type} '{ctx.name}': needs a 4-D input and blocksize >= 1")
    return bs, src  # type: ignore[return-value]


def _permute(ctx: ConvertContext, shape: tuple[int, ...], perm: tuple[int, ...]) -> str:
    (x,) = _reshape(ctx, ctx.input(0), shape)
    return ctx.emit1("transpose", [x], {"perm": perm})


@converter("DepthToSpace", since=1)
def depth_to_space(ctx: ConvertContext) -> list[str]:
    """ONNX DepthToSpace as a reshape-transpose-reshape, in DCR or CRD order."""
    bs, (b, c, h, w) = _blocks(ctx)
    if c % (bs * bs):
        raise ArgumentError(f"DepthToSpace '{ctx.name}': {c} channels do not divide by {bs}^2")
    c2 = c // (bs * bs)
    if ctx.attr("mode", "DCR") == "CRD":
        x = _permute(ctx, (b, c2, bs, bs, h, w), (0, 1, 4, 2, 5, 3))
    else:
        x = _permute(ctx, (b, bs, bs, c2, h, w), (0, 3, 4, 1, 5, 2))
    return _reshape(ctx, x, (b, c2, h * bs, w * bs))


@converter("SpaceToDepth", since=1)
def space_to_depth(ctx: ConvertContext) -> list[str]:
    """ONNX SpaceToDepth as a reshape-transpose-reshape."""
    bs, (b, c, h, w) = _blocks(ctx)
    if h % bs or w % bs:
        raise ArgumentError(f"SpaceToDepth '{ctx.name}': {h}x{w} does not divide by {bs}")
    x = _permute(ctx, (b, c, h // bs, bs, w // bs, bs), (0, 3, 5, 1, 2, 4))
    return _reshape(ctx, x, (b, c * bs * bs, h // bs, w // bs))


@converter("Compress", since=9)
def compress(ctx: ConvertContext) -> list[str]:
    """ONNX Compress; the condition must be a constant, since it sets the output shape."""
    src = _static(ctx, 0)
    cond = np.asarray(ctx.constant(1)).reshape(-1).astype(bool)
    value = ctx.input(0)
    if ctx.has_attr("axis"):
        axis = normalize_axis(ctx.attr("axis"), len(src), "Compress axis")
    else:
        axis, src = 0, (int(np.prod(src, dtype=np.int64)),)
        (value,) = _reshape(ctx, value, src)
    if len(cond) > src[axis]:
        raise ArgumentError(f"Compress '{ctx.name}': condition is longer than axis {axis}")
    keep = np.nonzero(cond)[0].astype(np.int64)
    if keep.size == 0:
        raise UnsupportedOperatorError(
            f"Compress '{ctx.name}': an all-false condition gives a zero-size tensor"
        )
    return ctx.emit("gather", [value, ctx.const(keep)], {"axis": axis})


@converter("Trilu", since=14)
def trilu(ctx: ConvertContext) -> list[str]:
    """ONNX Trilu; ``k`` must be a constant."""
    k = const_ints(ctx, 1)[0] if ctx.has_input(1) else 0
    return ctx.emit("trilu", [ctx.input(0)], {"k": k, "upper": bool(ctx.attr("upper", 1))})
