"""Buffer memory for the reference interpreter: storage, bounds-checked loads and stores.

Every buffer's storage is a flat numpy array kept in the environment slot of the
buffer's ``data`` pointer variable. A parameter's slot holds the flattened view
of the caller's array (so a multi-dimensional buffer and its 1-D flattened
version, which share ``data``, read and write the same memory) and an
``Allocate`` puts a fresh array there, filled with NaN or a byte pattern so a
read of memory nobody wrote shows up in the result.

An access with one index per dimension is checked dimension by dimension
(``A[3, 17]`` in a 16x16 buffer is an error, although the flat offset 65 is in
range); an access with a single index into a multi-dimensional buffer is a flat
offset and is checked against the buffer's size. An index outside the buffer
raises :class:`InternalError`: an oracle must not wrap around the way numpy's
negative indices do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.errors import InternalError
from ember.tir import dtype as dt
from ember.tir.bf16 import bf16_to_float32, float32_to_bf16
from ember.tir.buffer import Buffer
from ember.tir.expr import IntImm, PrimExpr
from ember.tir.interp.ops import wrap_fn

Env = list
Fn = Callable[[Env], Any]
CompileExpr = Callable[[PrimExpr], Fn]

_BF16_TABLE = bf16_to_float32(np.arange(1 << 16, dtype=np.uint16))
_BF16_NAN_BITS = 0x7FC1
_INT_FILL_BYTE = 0xA5


def _int_or_none(e: PrimExpr | None) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def _raise_oob(buf: Buffer, what: str, index: Sequence[Any], dim: int, bound: Any) -> None:
    shown = ", ".join(str(np.asarray(i).tolist()) for i in index)
    shape = ", ".join(str(s) for s in buf.shape)
    where = "flat offset" if len(index) == 1 and buf.ndim != 1 else f"index {dim}"
    raise InternalError(
        f"out-of-bounds {what} of buffer '{buf.name}' (shape ({shape})) at [{shown}]: "
        f"{where} is outside [0, {np.asarray(bound).tolist()})"
    )


class _Layout:
    """Extents to check each index against, strides and offset: ints or runtime functions."""

    def __init__(self, buf: Buffer, nidx: int, compile_expr: CompileExpr) -> None:
        if nidx == 1 and (buf.ndim != 1 or not buf.strides):
            extents: tuple[PrimExpr, ...] = (buf.flat_size(),)
            strides: tuple[PrimExpr, ...] = (IntImm("int32", 1),)
        else:
            extents, strides = buf.shape, buf.row_major_strides()
        offset = buf.elem_offset if buf.elem_offset is not None else IntImm("int32", 0)
        exprs = (*extents, *strides, offset)
        consts = [_int_or_none(e) for e in exprs]
        self.static = all(c is not None for c in consts)
        self.consts = consts
        self.fns = [compile_expr(e) for e in exprs]
        self.n = len(extents)

    def values(self, env: Env) -> tuple[list[Any], list[Any], Any]:
        vals = self.consts if self.static else [f(env) for f in self.fns]
        return vals[: self.n], vals[self.n : 2 * self.n], vals[-1]


def compile_locate(
    buf: Buffer, indices: Sequence[PrimExpr], what: str, compile_expr: CompileExpr
) -> tuple[Fn, bool]:
    """A function of the environment giving the checked flat offset; and whether it is a vector."""
    if len(indices) not in (1, buf.ndim):
        raise InternalError(
            f"{what} of buffer '{buf.name}' with {len(indices)} indices; it has {buf.ndim} "
            "dimensions (expected one index per dimension, or one flat index)"
        )
    layout = _Layout(buf, len(indices), compile_expr)
    fns = [compile_expr(i) for i in indices]
    vector = any(dt.lanes_of(i.dtype) > 1 for i in indices)
    if vector:
        return _vector_locate(buf, what, fns, layout), True
    if layout.static and len(fns) == 1:
        bound, _, offset = layout.consts
        return _flat_locate(buf, what, fns[0], int(bound or 0), int(offset or 0)), False
    if layout.static and len(fns) == 2:
        return _static_2d_locate(buf, what, fns, layout.consts), False
    return _scalar_locate(buf, what, fns, layout), False


def _flat_locate(buf: Buffer, what: str, f: Fn, bound: int, offset: int) -> Fn:
    def locate(env: Env) -> Any:
        i = f(env)
        if 0 <= i < bound:
            return i + offset if offset else i
        _raise_oob(buf, what, [i], 0, bound)

    return locate


def _static_2d_locate(buf: Buffer, what: str, fns: list[Fn], consts: list[Any]) -> Fn:
    f0, f1 = fns
    n0, n1, s0, s1, offset = consts

    def locate(env: Env) -> Any:
        i, j = f0(env), f1(env)
        if 0 <= i < n0 and 0 <= j < n1:
            return i * s0 + j * s1 + offset
        _raise_oob(buf, what, [i, j], 0 if not 0 <= i < n0 else 1, n0 if not 0 <= i < n0 else n1)

    return locate


def _scalar_locate(buf: Buffer, what: str, fns: list[Fn], layout: _Layout) -> Fn:
    def locate(env: Env) -> Any:
        idx = [f(env) for f in fns]
        extents, strides, offset = layout.values(env)
        flat = offset
        for d, (i, n, s) in enumerate(zip(idx, extents, strides)):
            if not 0 <= i < n:
                _raise_oob(buf, what, idx, d, n)
            flat = flat + i * s
        return flat

    return locate


def _vector_locate(buf: Buffer, what: str, fns: list[Fn], layout: _Layout) -> Fn:
    def locate(env: Env) -> Any:
        idx = [f(env) for f in fns]
        extents, strides, offset = layout.values(env)
        flat = offset
        for d, (i, n, s) in enumerate(zip(idx, extents, strides)):
            if not np.all((i >= 0) & (i < n)):
                _raise_oob(buf, what, idx, d, n)
            flat = flat + np.asarray(i, dtype=np.int64) * s
        return flat

    return locate


def compile_load(
    buf: Buffer, indices: Sequence[PrimExpr], dtype: str, env_slot: int, compile_expr: CompileExpr
) -> Fn:
    """Read ``buf[indices]`` as a value of ``dtype`` (a vector when an index is one)."""
    locate, vector = compile_locate(buf, indices, "load", compile_expr)
    _check_lanes(buf, indices, dtype, "load")
    ds = env_slot
    if dt.element_of(buf.dtype) == "bfloat16":
        if vector:
            return lambda env: bf16_to_float32(env[ds][locate(env)])
        return lambda env: _BF16_TABLE[env[ds][locate(env)]]
    wrap = wrap_fn(buf.dtype)
    if wrap is not None:
        # a 4-bit value is wrapped on load too, so a byte out of range (in memory nobody
        # range-checked, such as an output's old contents) reads as compiled code reads it
        return lambda env: wrap(env[ds][locate(env)])
    return lambda env: env[ds][locate(env)]


def compile_store(
    buf: Buffer,
    indices: Sequence[PrimExpr],
    value: Fn,
    value_dtype: str,
    env_slot: int,
    compile_expr: CompileExpr,
) -> Fn:
    """Write a value into ``buf[indices]``."""
    locate, vector = compile_locate(buf, indices, "store", compile_expr)
    _check_lanes(buf, indices, value_dtype, "store")
    ds = env_slot
    if dt.element_of(buf.dtype) == "bfloat16":

        def store_bf16(env: Env) -> None:
            v = value(env)
            env[ds][locate(env)] = float32_to_bf16(v)

        return store_bf16

    def store(env: Env) -> None:
        v = value(env)
        env[ds][locate(env)] = v

    return store


def _check_lanes(buf: Buffer, indices: Sequence[PrimExpr], dtype: str, what: str) -> None:
    if dt.lanes_of(buf.dtype) > 1:
        raise InternalError(
            f"buffer '{buf.name}' has the vector type {buf.dtype}; the interpreter "
            "expects buffers of scalars accessed with Ramp indices"
        )
    index_lanes = max((dt.lanes_of(i.dtype) for i in indices), default=1)
    if dt.lanes_of(dtype) != index_lanes:
        raise InternalError(
            f"{what} of {dtype} in buffer '{buf.name}' with an index of {index_lanes} "
            "lane(s); a vector access needs a vector (Ramp) index of as many lanes"
        )


def compile_allocation(buf: Buffer, compile_expr: CompileExpr) -> Fn:
    """A function making fresh storage for ``buf``: NaN for floats, a byte pattern for ints."""
    size_expr = buf.flat_size()
    const_size = _int_or_none(size_expr)
    size_fn = compile_expr(size_expr)

    def allocate(env: Env) -> np.ndarray:
        size = const_size if const_size is not None else int(size_fn(env))
        if size < 0:
            raise InternalError(f"allocation of buffer '{buf.name}' with negative size {size}")
        return fresh_storage(buf.dtype, (size,))

    return allocate


def fresh_storage(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """New storage filled so that reading what nobody wrote shows: NaN or a byte pattern
    (shared with the SIMT emulator's shared and local memory)."""
    base = dt.element_of(dtype)
    npdt = dt.numpy_dtype(base)
    if base == "bfloat16":
        return np.full(shape, _BF16_NAN_BITS, dtype=npdt)
    if dt.is_float(base):
        return np.full(shape, np.nan, dtype=npdt)
    if base == "bool":
        return np.ones(shape, dtype=npdt)
    arr = np.empty(shape, dtype=npdt)
    arr.view(np.uint8)[...] = _INT_FILL_BYTE
    return arr


__all__ = [
    "compile_allocation",
    "compile_load",
    "compile_locate",
    "compile_store",
    "fresh_storage",
]
