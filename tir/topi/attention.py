"""Scaled dot-product attention as tensor expressions: ``softmax(Q Kᵀ · scale + mask) V``.

The graph's ``attention`` node (made by ``frontend/passes/fuse_attention.py``) reads Q, K
and V in the layout their producers wrote, so the multi-head transposes around it need no
copies: an :class:`AttentionLayout` says, for each of Q, K, V and the output, which
tensor axis holds each logical axis (batch, head, position, feature). :func:`attention`
is the plain compute (the score matrix as a stage, a stable softmax, then the product
with V), the op's generic compute on any target and the reference the CPU's fused kernel
(``codegen_llvm/schedules/attention.py``, which never stores the scores) is tested
against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor

Axes = tuple[int, int, int, int]
IDENTITY: Axes = (0, 1, 2, 3)


@dataclass(frozen=True)
class AttentionLayout:
    """Where each logical axis (batch, head, position, feature) sits in Q, K, V and the
    output: ``q[i]`` is the axis of Q's tensor holding logical axis ``i``."""

    q: Axes = IDENTITY
    k: Axes = IDENTITY
    v: Axes = IDENTITY
    out: Axes = IDENTITY

    def __post_init__(self) -> None:
        for name in ("q", "k", "v", "out"):
            if sorted(getattr(self, name)) != [0, 1, 2, 3]:
                raise ArgumentError(f"attention: {name} axes {getattr(self, name)} are not a perm")

    @staticmethod
    def logical(shape: Sequence[Any], axes: Sequence[int]) -> tuple[Any, ...]:
        """``shape`` (a tensor's) in logical order (batch, head, position, feature)."""
        return tuple(shape[a] for a in axes)

    @staticmethod
    def physical(logical: Sequence[Any], axes: Sequence[int]) -> tuple[Any, ...]:
        """The tensor shape (or index) whose axis ``axes[i]`` holds ``logical[i]``."""
        out: list[Any] = [0] * len(axes)
        for i, a in enumerate(axes):
            out[a] = logical[i]
        return tuple(out)

    def attrs(self) -> dict[str, Axes]:
        """The layout as node attributes (``q_axes`` ...)."""
        return {"q_axes": self.q, "k_axes": self.k, "v_axes": self.v, "out_axes": self.out}

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> AttentionLayout:
        """The layout :meth:`attrs` wrote."""
        a = attrs
        return cls(a["q_axes"], a["k_axes"], a["v_axes"], a["out_axes"])


def at(t: Any, axes: Sequence[int], *logical: Any) -> E.PrimExpr:
    """``t`` (a tensor or a buffer) at logical (batch, head, position, feature)."""
    return t[AttentionLayout.physical(logical, axes)]


def mask_at(mask: Any, b: Any, h: Any, i: Any, j: Any) -> E.PrimExpr:
    """The mask (a tensor or a buffer) at score (b, h, i, j) under numpy broadcasting
    (right-aligned, size-1 axes read at 0)."""
    rank = len(mask.shape)
    logical = (b, h, i, j)[4 - rank :]
    return mask[tuple(0 if _is_one(n) else x for n, x in zip(mask.shape, logical))]


def _is_one(n: Any) -> bool:
    return E.const_value(n) == 1 if isinstance(n, E.PrimExpr) else n == 1


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    scale: float,
    layout: AttentionLayout,
    name: str = "attention",
) -> Tensor:
    """``softmax(Q Kᵀ · scale + mask) V``, the score matrix a stage of its own."""
    B, H, Sq, D = layout.logical(q.shape, layout.q)
    Sk = layout.logical(k.shape, layout.k)[2]
    Dv = layout.logical(v.shape, layout.v)[3]
    c = E.const(scale, q.dtype)
    d = te.reduce_axis((0, D), name="d")

    def score(b: Any, h: Any, i: Any, j: Any) -> E.PrimExpr:
        return te.sum(at(q, layout.q, b, h, i, d) * at(k, layout.k, b, h, j, d), axis=d)

    dot = te.compute((B, H, Sq, Sk), score, name=f"{name}_dot")

    def scaled(b: Any, h: Any, i: Any, j: Any) -> E.PrimExpr:
        s = dot[b, h, i, j] * c
        return s if mask is None else s + mask_at(mask, b, h, i, j)

    scores = te.compute((B, H, Sq, Sk), scaled, name=f"{name}_scores")
    jm = te.reduce_axis((0, Sk), name="jm")
    mx = te.compute(
        (B, H, Sq), lambda b, h, i: te.max(scores[b, h, i, jm], axis=jm), name=f"{name}_max"
    )
    ex = te.compute(
        (B, H, Sq, Sk),
        lambda b, h, i, j: te.exp(scores[b, h, i, j] - mx[b, h, i]),
        name=f"{name}_exp",
    )
    js = te.reduce_axis((0, Sk), name="js")
    sm = te.compute(
        (B, H, Sq), lambda b, h, i: te.sum(ex[b, h, i, js], axis=js), name=f"{name}_sum"
    )
    jv = te.reduce_axis((0, Sk), name="jv")
    ctx = te.compute(
        (B, H, Sq, Dv),
        lambda b, h, i, e: te.sum(ex[b, h, i, jv] * at(v, layout.v, b, h, jv, e), axis=jv),
        name=f"{name}_ctx",
    )

    def out(*idx: Any) -> E.PrimExpr:
        b, h, i, e = AttentionLayout.logical(idx, layout.out)
        return ctx[b, h, i, e] / sm[b, h, i]

    shape = AttentionLayout.physical((B, H, Sq, Dv), layout.out)
    return te.compute(shape, out, name=name, tag="attention")


__all__ = ["IDENTITY", "AttentionLayout", "at", "attention", "mask_at"]
