"""Computes with several outputs, and the tuple reductions that produce them.

``te.compute`` with a lambda that returns a tuple makes one operation with one
output per value (TVM's multi-output ``ComputeOp``); a reducer called with a
tuple (``argmax((idx[i, k], val[i, k]), axis=k)``) reduces tuples and returns one
``Reduce`` per value, which such a compute takes as its outputs. This module
builds those reductions and checks that a tuple of bodies can share one loop
nest: either no value is a reduction, or all are the values of one reduction.
Lowering (:mod:`ember.tir.schedule.lower`) then writes every output in the
same iteration, and a tuple reduction updates all its values at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te.tensor import reduce_axes_of


def tuple_reduce(
    name: str,
    fcombine: Callable[..., Any],
    fidentity: Callable[..., Any],
    exprs: Sequence[E.ExprLike],
    axis: Any,
    where: E.ExprLike | None,
    init: Any,
) -> E.Reduce | tuple[E.Reduce, ...]:
    """One ``Reduce`` per value of the tuple ``exprs`` (a single one for a 1-tuple, as TVM).

    ``fcombine(lhs, rhs)`` receives two tuples of variables, one per value, and
    returns the combined tuple; ``fidentity(*dtypes)`` the identity of each value.
    """
    sources = tuple(E.convert(e) for e in exprs)
    if not sources:
        raise ArgumentError(f"{name}: a tuple reduction needs at least one value")
    axes = reduce_axes_of(name, axis)
    dtypes = [s.dtype for s in sources]
    lhs = tuple(E.Var(f"x_{k}", t) for k, t in enumerate(dtypes))
    rhs = tuple(E.Var(f"y_{k}", t) for k, t in enumerate(dtypes))
    results = _per_value(fcombine(lhs, rhs), dtypes, f"{name}: fcombine")
    identities = _per_value(fidentity(*dtypes), dtypes, f"{name}: fidentity")
    inits: tuple[E.PrimExpr | None, ...] = (None,) * len(sources)
    if init is not None:
        inits = _per_value(init, dtypes, f"{name}: init")
    combiner = E.TupleReducer(name, lhs, rhs, results, identities)
    cond = None if where is None else E._as_bool(where)
    out = tuple(
        E.Reduce(t, combiner, sources[k], axes, cond, inits[k], sources, k)
        for k, t in enumerate(dtypes)
    )
    return out[0] if len(out) == 1 else out


def _per_value(values: Any, dtypes: list[str], what: str) -> tuple[E.PrimExpr, ...]:
    """``values`` as one expression of each dtype (a lone expression for a 1-tuple)."""
    if not isinstance(values, (tuple, list)):
        values = (values,)
    if len(values) != len(dtypes):
        raise ArgumentError(f"{what} gave {len(values)} value(s) for a tuple of {len(dtypes)}")
    out = []
    for v, t in zip(values, dtypes):
        e = E.convert(v, t) if not isinstance(v, E.PrimExpr) else v
        out.append(e if e.dtype == t else E.cast(t, e))
    return tuple(out)


def check_bodies(bodies: Sequence[E.PrimExpr], name: str) -> None:
    """Several outputs share one loop nest: all are plain expressions, or all are the
    values of one tuple reduction, in order (TVM's rule for multi-output computes)."""
    reduces = [b for b in bodies if isinstance(b, E.Reduce)]
    if not reduces:
        return
    first = reduces[0]
    if len(reduces) != len(bodies) or not isinstance(first.combiner, E.TupleReducer):
        raise ArgumentError(
            f"compute '{name}': the outputs of one compute are either all plain expressions "
            "or all the values of one tuple reduction (reducer((a, b), axis=k))"
        )
    for k, red in enumerate(reduces):
        alike = (
            red.combiner is first.combiner
            and red.sources == first.sources
            and red.axis == first.axis
            and red.condition is first.condition
        )
        if not alike or red.value_index != k or len(red.sources) != len(bodies):
            raise ArgumentError(
                f"compute '{name}': output {k} is not value {k} of the same tuple reduction as "
                "output 0; return all the values of one reducer call, in order"
            )
