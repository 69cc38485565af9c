"""Buffers: named, typed, shaped regions of memory that TIR loads from and stores to.

A PrimFunc's parameters are buffers; ``Allocate`` introduces the others. A
buffer is multi-dimensional until ``flatten_buffers`` rewrites every access to
one index over a 1-D buffer with the same ``data`` pointer variable, which is
what code generators see. ``scope`` is ``global`` for parameters, ``local`` for
per-thread scratch and ``shared`` for GPU block-shared tiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir.expr import (
    BufferLoad,
    Call,
    ExprLike,
    Intrinsic,
    PrimExpr,
    StringImm,
    Var,
    const,
    convert,
)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Buffer:
    """A typed, shaped view of memory at a pointer; TIR loads and stores go through one."""

    name: str
    dtype: str
    shape: tuple[PrimExpr, ...]
    data: Var  # the pointer; shared by a buffer and its flattened view
    scope: str = "global"
    strides: tuple[PrimExpr, ...] = ()  # empty: dense row-major
    elem_offset: PrimExpr | None = None
    align: int = 64  # bytes the base pointer is known to be aligned to
    axis_separators: tuple[int, ...] = ()

    def __repr__(self) -> str:
        dims = ", ".join(repr(s) for s in self.shape)
        return f"Buffer({self.name}, {self.dtype}, [{dims}], {self.scope})"

    def __getitem__(self, indices: Any) -> PrimExpr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        idx = tuple(convert(i) for i in indices)
        lanes = max((dt.lanes_of(i.dtype) for i in idx), default=1)  # a Ramp index: a vector
        return BufferLoad(dt.with_lanes(self.dtype, lanes), self, idx)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def access_ptr(
        self,
        access_mask: Any = "rw",
        ptr_type: str = "handle",
        content_lanes: int = 1,
        offset: ExprLike = 0,
        extent: ExprLike | None = None,
    ) -> PrimExpr:
        """TVM's ``access_ptr``: the address of the buffer's first element (its
        ``elem_offset``, plus ``offset`` elements), for a C or CUDA function called with
        ``call_extern``; in a tensor intrinsic's body it is the address of the region the
        intrinsic computes. ``access_mask`` ("r", "w", "rw"), ``content_lanes`` and
        ``extent`` are accepted as TVM takes them; Ember passes the address alone."""
        mask = _access_mask(access_mask)
        if ptr_type != "handle":
            raise ArgumentError(f"access_ptr: ptr_type must be 'handle', got {ptr_type!r}")
        base = convert(0 if self.elem_offset is None else self.elem_offset)
        where = base + convert(offset) if not _is_zero(offset) else base
        args = (self.data, where, StringImm(self.dtype), const(mask, "int32"))
        return Call("handle", Intrinsic.ACCESS_PTR, args)

    def row_major_strides(self) -> tuple[PrimExpr, ...]:
        """Strides in elements of the dense row-major layout (or the explicit ones)."""
        if self.strides:
            return self.strides
        strides: list[PrimExpr] = []
        acc: PrimExpr = const(1, "int32")
        for extent in reversed(self.shape):
            strides.append(acc)
            acc = acc * extent
        return tuple(reversed(strides))

    def flat_size(self) -> PrimExpr:
        if self.strides:
            return reduce(
                lambda a, b: a + b,
                [(s - 1) * st for s, st in zip(self.shape, self.strides)],
                const(1),
            )
        return reduce(lambda a, b: a * b, self.shape, const(1, "int32"))


def _access_mask(mask: Any) -> int:
    """TVM's access mask: 1 read, 2 write, as bits or as a string of 'r' and 'w'."""
    if isinstance(mask, str) and mask and set(mask) <= {"r", "w"}:
        return (1 if "r" in mask else 0) | (2 if "w" in mask else 0)
    if isinstance(mask, int) and not isinstance(mask, bool) and 1 <= mask <= 3:
        return mask
    raise ArgumentError(f"access_ptr: access_mask is 'r', 'w' or 'rw' (or 1..3), got {mask!r}")


def _is_zero(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x == 0


def decl_buffer(
    shape: tuple[ExprLike, ...] | list[ExprLike],
    dtype: str = "float32",
    name: str = "buf",
    scope: str = "global",
    data: Var | None = None,
    strides: tuple[ExprLike, ...] = (),
    elem_offset: ExprLike | None = None,
    offset_factor: int = 0,
    data_alignment: int = -1,
) -> Buffer:
    """Declare a buffer; a fresh pointer variable unless ``data`` is given. ``elem_offset``
    (elements from ``data`` to the buffer's first element) makes a view into memory that
    starts elsewhere, e.g. a tensor intrinsic's operand bound inside a bigger tensor; as
    in TVM, ``offset_factor`` > 0 without one makes it a fresh variable (bindable anywhere).
    ``data_alignment``: the bytes the data pointer is aligned to (TVM's; -1: the default,
    64, as Ember allocates; a view with an offset is aligned to its element only)."""
    for what, value in (("offset_factor", offset_factor), ("data_alignment", data_alignment)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentError(f"decl_buffer: {what} must be an int, got {value!r}")
    if data_alignment != -1 and (data_alignment < 1 or data_alignment & (data_alignment - 1)):
        raise ArgumentError(
            f"decl_buffer: data_alignment must be a power of two, got {data_alignment}"
        )
    if elem_offset is None and offset_factor:
        elem_offset = Var(f"{name}_elem_offset", "int32")
    dtype = dt.check_dtype(dtype)
    shape_t = tuple(convert(s) for s in shape)
    return Buffer(
        name=name,
        dtype=dtype,
        shape=shape_t,
        data=data if data is not None else Var(name, "handle"),
        scope=scope,
        strides=tuple(convert(s) for s in strides),
        elem_offset=None if elem_offset is None else convert(elem_offset),
        align=64 if data_alignment == -1 else data_alignment,
    )
