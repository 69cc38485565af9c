"""How a per-row reduction is built: the one choice the row computes leave to their caller.

``softmax``, ``layer_norm`` and ``reduce_rows`` (``tir/topi/nn.py``) reduce each row of a
2-D tensor. A tensor expression fixes the order in which a reduction combines its terms,
and a template's schedule cannot reorder it, so the row computes take the reduction as a
parameter, a :data:`RowReduce`: :func:`plain_row_reduce` (one reduction per row, what the
graph's generic compute uses), :func:`lane_row_reduce` (the CPU templates' ``lanes``
partial results per row, which vectorize, then combined) or the CUDA templates' block
reduction (``codegen_cuda/schedules/block_reduce.py``). Each keeps its own rounding: a
``scale`` (the mean's ``1 / C``) multiplies every term in the plain and block forms and
the combined partials in the lane form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor

REDUCERS = {"sum": te.sum, "max": te.max, "min": te.min}
Source = Callable[[Any, Any], E.PrimExpr]


class RowReduce(Protocol):
    """``out[r] = kind_{k < C} source(r, k)`` (times ``scale``), an (R,) tensor ``name``."""

    def __call__(
        self,
        source: Source,
        R: int,
        C: int,
        kind: str,
        name: str,
        scale: float | None = None,
        tag: str = "",
    ) -> Tensor: ...


def _reducer(kind: str) -> Any:
    if kind not in REDUCERS:
        raise ArgumentError(f"reduce: kind must be sum, max or min, got {kind!r}")
    return REDUCERS[kind]


def plain_row_reduce(
    source: Source,
    R: int,
    C: int,
    kind: str,
    name: str,
    scale: float | None = None,
    tag: str = "",
) -> Tensor:
    """One reduction per row; ``scale`` multiplies each term."""
    reducer = _reducer(kind)
    k = te.reduce_axis((0, C), name="k")

    def f(r: Any) -> E.PrimExpr:
        term = source(r, k) if scale is None else source(r, k) * scale
        return reducer(term, axis=k)

    return te.compute((R,), f, name=name, tag=tag)


def likely(cond: E.PrimExpr) -> E.PrimExpr:
    """Mark ``cond`` as usually true, so loop partitioning removes it from the main loop."""
    return E.Call("bool", E.Intrinsic.LIKELY, (cond,))


def lane_partials(source: Source, R: int, C: int, kind: str, lanes: int, name: str) -> Tensor:
    """``part[r, l] = reduce_{k = l, l + lanes, ... < C} source(r, k)`` for ``l < lanes``:
    the store moves with ``l``, so the lane loop vectorizes; the last, partial group is
    guarded with ``likely``."""
    reducer = _reducer(kind)
    ko = te.reduce_axis((0, -(-C // lanes)), name="ko")

    def f(r, l):  # noqa: ANN001, ANN202
        k = ko.var * lanes + l
        return reducer(source(r, k), axis=ko, where=likely(k < C))

    return te.compute((R, lanes), f, name=f"{name}_lanes")


def combine_lanes(
    part: Tensor, kind: str, name: str, scale: float | None = None, tag: str = ""
) -> Tensor:
    """``out[r] = reduce_l part[r, l]`` (times ``scale`` when given)."""
    R, lanes = (int(s.value) for s in part.shape)  # type: ignore[attr-defined]
    l = te.reduce_axis((0, lanes), name="l")
    reducer = _reducer(kind)

    def f(r):  # noqa: ANN001, ANN202
        value = part[r, l] if scale is None else part[r, l] * E.const(scale, part.dtype)
        return reducer(value, axis=l)

    return te.compute((R,), f, name=name, tag=tag)


def lane_row_reduce(lanes: int, parts: list[Tensor] | None = None) -> RowReduce:
    """A :data:`RowReduce` of ``lanes`` partials per row, then combined (``scale`` applied
    to the combination); each partials tensor is appended to ``parts`` for the schedule."""

    def reduce(
        source: Source,
        R: int,
        C: int,
        kind: str,
        name: str,
        scale: float | None = None,
        tag: str = "",
    ) -> Tensor:
        part = lane_partials(source, R, C, kind, lanes, name)
        if parts is not None:
            parts.append(part)
        return combine_lanes(part, kind, name, scale, tag)

    return reduce
