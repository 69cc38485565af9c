"""Building tensor expressions: ``placeholder``, ``compute``, reducers and math functions.

These are the functions users call through ``ember.te``. ``compute`` calls the
user's lambda once with fresh axis variables and keeps the expression it
returns; a reduction must be the whole body (``te.sum(A[i, k] * B[k, j], axis=k)``),
as in TVM, so that lowering knows where the initial value goes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, cast

from ember.errors import ArgumentError, ScheduleError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.functor import post_order_visit
from ember.tir.te.multi_output import check_bodies, tuple_reduce
from ember.tir.te.tensor import (
    ComputeOp,
    IterKind,
    IterVar,
    PlaceholderOp,
    Tensor,
    reduce_axes_of,
)

ShapeLike = Sequence[E.ExprLike]


def as_index(value: E.ExprLike, what: str) -> E.PrimExpr:
    """``value`` as an integer expression; an integral float (``1024 / 16`` in Python 3) is
    taken as that integer, as TVM does, and any other float is an ``ArgumentError``."""
    if isinstance(value, float) or (
        isinstance(value, E.FloatImm) and dt.lanes_of(value.dtype) == 1
    ):
        number = value if isinstance(value, float) else value.value
        if not float(number).is_integer():
            raise ArgumentError(f"{what} must be an integer, got the float {number!r}")
        return E.const(int(number), "int32")
    if hasattr(value, "dtype") and hasattr(value, "item") and not isinstance(value, E.PrimExpr):
        return as_index(value.item(), what)  # a numpy scalar
    out = E.convert(value)
    if not dt.is_int(out.dtype):
        raise ArgumentError(f"{what} must be an integer, got {out!r}")
    return out


def _shape(shape: ShapeLike | E.ExprLike, what: str) -> tuple[E.PrimExpr, ...]:
    dims: Sequence[E.ExprLike] = shape if isinstance(shape, (tuple, list)) else (shape,)
    out = []
    for d in dims:
        s = as_index(d, f"shape of {what}")
        if isinstance(s, E.IntImm) and s.value <= 0:
            raise ArgumentError(f"shape of {what} must be positive, got {s.value}")
        out.append(s)
    return tuple(out)


def var(name: str = "v", dtype: str = "int32") -> E.Var:
    """A symbolic scalar, e.g. a shape size or a split factor passed as an argument."""
    return E.Var(name, dt.check_dtype(dtype))


def size_var(name: str = "size", dtype: str = "int32") -> E.SizeVar:
    """A symbolic size: like :func:`var`, and known to be ``>= 0``."""
    return E.SizeVar(name, dt.check_dtype(dtype))


def placeholder(
    shape: ShapeLike | E.ExprLike, dtype: str = "float32", name: str = "placeholder"
) -> Tensor:
    """An input tensor."""
    return PlaceholderOp(
        name, _shape(shape, f"placeholder '{name}'"), dt.check_dtype(dtype)
    ).output(0)


def _as_range(dom: Any) -> E.Range:
    if isinstance(dom, E.Range):
        return dom
    if isinstance(dom, (tuple, list)) and len(dom) == 2:
        lo, hi = as_index(dom[0], "range start"), as_index(dom[1], "range end")
        # as TVM's Range(begin, end): a zero start keeps ``end`` itself as the extent, so
        # ``reduce_axis((0, n)).dom.extent`` is ``n`` (not ``n - 0``)
        if isinstance(lo, E.IntImm) and lo.value == 0:
            return E.Range(E.const(0, hi.dtype), hi)
        return E.Range(lo, hi - lo)
    return E.Range.from_extent(as_index(dom, "range extent"))


def reduce_axis(dom: Any, name: str = "rv") -> IterVar:
    """A reduction axis over ``dom``: ``(lo, hi)`` or an extent."""
    return IterVar(E.Var(name), _as_range(dom), IterKind.REDUCE)


def thread_axis(tag: Any = None, dom: Any = None, name: str | None = None) -> IterVar:
    """A GPU thread axis such as ``"threadIdx.x"`` for ``bind``.

    Takes Ember's ``thread_axis("threadIdx.x", (0, 32))`` and TVM's range-first
    ``thread_axis((0, 32), "threadIdx.x")`` alike: whichever argument is a string is the tag.
    """
    if not isinstance(tag, str) and isinstance(dom, str):
        tag, dom = dom, tag
    valid = {f"{p}.{a}" for p in ("blockIdx", "threadIdx") for a in "xyz"} | {"vthread"}
    if tag not in valid:
        # a schedule-level mistake (the tag names where a loop runs), reported as such
        raise ScheduleError(f"unknown thread tag {tag!r}; expected one of {sorted(valid)}")
    return IterVar(
        E.Var(name or tag), _as_range(dom) if dom is not None else None, IterKind.THREAD, tag
    )


def compute(
    shape: ShapeLike | E.ExprLike,
    fcompute: Callable[..., E.ExprLike | Sequence[E.ExprLike]],
    name: str = "compute",
    tag: str = "",
    attrs: dict[str, Any] | None = None,
) -> Any:
    """A tensor whose element at ``idx`` is ``fcompute(*idx)``.

    As in TVM, a lambda that returns a tuple (or list) of expressions makes one
    operation with that many outputs, returned as a list of tensors (``op.output(k)``):
    one loop nest computes them all, and the schedule has one stage for them. Such a
    tuple holds either no reduction or the values of one tuple reduction (an argmax's
    ``argmax((idx, val), axis=k)``).
    """
    shp = _shape(shape, f"compute '{name}'")
    params = list(inspect.signature(fcompute).parameters.values())
    if len(params) == 1 and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        names = [f"ax{i}" for i in range(len(shp))]
    else:
        names = [p.name for p in params]
    if len(names) != len(shp):
        raise ArgumentError(
            f"compute '{name}': the lambda takes {len(names)} indices but the shape has "
            f"{len(shp)} dimensions"
        )
    axis = tuple(IterVar(E.Var(n), E.Range.from_extent(s)) for n, s in zip(names, shp))
    result = fcompute(*[iv.var for iv in axis])
    many = isinstance(result, (tuple, list))
    values: list[E.ExprLike] = (
        list(result) if isinstance(result, (tuple, list)) else [cast(E.ExprLike, result)]
    )
    bodies = [E.convert(b) for b in values]
    if not bodies:
        raise ArgumentError(f"compute '{name}': the lambda returned an empty tuple")
    reduce_axes: tuple[IterVar, ...] = ()
    if isinstance(bodies[0], E.Reduce):
        reduce_axes = tuple(bodies[0].axis)
    for body in bodies:
        _check_no_nested_reduce(body, name)
    if len(bodies) > 1:
        check_bodies(bodies, name)
    op = ComputeOp(
        name, axis, reduce_axes, bodies[0], tag, tuple((attrs or {}).items()), tuple(bodies[1:])
    )
    if many:
        return [op.output(k) for k in range(op.num_outputs)]
    return op.output(0)


def _check_no_nested_reduce(body: E.PrimExpr, name: str) -> None:
    def visit(node: Any) -> None:
        if isinstance(node, E.Reduce) and node is not body:
            raise ArgumentError(
                f"compute '{name}': a reduction must be the whole body of a compute; "
                "put the surrounding arithmetic in a separate compute"
            )

    post_order_visit(body, visit, once=True)


# -- reducers ------------------------------------------------------------------------------


def comm_reducer(
    fcombine: Callable[[E.PrimExpr, E.PrimExpr], E.ExprLike],
    fidentity: Callable[[str], E.ExprLike],
    name: str = "reduce",
) -> Callable[..., E.PrimExpr]:
    """A custom commutative reducer: ``fcombine(x, y)`` with identity ``fidentity(dtype)``.

    Called with a tuple of expressions (TVM's argmax: ``reducer((idx, val), axis=k)``)
    it reduces tuples: ``fcombine`` then takes two tuples of variables and returns a
    tuple, ``fidentity(*dtypes)`` returns one identity per value, and the call returns
    one reduction per value for a multi-output ``te.compute`` (see :mod:`.multi_output`).

    Returns ``reducer(expr, axis, where=None, init=None)`` like ``te.sum``: a reduction
    of ``expr`` over ``axis`` counting only the points where ``where`` holds, starting
    from ``init`` (an expression of the output's indices) instead of the identity.
    As in TVM, called with expressions instead of an axis (``te.max(a, b)``,
    ``te.sum(a, b, c)``) it combines them directly.
    """

    def reducer(
        expr: E.ExprLike,
        axis: Any = None,
        where: E.ExprLike | None = None,
        init: E.ExprLike | None = None,
        *more: E.ExprLike,
    ) -> Any:
        if axis is None:
            raise ArgumentError(
                f"{name}: give the reduction axis (te.{name}(expr, axis=k)) or several "
                f"expressions to combine (te.{name}(a, b)); got only {expr!r}"
            )
        if isinstance(expr, (tuple, list)):
            return tuple_reduce(name, fcombine, fidentity, expr, axis, where, init)
        if not isinstance(axis, (IterVar, list, tuple)):
            values = [v for v in (expr, axis, where, init, *more) if v is not None]
            return functools.reduce(lambda x, y: E.convert(fcombine(*E._promote(x, y))), values)
        if more:
            raise ArgumentError(f"{name}: unexpected arguments after init: {more!r}")
        src = E.convert(expr)
        axes = reduce_axes_of(name, axis)
        lhs, rhs = E.Var("x", src.dtype), E.Var("y", src.dtype)
        result = E.convert(fcombine(lhs, rhs))
        identity = E.convert(fidentity(src.dtype), src.dtype)
        combiner = E.CommReducer(name, lhs, rhs, result, identity)
        cond = None if where is None else E._as_bool(where)
        start = None if init is None else E.cast(src.dtype, init)
        return E.Reduce(src.dtype, combiner, src, axes, cond, start)

    reducer.__name__ = name
    return reducer


def min_value(dtype: str) -> E.PrimExpr:
    """The smallest value of ``dtype`` (-inf for floats): the identity of a max reduction."""
    if dt.is_float(dtype):
        return E.const(float("-inf"), dtype)
    if dt.is_bool(dtype):
        return E.const(False, dtype)
    return E.const(dt.int_range(dtype)[0], dtype)  # int4: -8, not int8's -128


def max_value(dtype: str) -> E.PrimExpr:
    """The largest value of ``dtype`` (+inf for floats): the identity of a min reduction."""
    if dt.is_float(dtype):
        return E.const(float("inf"), dtype)
    if dt.is_bool(dtype):
        return E.const(True, dtype)
    return E.const(dt.int_range(dtype)[1], dtype)


sum = comm_reducer(lambda x, y: x + y, lambda t: E.const(0, t), name="sum")  # noqa: A001
max = comm_reducer(E.max_, min_value, name="max")  # noqa: A001
min = comm_reducer(E.min_, max_value, name="min")  # noqa: A001


# The element-wise math, bit and logic functions (exp, if_then_else, bitwise_and, ...) are
# ember.tir.op's; ember.te re-exports them, as tvm.te does tvm.tir's.
from ember.tir.op import (  # noqa: E402, F401 - re-exported for `operation as te` callers
    abs,
    ceil,
    cos,
    erf,
    exp,
    floor,
    fma,
    if_then_else,
    log,
    pow,
    round,
    rsqrt,
    select,
    sigmoid,
    sin,
    sqrt,
    tanh,
)
