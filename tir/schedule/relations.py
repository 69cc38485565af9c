"""How derived loop axes relate to the axes they came from: splits and fuses.

A stage's loops are its *leaf* iteration variables. Each ``split`` and ``fuse``
records a relation; lowering walks them downward to give every derived axis
its extent (``pass_down_extents``) and upward to express each original axis
in terms of the leaf loop variables (``pass_up_values``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ember.tir import expr as E
from ember.tir.te.tensor import ComputeOp, IterVar


@dataclass(frozen=True, slots=True, eq=False)
class Split:
    """Records that ``parent`` was split into ``outer`` and ``inner`` (by factor or by nparts)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | E.PrimExpr | None  # exactly one of factor / nparts is set; an
    nparts: int | E.PrimExpr | None  # expression is a symbolic amount (a scalar argument)
    # TVM's ``disable_predication``: the user promises the tail needs no guard.
    disable_predication: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class Fuse:
    """Records that ``outer`` and ``inner`` were fused into ``fused``."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(frozen=True, slots=True, eq=False)
class Singleton:
    """A new loop of extent 1 made by ``fuse()`` of no axes (TVM's ``Singleton``)."""

    iv: IterVar


Relation = Split | Fuse | Singleton


def ceildiv(a: E.PrimExpr, b: int | E.PrimExpr) -> E.PrimExpr:
    """``ceil(a / b)`` for positive ``b``, folded for constants: the loop count of a split."""
    if isinstance(b, E.PrimExpr):
        return (a + b - 1) // b
    if isinstance(a, E.IntImm):
        return E.const(-(-a.value // b), a.dtype)
    return (a + (b - 1)) // b


def _amount(value: int | E.PrimExpr, dtype: str) -> E.PrimExpr:
    return value if isinstance(value, E.PrimExpr) else E.const(value, dtype)


def pass_down_extents(
    relations: list[Relation], extents: dict[IterVar, E.PrimExpr]
) -> dict[IterVar, E.PrimExpr]:
    """Extents of every derived axis from those of the root axes (each loop starts at 0)."""
    out = dict(extents)
    for rel in relations:
        if isinstance(rel, Split):
            parent = out[rel.parent]
            if rel.factor is not None:
                out[rel.outer] = ceildiv(parent, rel.factor)
                out[rel.inner] = _amount(rel.factor, parent.dtype)
            else:
                assert rel.nparts is not None
                out[rel.outer] = _amount(rel.nparts, parent.dtype)
                out[rel.inner] = ceildiv(parent, rel.nparts)
        elif isinstance(rel, Singleton):
            out[rel.iv] = E.const(1, rel.iv.var.dtype)
        else:
            out[rel.fused] = out[rel.outer] * out[rel.inner]
    return out


def pass_up_values(
    relations: list[Relation],
    values: Mapping[IterVar, E.PrimExpr],
    extents: dict[IterVar, E.PrimExpr],
) -> dict[IterVar, E.PrimExpr]:
    """Value of every axis as an expression of the leaf loop variables (0-based offsets)."""
    out = dict(values)
    for rel in reversed(relations):
        if isinstance(rel, Split):
            out[rel.parent] = out[rel.outer] * extents[rel.inner] + out[rel.inner]
        elif isinstance(rel, Fuse):
            fused = out[rel.fused]
            inner_ext = extents[rel.inner]
            out[rel.outer] = fused // inner_ext
            out[rel.inner] = fused % inner_ext
    return out


def split_is_exact(rel: Split, extents: dict[IterVar, E.PrimExpr]) -> bool:
    """True when the split covers its parent exactly, so no guard is needed."""
    parent = extents[rel.parent]
    if not isinstance(parent, E.IntImm):
        return False
    divisor = rel.factor if rel.factor is not None else rel.nparts
    assert divisor is not None
    return isinstance(divisor, int) and parent.value % divisor == 0


def split_needs_guard(rel: Split, extents: dict[IterVar, E.PrimExpr]) -> bool:
    """A split leaves tail iterations to guard unless it is exact or the user turned the
    guard off (``disable_predication=True``, as in TVM: they promise the tail is safe)."""
    return not rel.disable_predication and not split_is_exact(rel, extents)


def data_derived(st: Any) -> set[IterVar]:
    """The stage's axes whose value depends on a data axis: the data axes, and the loops
    split or fused from them (a loop fused from a data and a reduction axis is both, and
    a reduction's init iterates over it, as TVM's ``update_state`` bit mask says)."""
    op = st.op
    out: set[IterVar] = set(op.axis) if isinstance(op, ComputeOp) else set()
    for rel in st.relations:
        if isinstance(rel, Split) and rel.parent in out:
            out.update((rel.outer, rel.inner))
        elif isinstance(rel, Fuse) and (rel.outer in out or rel.inner in out):
            out.add(rel.fused)
        elif isinstance(rel, Singleton):
            out.add(rel.iv)
    return out
