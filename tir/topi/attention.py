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
from ember.tir.buffer import Buffer
from ember.tir.ir_builder import IRBuilder
from ember.tir.te import operation as te
from ember.tir.te.extern import extern
from ember.tir.te.tensor import Tensor
from ember.tir.topi.transform import concatenate

Axes = tuple[int, int, int, int]
IDENTITY: Axes = (0, 1, 2, 3)


@dataclass(frozen=True)
class AttentionLayout:
    """Where each logical axis (batch, head, position, feature) sits in Q, K, V and the
    output: ``q[i]`` is the axis of Q's 4-D view holding logical axis ``i``. A nonzero
    ``q_split`` says Q's tensor is 3-D, its last axis the view's last two merged (heads ·
    features, ``q_split`` features): the ``[B, S, H·D]`` tensor before BERT's reshape."""

    q: Axes = IDENTITY
    k: Axes = IDENTITY
    v: Axes = IDENTITY
    out: Axes = IDENTITY
    q_split: int = 0
    k_split: int = 0
    v_split: int = 0
    out_split: int = 0

    def __post_init__(self) -> None:
        for name in ("q", "k", "v", "out"):
            if sorted(getattr(self, name)) != [0, 1, 2, 3]:
                raise ArgumentError(f"attention: {name} axes {getattr(self, name)} are not a perm")

    def _of(self, which: str) -> tuple[Axes, int]:
        return getattr(self, which), getattr(self, f"{which}_split")

    def sizes(self, which: str, shape: Sequence[Any]) -> tuple[Any, ...]:
        """(batch, head, position, feature) of operand ``which`` ("q", "k", "v", "out")
        from its tensor's shape."""
        axes, split = self._of(which)
        view = (*shape[:2], shape[2] // split, split) if split else tuple(shape)
        return tuple(view[a] for a in axes)

    def shape(self, which: str, sizes: Sequence[Any]) -> tuple[Any, ...]:
        """The tensor shape of operand ``which`` holding logical ``sizes``."""
        b, h, s, d = sizes
        return self.index(which, b, h, s, d, flat=False)

    def index(self, which: str, b: Any, h: Any, s: Any, d: Any, flat: bool = True) -> tuple:
        """The index into operand ``which``'s tensor of logical (b, h, s, d) (with ``flat``
        False: of a shape, so a merged axis multiplies instead of offsetting)."""
        axes, split = self._of(which)
        view: list[Any] = [0, 0, 0, 0]
        for i, a in enumerate(axes):
            view[a] = (b, h, s, d)[i]
        if not split:
            return tuple(view)
        last = view[2] * view[3] if not flat else view[2] * split + view[3]
        return (view[0], view[1], last)

    def attrs(self) -> dict[str, Any]:
        """The layout as node attributes (``q_axes``, ``q_split``, ...)."""
        out: dict[str, Any] = {}
        for which in ("q", "k", "v", "out"):
            axes, split = self._of(which)
            out[f"{which}_axes"], out[f"{which}_split"] = axes, split
        return out

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> AttentionLayout:
        """The layout :meth:`attrs` wrote."""
        a = attrs
        axes = (a["q_axes"], a["k_axes"], a["v_axes"], a["out_axes"])
        return cls(*axes, a["q_split"], a["k_split"], a["v_split"], a["out_split"])


def at(t: Any, layout: AttentionLayout, which: str, *logical: Any) -> E.PrimExpr:
    """Operand ``which`` (a tensor or a buffer) at logical (batch, head, position, feature)."""
    return t[layout.index(which, *logical)]


def mask_at(mask: Any, b: Any, h: Any, i: Any, j: Any) -> E.PrimExpr:
    """The mask (a tensor or a buffer) at score (b, h, i, j) under numpy broadcasting
    (right-aligned, size-1 axes read at 0)."""
    rank = len(mask.shape)
    logical = (b, h, i, j)[4 - rank :]
    return mask[tuple(0 if _is_one(n) else x for n, x in zip(mask.shape, logical))]


def static_shape(shape: Sequence[Any]) -> tuple[int, ...]:
    """A tensor's shape as ints (its dims are constants: kernels are built per size)."""
    return tuple(int(E.const_value(d) or 0) if isinstance(d, E.PrimExpr) else d for d in shape)


def _logical_of_out(layout: AttentionLayout, idx: Sequence[Any], dv: int) -> tuple[Any, ...]:
    """The logical (b, h, s, d) an output index stands for (the inverse of ``index``)."""
    view = (*idx[:2], idx[2] // dv, idx[2] % dv) if layout.out_split else tuple(idx)
    return tuple(view[a] for a in layout.out)


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
    B, H, Sq, Sk, D, Dv = sizes_of(q, k, v, layout)
    c = E.const(scale, q.dtype)
    d = te.reduce_axis((0, D), name="d")

    def score(b: Any, h: Any, i: Any, j: Any) -> E.PrimExpr:
        return te.sum(at(q, layout, "q", b, h, i, d) * at(k, layout, "k", b, h, j, d), axis=d)

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
        lambda b, h, i, e: te.sum(ex[b, h, i, jv] * at(v, layout, "v", b, h, jv, e), axis=jv),
        name=f"{name}_ctx",
    )

    def out(*idx: Any) -> E.PrimExpr:
        b, h, i, e = _logical_of_out(layout, idx, Dv)
        return ctx[b, h, i, e] / sm[b, h, i]

    shape = layout.shape("out", (B, H, Sq, Dv))
    return te.compute(shape, out, name=name, tag="attention")


def cached_attention(
    q: Tensor,
    past_k: Tensor,
    new_k: Tensor,
    past_v: Tensor,
    new_v: Tensor,
    mask: Tensor | None,
    scale: float,
    layout: AttentionLayout,
) -> list[Tensor]:
    """``[attention, present_k, present_v]``: the new keys and values appended to the
    cache along its position axis (a decode step's ``Concat``), and :func:`attention`
    over the result. K and V must be 4-D (no split)."""
    if layout.k_split or layout.v_split:
        raise ArgumentError("cached_attention: K and V must be 4-D tensors (no split)")
    present_k = concatenate([past_k, new_k], layout.k[2], name="present_k")
    present_v = concatenate([past_v, new_v], layout.v[2], name="present_v")
    return [attention(q, present_k, present_v, mask, scale, layout), present_k, present_v]


def sizes_of(
    q: Tensor, k: Tensor, v: Tensor, layout: AttentionLayout
) -> tuple[int, int, int, int, int, int]:
    """The logical sizes (B, H, Sq, Sk, D, Dv) of the operands stored in ``layout``."""
    B, H, Sq, D = layout.sizes("q", static_shape(q.shape))
    Sk = layout.sizes("k", static_shape(k.shape))[2]
    Dv = layout.sizes("v", static_shape(v.shape))[3]
    return B, H, Sq, Sk, D, Dv


def attention_extern(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    layout: AttentionLayout,
    scale: float,
    writer: type[KernelWriter],
    shape: Any,
) -> Tensor:
    """The output (in ``layout``) of a fused kernel whose TIR ``writer(shape, ...)``
    builds: one extern stage tagged ``attention``, the targets' kernels (which never store
    the scores)."""
    B, H, Sq, _, _, Dv = sizes_of(q, k, v, layout)
    inputs = [q, k, v] if mask is None else [q, k, v, mask]
    out_shape = layout.shape("out", (B, H, Sq, Dv))

    def body(ins: list[Buffer], outs: list[Buffer]) -> Any:
        return writer(shape, layout, scale, ins, outs[0]).build()

    return extern(out_shape, inputs, body, name="attention", tag="attention")


class KernelWriter:
    """What a fused attention kernel's writer holds: its sizes and blocks ``n`` (each
    target's own), the operand buffers (``M`` the mask or None), the layout, the scale,
    the output's dtype and the :class:`IRBuilder`; :meth:`build` writes the kernel."""

    def __init__(
        self, shape: Any, layout: AttentionLayout, scale: float, ins: list[Buffer], out: Buffer
    ) -> None:
        self.n, self.layout, self.scale = shape, layout, scale
        self.Q, self.K, self.V = ins[:3]
        self.M = ins[3] if len(ins) > 3 else None
        self.O = out
        self.dtype = out.dtype
        self.ib = IRBuilder()

    def const(self, value: float) -> E.PrimExpr:
        """``value`` in the output's dtype."""
        return E.const(value, self.dtype)

    def build(self) -> Any:
        """The kernel's TIR."""
        raise NotImplementedError


__all__ = [
    "IDENTITY",
    "AttentionLayout",
    "KernelWriter",
    "at",
    "attention",
    "attention_extern",
    "cached_attention",
    "mask_at",
    "sizes_of",
    "static_shape",
]
