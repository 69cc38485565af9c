"""Converters for ONNX gather/scatter-like ops and ops whose result is a constant.

GatherElements, GatherND, ScatterElements/Scatter, ScatterND, OneHot, ReverseSequence,
CumSum and TopK map onto Ember ops with their axes normalized; ``ai.onnx.ml``
ArrayFeatureExtractor is a gather along the last axis. Size, Range,
ConstantOfShape, EyeLike and NonZero produce shapes that depend on data Ember needs
at compile time, so with constant (or static-shaped) inputs they become constants
here, and otherwise are rejected with the reason.
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType, check_size
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.ops_indexing import const_ints
from ember.frontend.onnx_import.ops_transform import _reshape, _static
from ember.frontend.onnx_import.registry import converter
from ember.frontend.ops.registry import normalize_axis


@converter("GatherElements", since=11)
def gather_elements(ctx: ConvertContext) -> list[str]:
    """ONNX GatherElements, with the axis normalized."""
    axis = normalize_axis(ctx.attr("axis", 0), ctx.type(0).ndim, "GatherElements axis")
    return ctx.emit("gather_elements", [ctx.input(0), ctx.input(1)], {"axis": axis})


@converter("GatherND", since=11)
def gather_nd(ctx: ConvertContext) -> list[str]:
    """ONNX GatherND; ``batch_dims`` exists from opset 12."""
    batch_dims = int(ctx.attr("batch_dims", 0)) if ctx.opset >= 12 else 0
    return ctx.emit("gather_nd", [ctx.input(0), ctx.input(1)], {"batch_dims": batch_dims})


@converter("ArrayFeatureExtractor", since=1, domain="ai.onnx.ml")
def array_feature_extractor(ctx: ConvertContext) -> list[str]:
    """``X[..., indices]`` with the indices flattened; a 1-D X gives one row (1, k), as
    onnxruntime and ONNX's reference shape it. Indices out of range are refused at run
    time by the gather's index check."""
    x, idx = ctx.type(0), ctx.type(1)
    if x.ndim < 1 or not idx.is_static or not idx.dtype.startswith("int"):
        raise ArgumentError(
            f"ArrayFeatureExtractor '{ctx.name}': needs X of rank 1 or more and static "
            f"integer indices, got {x} and {idx}"
        )
    data = ctx.input(0)
    if x.ndim == 1:
        data = ctx.emit1("reshape", [data], {"shape": (1, x.shape[0])})
    flat = ctx.emit1("reshape", [ctx.input(1)], {"shape": (idx.size,)})
    return ctx.emit("gather", [data, flat], {"axis": max(x.ndim, 2) - 1})


def _reduction(ctx: ConvertContext, since: dict[str, int]) -> str:
    reduction = ctx.attr("reduction", "none")
    if reduction != "none" and ctx.opset < since.get(reduction, 1 << 30):
        raise ArgumentError(f"{ctx.op_type} '{ctx.name}': unknown reduction {reduction!r}")
    return reduction


REDUCTION_SINCE = {"add": 16, "mul": 16, "max": 18, "min": 18}


@converter("ScatterElements", since=11)
def scatter_elements(ctx: ConvertContext) -> list[str]:
    """ONNX ScatterElements, with the reduction attribute where the opset has it."""
    axis = normalize_axis(ctx.attr("axis", 0), ctx.type(0).ndim, f"{ctx.op_type} axis")
    attrs = {"axis": axis, "reduction": _reduction(ctx, REDUCTION_SINCE)}
    return ctx.emit("scatter_elements", [ctx.input(0), ctx.input(1), ctx.input(2)], attrs)


@converter("Scatter", since=9, until=10)  # deprecated at 11 (ScatterElements' old name)
def scatter(ctx: ConvertContext) -> list[str]:
    """ONNX Scatter (opsets 9-10), the old name of ScatterElements."""
    return scatter_elements(ctx)


@converter("ScatterND", since=11)
def scatter_nd(ctx: ConvertContext) -> list[str]:
    """ONNX ScatterND; a single index tuple gets a leading axis so the op sees one shape."""
    idx, upd = ctx.input(1), ctx.input(2)
    if ctx.type(1).ndim == 1:  # a single index tuple: give it a leading axis of 1
        (idx,) = _reshape(ctx, idx, (1, *_static(ctx, 1)))
        (upd,) = _reshape(ctx, upd, (1, *_static(ctx, 2)))
    attrs = {"reduction": _reduction(ctx, REDUCTION_SINCE)}
    return ctx.emit("scatter_nd", [ctx.input(0), idx, upd], attrs)


@converter("OneHot", since=9)
def one_hot(ctx: ConvertContext) -> list[str]:
    """ONNX OneHot; the depth must be a constant, since it sets the output shape."""
    depth = float(np.asarray(ctx.constant(1)).reshape(-1)[0])
    if depth < 1:
        raise ArgumentError(f"OneHot '{ctx.name}': depth {depth} must be at least 1")
    ndim = ctx.type(0).ndim + 1
    axis = normalize_axis(ctx.attr("axis", -1), ndim, "OneHot axis")
    attrs = {"depth": int(depth), "axis": axis}
    return ctx.emit("one_hot", [ctx.input(0), ctx.input(2)], attrs)


@converter("ReverseSequence", since=10)
def reverse_sequence(ctx: ConvertContext) -> list[str]:
    """ONNX ReverseSequence; batch and time must be axes 0 and 1."""
    batch, time = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    if {batch, time} != {0, 1}:
        raise ArgumentError(
            f"ReverseSequence '{ctx.name}': batch_axis/time_axis must be 0 and 1, "
            f"got {batch} and {time}"
        )
    attrs = {"batch_axis": batch, "time_axis": time}
    return ctx.emit("reverse_sequence", [ctx.input(0), ctx.input(1)], attrs)


def _cumulative(ctx: ConvertContext, op: str) -> list[str]:
    axis = normalize_axis(const_ints(ctx, 1)[0], ctx.type(0).ndim, f"{ctx.op_type} axis")
    attrs = {
        "axis": axis,
        "exclusive": bool(ctx.attr("exclusive", 0)),
        "reverse": bool(ctx.attr("reverse", 0)),
    }
    return ctx.emit(op, [ctx.input(0)], attrs)


@converter("CumSum", since=11)
def cumsum(ctx: ConvertContext) -> list[str]:
    """ONNX CumSum; the axis must be a constant (or is compiled per value)."""
    return _cumulative(ctx, "cumsum")


@converter("CumProd", since=26)
def cumprod(ctx: ConvertContext) -> list[str]:
    """ONNX CumProd; the axis as CumSum's."""
    return _cumulative(ctx, "cumprod")


def _topk(ctx: ConvertContext, k: int, largest: bool) -> list[str]:
    axis = normalize_axis(ctx.attr("axis", -1), ctx.type(0).ndim, "TopK axis")
    return ctx.emit("topk", [ctx.input(0)], {"k": k, "axis": axis, "largest": largest})


@converter("TopK", since=1, until=9)
def topk_1(ctx: ConvertContext) -> list[str]:
    """ONNX TopK before opset 10: ``k`` is an attribute and the largest values are taken."""
    return _topk(ctx, int(ctx.attr("k")), True)


@converter("TopK", since=10)
def topk_10(ctx: ConvertContext) -> list[str]:
    """ONNX TopK from opset 10: ``k`` is a constant input; ``largest`` exists from opset 11."""
    largest = bool(ctx.attr("largest", 1)) if ctx.opset >= 11 else True
    return _topk(ctx, const_ints(ctx, 1)[0], largest)


# ---- ops whose result is a constant ------------------------------------------------------


def _nonempty(ctx: ConvertContext, shape: tuple[int, ...]) -> None:
    """Zero-size results are values like any other (the executor runs no kernel for them);
    a constant no machine can hold is refused before numpy is asked to make it."""
    check_size(TensorType(tuple(shape), "float64"), f"{ctx.op_type} '{ctx.name}': the result")


@converter("Size", since=1)
def size(ctx: ConvertContext) -> list[str]:
    """ONNX Size, folded to a constant from the static shape."""
    return [ctx.const(np.array(np.prod(_static(ctx, 0), dtype=np.int64), dtype=np.int64))]


@converter("ConstantOfShape", since=9)
def constant_of_shape(ctx: ConvertContext) -> list[str]:
    """ONNX ConstantOfShape, folded to a param; the shape must be a constant."""
    shape = const_ints(ctx, 0)
    _nonempty(ctx, shape)
    value = ctx.attr("value", None)
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return [ctx.const(np.full(shape, fill[0], dtype=fill.dtype))]


@converter("Range", since=11)
def range_(ctx: ConvertContext) -> list[str]:
    """ONNX Range, folded to a param; start, limit and delta must be constants. From opset
    27 float16 and bfloat16 ranges count and step in ``stash_type``'s type (an element type
    code: 1, float32, the default, or 11, float64), then round to the input type."""
    start, limit, delta = (np.asarray(ctx.constant(i)).reshape(()) for i in range(3))
    dtype = start.dtype
    if str(dtype) in ("float16", "bfloat16"):
        stash = {1: np.float32, 11: np.float64}.get(int(ctx.attr("stash_type", 1)))
        if stash is None:
            raise ArgumentError(
                f"Range '{ctx.name}': stash_type must be 1 (float) or 11 (double), got "
                f"{ctx.attr('stash_type')}"
            )
        start, limit, delta = (v.astype(stash) for v in (start, limit, delta))
    if delta == 0:
        raise ArgumentError(f"Range '{ctx.name}': delta is 0")
    count = max(int(np.ceil((limit - start) / delta)), 0)
    _nonempty(ctx, (count,))
    out = start + np.arange(count).astype(start.dtype) * delta
    return [ctx.const(out.astype(dtype))]


@converter("EyeLike", since=9)
def eye_like(ctx: ConvertContext) -> list[str]:
    """ONNX EyeLike, folded to a param of the input's static 2-D shape."""
    src = _static(ctx, 0)
    if len(src) != 2:
        raise ArgumentError(f"EyeLike '{ctx.name}': input must be 2-D, got {list(src)}")
    _nonempty(ctx, src)
    # optional dependency: onnx
    from onnx import helper

    dtype = ctx.type(0).dtype
    if ctx.has_attr("dtype"):
        dtype = str(helper.tensor_dtype_to_np_dtype(int(ctx.attr("dtype"))))
    return [ctx.const(np.eye(src[0], src[1], k=int(ctx.attr("k", 0)), dtype=dtype))]


@converter("NonZero", since=9)
def nonzero(ctx: ConvertContext) -> list[str]:
    """ONNX NonZero on a constant input only, folded at import: its output shape depends on the
    data."""
    # Its output shape depends on the data, so the input must be a constant.
    out = np.array(np.nonzero(ctx.constant(0)), dtype=np.int64)
    _nonempty(ctx, tuple(out.shape))
    return [ctx.const(out)]
