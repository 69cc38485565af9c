"""Small llvmlite helpers the LLVM code generator is built from.

Sits under :mod:`ember.codegen_llvm.codegen`: it maps Ember dtypes to LLVM types
(register form and memory form differ for ``bool``, stored as ``i8``, for
``int4``/``uint4``, computed as ``i4`` and stored sign- or zero-extended as ``i8``, and for
``bfloat16``, computed as ``float`` and stored as ``i16``), makes constants and
splats, declares intrinsics and C functions once per module, and gives a
``for_range`` context manager in the spirit of numba's ``cgutils`` that emits a
counted loop with optional ``llvm.loop`` hints (see :mod:`.loop_hints`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from llvmlite import ir

from ember.errors import InternalError
from ember.tir import dtype as dt

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
PTR = ir.PointerType()
VOID = ir.VoidType()

I4 = ir.IntType(4)

_REGISTER = {
    "bool": I1,
    "int4": I4,  # i4 arithmetic wraps to 4 bits by itself; stored one value per byte
    "uint4": I4,
    "int8": I8,
    "uint8": I8,
    "int16": I16,
    "uint16": I16,
    "int32": I32,
    "uint32": I32,
    "int64": I64,
    "uint64": I64,
    "float16": ir.HalfType(),
    "bfloat16": F32,  # computed in float32, rounded to bfloat16 after each operation
    "float32": F32,
    "float64": ir.DoubleType(),
    "handle": PTR,
}
_MEMORY = {**_REGISTER, "bool": I8, "int4": I8, "uint4": I8, "bfloat16": I16}


def _vector(elem: ir.Type, lanes: int) -> ir.Type:
    return elem if lanes == 1 else ir.VectorType(elem, lanes)


def reg_type(dtype: str) -> ir.Type:
    """The LLVM type an expression of ``dtype`` has in a register."""
    base, lanes = dt.split_lanes(dtype)
    if base not in _REGISTER:
        raise InternalError(f"no LLVM type for dtype {dtype!r}")
    return _vector(_REGISTER[base], lanes)


def mem_type(dtype: str) -> ir.Type:
    """The LLVM type a value of ``dtype`` has in memory (``bool`` is a byte)."""
    base, lanes = dt.split_lanes(dtype)
    if base not in _MEMORY:
        raise InternalError(f"no LLVM type for dtype {dtype!r}")
    return _vector(_MEMORY[base], lanes)


def lanes_of_type(ty: ir.Type) -> int:
    """How many lanes an LLVM type has (1 for scalars)."""
    return ty.count if isinstance(ty, ir.VectorType) else 1


def element_type(ty: ir.Type) -> ir.Type:
    """The scalar type of an LLVM vector type (the type itself for scalars)."""
    return ty.element if isinstance(ty, ir.VectorType) else ty


def splat_const(ty: ir.Type, value: int | float) -> ir.Constant:
    """A constant of ``ty``; for a vector type, ``value`` in every lane."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def splat(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """Broadcast a scalar to ``lanes`` lanes (insertelement + shufflevector)."""
    if lanes == 1:
        return value
    if isinstance(value, ir.Constant) and not isinstance(value.type, ir.VectorType):
        return ir.Constant(ir.VectorType(value.type, lanes), [value] * lanes)
    vty = ir.VectorType(value.type, lanes)
    one = builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(I32, 0))
    mask = ir.Constant(ir.VectorType(I32, lanes), [ir.Constant(I32, 0)] * lanes)
    return builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined), mask)


def iota(ty: ir.Type, lanes: int) -> ir.Constant:
    """The constant vector ``<0, 1, ..., lanes-1>`` of integer type ``ty``."""
    return ir.Constant(ir.VectorType(ty, lanes), [ir.Constant(ty, i) for i in range(lanes)])


def declare(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """The function ``name`` of this module, declared on first use."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret, list(args)), name=name)


def intrinsic_suffix(ty: ir.Type) -> str:
    """LLVM's overload suffix: ``f32``, ``v16f32``, ``i64``."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{ty.element.intrinsic_name}"
    return ty.intrinsic_name


def declare_intrinsic(
    module: ir.Module, base: str, ty: ir.Type, nargs: int, extra: Sequence[ir.Type] = ()
) -> ir.Function:
    """``llvm.<base>.<suffix>`` taking ``nargs`` values of ``ty`` (plus ``extra``)."""
    return declare(module, f"{base}.{intrinsic_suffix(ty)}", ty, [ty] * nargs + list(extra))


def to_index(builder: ir.IRBuilder, value: ir.Value, dtype: str) -> ir.Value:
    """An integer index as a signed GEP operand (unsigned and narrow ones widened to i64)."""
    if dt.element_of(dtype) in ("int32", "int64"):
        return value
    lanes = dt.lanes_of(dtype)
    wide = _vector(I64, lanes)
    return (
        builder.zext(value, wide)
        if dt.is_uint(dtype) or dt.is_bool(dtype)
        else builder.sext(value, wide)
    )


class _LoopMD(ir.values.MDValue):
    """A distinct, self-referencing ``llvm.loop`` node, as LLVM requires for loop IDs."""

    def descr(self, buf: list[str]) -> None:
        ops = ", ".join([self.get_reference(), *(op.get_reference() for op in self.operands)])
        buf += (f"distinct !{{ {ops} }}", "\n")


def loop_metadata(module: ir.Module, hints: Sequence[str | tuple[str, bool]]) -> ir.values.MDValue:
    """A loop ID carrying hints: a flag such as ``llvm.loop.unroll.full``, or a
    ``(name, bool)`` pair such as ``("llvm.loop.vectorize.enable", False)``."""
    props = []
    for h in hints:
        ops = [h] if isinstance(h, str) else [h[0], ir.Constant(ir.IntType(1), int(h[1]))]
        props.append(module.add_metadata([ir.MetaDataString(module, ops[0]), *ops[1:]]))
    return _LoopMD(module, props, name=str(len(module.metadata)))


@contextmanager
def for_range(
    builder: ir.IRBuilder,
    start: ir.Value,
    stop: ir.Value,
    name: str = "i",
    hints: Sequence[str | tuple[str, bool]] = (),
) -> Iterator[ir.Value]:
    """Emit ``for (i = start; i < stop; ++i) { <with-body> }``; yields ``i``.

    The counter is a phi in a header block; the latch branch carries the loop
    hints. After the ``with`` block the builder sits in the exit block.
    """
    fn = builder.function
    pre = builder.block
    header = fn.append_basic_block(f"{name}.head")
    body = fn.append_basic_block(f"{name}.body")
    exit_ = fn.append_basic_block(f"{name}.exit")
    builder.branch(header)
    builder.position_at_end(header)
    index = builder.phi(start.type, name=name)
    index.add_incoming(start, pre)
    builder.cbranch(builder.icmp_signed("<", index, stop), body, exit_)
    builder.position_at_end(body)
    yield index
    if not builder.block.is_terminated:
        nxt = builder.add(index, ir.Constant(start.type, 1), name=f"{name}.next", flags=["nsw"])
        latch = builder.branch(header)
        if hints:
            latch.set_metadata("llvm.loop", loop_metadata(builder.module, hints))
        index.add_incoming(nxt, builder.block)
    builder.position_at_end(exit_)


def entry_alloca(builder: ir.IRBuilder, ty: ir.Type, name: str = "", align: int = 0) -> ir.Value:
    """An ``alloca`` at the top of the current function, so it runs once per call."""
    entry = builder.function.entry_basic_block
    saved = builder.block
    if entry.instructions:
        builder.position_before(entry.instructions[0])
    else:
        builder.position_at_end(entry)
    slot = builder.alloca(ty, name=name)
    if align:
        slot.align = align
    builder.position_at_end(saved)
    slot.type = PTR  # llvmlite types an alloca as T*; an opaque ptr takes any load or store
    return slot
