"""Loads, stores and allocations: how TIR buffer accesses become LLVM memory operations.

Used by :mod:`ember.codegen_llvm.codegen`. After ``flatten_buffers`` every access
has one index. A scalar index reads or writes one element; an index that is an
affine vector with stride 1 (a ``Ramp``, possibly written as broadcast plus
ramp) is one vector load or store; a load with a small constant stride (2 to 4, the
reads of a strided convolution or a phase split) is one masked contiguous load of
the lanes' span and a shuffle that keeps every stride-th element, which LLVM turns
into a few permutes rather than one load per lane; any other vector index is a
gather or scatter done lane by lane. A buffer is known by its ``data`` variable, bound
to a function argument or to the pointer an ``Allocate`` made. Allocations up
to 64 KiB of constant size live on the stack of the function (allocated once,
in its entry block, 64-byte aligned); larger or symbolic ones come from
``aligned_alloc`` and are freed at the end of their scope or on an error exit.

Inside a ``nontemporal_stores`` attribute (:data:`NONTEMPORAL`, its node a buffer's
data variable) a contiguous vector store to that buffer carries LLVM's ``!nontemporal``
hint: x86 then writes whole cache lines straight to memory without first reading each
into the cache (a copy whose output is not read again soon moves a third less). Where
the address is not known aligned to the vector, LLVM splits the store into 8-byte
non-temporal ones.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ember.codegen_llvm.builder_utils import (
    I32,
    I64,
    PTR,
    declare,
    entry_alloca,
    intrinsic_suffix,
    mem_type,
    to_index,
)
from ember.codegen_llvm.casts import emit_cast, from_memory, to_memory
from ember.codegen_llvm.emitter import Emitter
from ember.errors import InternalError
from ember.runtime.module import OUT_OF_MEMORY  # the status returned when aligned_alloc fails
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer

NONTEMPORAL = "nontemporal_stores"  # AttrStmt key: stores to its node's buffer bypass caches

STACK_LIMIT_BYTES = 64 * 1024
ALLOC_ALIGN = 64


def as_ramp(index: E.PrimExpr) -> tuple[E.PrimExpr, int] | None:
    """``(base, stride)`` if the vector ``index`` is ``base + stride * lane``, stride constant."""
    if isinstance(index, E.Ramp):
        return (index.base, index.stride.value) if isinstance(index.stride, E.IntImm) else None
    if isinstance(index, E.Broadcast):
        return index.value, 0
    if isinstance(index, E.BinOp) and index.op in (E.BinaryOp.ADD, E.BinaryOp.SUB):
        a, b = as_ramp(index.a), as_ramp(index.b)
        if a is None or b is None:
            return None
        scalar = dt.element_of(index.dtype)
        if index.op is E.BinaryOp.ADD:
            return E.BinOp(scalar, E.BinaryOp.ADD, a[0], b[0]), a[1] + b[1]
        return E.BinOp(scalar, E.BinaryOp.SUB, a[0], b[0]), a[1] - b[1]
    if isinstance(index, E.BinOp) and index.op is E.BinaryOp.MUL:
        a = as_ramp(index.a)
        c = index.b.value if isinstance(index.b, E.Broadcast) else None
        if a is not None and isinstance(c, E.IntImm):
            return E.BinOp(dt.element_of(index.dtype), E.BinaryOp.MUL, a[0], c), a[1] * c.value
    return None


def known_multiple(e: E.PrimExpr) -> int:
    """A number ``e`` is always a multiple of (0: ``e`` is the constant 0)."""
    if isinstance(e, E.IntImm):
        return abs(e.value)
    if isinstance(e, E.BinOp) and e.op is E.BinaryOp.MUL:
        return known_multiple(e.a) * known_multiple(e.b)
    if isinstance(e, E.BinOp) and e.op in (E.BinaryOp.ADD, E.BinaryOp.SUB):
        return math.gcd(known_multiple(e.a), known_multiple(e.b))
    return 1


def _alignment(cg: Emitter, buf: Buffer, base: E.PrimExpr) -> int:
    """Bytes the address ``&buf[base]`` is known to be aligned to."""
    elem = dt.bytes_of(buf.dtype)
    base_align = cg.state.align.get(buf.data, elem)
    mult = known_multiple(base) * elem
    if mult == 0:
        return base_align
    return max(1, min(base_align, mult & -mult))


def data_pointer(cg: Emitter, buf: Buffer) -> ir.Value:
    """The LLVM pointer a buffer's accesses go through; an unbound buffer is an internal error."""
    ptr = cg.state.vars.get(buf.data)
    if ptr is None:
        raise InternalError(
            f"buffer '{buf.name}' is accessed in '{cg.func_name}' but is neither a parameter "
            "nor allocated in scope"
        )
    return ptr


def _contiguous_base(index: E.PrimExpr) -> E.PrimExpr | None:
    """The scalar first index of a contiguous access, or None for a gather/scatter."""
    if dt.lanes_of(index.dtype) == 1:
        return index
    ramp = as_ramp(index)
    return ramp[0] if ramp is not None and ramp[1] == 1 else None


MAX_SHUFFLED_STRIDE = 4  # wider strides waste most of the loaded vector; gather instead
MAX_SHUFFLED_SPAN = 128  # elements in the contiguous vector a strided load reads


def _strided(index: E.PrimExpr) -> tuple[E.PrimExpr, int] | None:
    """``(base, stride)`` of a vector index read as one masked load plus a shuffle."""
    ramp = as_ramp(index)
    if ramp is None or not 2 <= ramp[1] <= MAX_SHUFFLED_STRIDE:
        return None
    lanes = dt.lanes_of(index.dtype)
    return ramp if lanes * ramp[1] <= MAX_SHUFFLED_SPAN else None


def _emit_strided_load(
    cg: Emitter, ptr: ir.Value, unit: ir.Type, e: E.BufferLoad, base: E.PrimExpr, stride: int
) -> ir.Value:
    """Lanes ``base + stride * i``: the ``stride * lanes`` elements from ``base`` loaded
    under a mask that stops at the last lane's element (so nothing past it is read,
    and the load cannot fault), then every ``stride``-th one kept."""
    b = cg.builder
    lanes = dt.lanes_of(e.dtype)
    span = stride * lanes
    elem = mem_type(dt.element_of(e.dtype))
    wide = ir.VectorType(elem, span)
    bit = ir.IntType(1)
    mask = ir.Constant(
        ir.VectorType(bit, span),
        [ir.Constant(bit, int(i <= stride * (lanes - 1))) for i in range(span)],
    )
    masked_load = declare(
        b.module, f"llvm.masked.load.{intrinsic_suffix(wide)}.p0", wide, [PTR, I32, mask.type, wide]
    )
    addr = b.gep(ptr, [to_index(b, cg.visit(base), base.dtype)], source_etype=unit, inbounds=True)
    align = dt.bytes_of(dt.element_of(e.buffer.dtype))
    raw = b.call(
        masked_load, [addr, ir.Constant(I32, align), mask, ir.Constant(wide, ir.Undefined)]
    )
    picked = b.shuffle_vector(
        raw,
        ir.Constant(wide, ir.Undefined),
        ir.Constant(ir.VectorType(I32, lanes), [stride * i for i in range(lanes)]),
    )
    return from_memory(b, picked, e.dtype)


def _lane_addresses(cg: Emitter, ptr: ir.Value, unit: ir.Type, index: E.PrimExpr) -> list:
    b = cg.builder
    vec = to_index(b, cg.visit(index), index.dtype)
    lanes = dt.lanes_of(index.dtype)
    return [
        b.gep(ptr, [b.extract_element(vec, ir.Constant(I32, i))], source_etype=unit, inbounds=True)
        for i in range(lanes)
    ]


def emit_load(cg: Emitter, e: E.BufferLoad) -> ir.Value:
    """LLVM IR for a buffer load, scalar or vector, through the buffer's data pointer."""
    b = cg.builder
    buf = e.buffer
    (index,) = cg.single_index(buf, e.indices)
    ptr = data_pointer(cg, buf)
    unit = mem_type(buf.dtype)
    base = _contiguous_base(index)
    if base is not None:
        addr = b.gep(
            ptr, [to_index(b, cg.visit(base), base.dtype)], source_etype=unit, inbounds=True
        )
        raw = b.load(addr, typ=mem_type(e.dtype), align=_alignment(cg, buf, base))
        return from_memory(b, raw, e.dtype)
    strided = _strided(index)
    if strided is not None:
        return _emit_strided_load(cg, ptr, unit, e, *strided)
    elem = mem_type(dt.element_of(e.dtype))
    align = dt.bytes_of(dt.element_of(buf.dtype))
    out: ir.Value = ir.Constant(mem_type(e.dtype), ir.Undefined)
    for i, addr in enumerate(_lane_addresses(cg, ptr, unit, index)):
        out = b.insert_element(out, b.load(addr, typ=elem, align=align), ir.Constant(I32, i))
    return from_memory(b, out, e.dtype)


def emit_store(cg: Emitter, s: S.BufferStore) -> None:
    """LLVM IR for a buffer store, scalar or vector, through the buffer's data pointer."""
    b = cg.builder
    buf = s.buffer
    (index,) = cg.single_index(buf, s.indices)
    ptr = data_pointer(cg, buf)
    unit = mem_type(buf.dtype)
    value = to_memory(b, cg.visit(s.value), s.value.dtype)
    base = _contiguous_base(index)
    if base is not None:
        addr = b.gep(
            ptr, [to_index(b, cg.visit(base), base.dtype)], source_etype=unit, inbounds=True
        )
        store = b.store(value, addr, align=_alignment(cg, buf, base))
        if buf.data in cg.state.nontemporal and dt.lanes_of(s.value.dtype) > 1:
            store.set_metadata("nontemporal", cg.module.add_metadata([ir.Constant(I32, 1)]))
        return
    align = dt.bytes_of(dt.element_of(buf.dtype))
    for i, addr in enumerate(_lane_addresses(cg, ptr, unit, index)):
        b.store(b.extract_element(value, ir.Constant(I32, i)), addr, align=align)


def _const_size(buf: Buffer) -> int | None:
    size = 1
    for extent in buf.shape:
        if not isinstance(extent, E.IntImm):
            return None
        size *= extent.value
    return size


def _heap_bytes(cg: Emitter, buf: Buffer) -> ir.Value:
    b = cg.builder
    count: ir.Value = ir.Constant(I64, 1)
    for extent in buf.shape:
        count = b.mul(count, emit_cast(b, cg.visit(extent), extent.dtype, "int64"))
    nbytes = b.mul(count, ir.Constant(I64, dt.bytes_of(buf.dtype)))
    # aligned_alloc wants a multiple of the alignment, and at least one block
    rounded = b.and_(
        b.add(nbytes, ir.Constant(I64, ALLOC_ALIGN - 1)), ir.Constant(I64, -ALLOC_ALIGN)
    )
    return b.select(
        b.icmp_signed("<", rounded, ir.Constant(I64, ALLOC_ALIGN)),
        ir.Constant(I64, ALLOC_ALIGN),
        rounded,
    )


def emit_allocate(cg: Emitter, s: S.Allocate) -> None:
    """LLVM IR for an allocation: on the stack when small and constant-sized, else on the heap."""
    buf = s.buffer
    b = cg.builder
    size = _const_size(buf)
    heap = size is None or size * dt.bytes_of(buf.dtype) > STACK_LIMIT_BYTES
    if not heap:
        assert size is not None
        arr = ir.ArrayType(mem_type(buf.dtype), max(size, 1))
        ptr = entry_alloca(b, arr, name=buf.name, align=ALLOC_ALIGN)
    else:
        alloc = declare(b.module, "aligned_alloc", PTR, [I64, I64])
        ptr = b.call(alloc, [ir.Constant(I64, ALLOC_ALIGN), _heap_bytes(cg, buf)], name=buf.name)
        with b.if_then(b.icmp_unsigned("==", ptr, ir.Constant(PTR, None)), likely=False):
            cg.emit_error_return(ir.Constant(I32, OUT_OF_MEMORY))
        cg.state.heap.append(ptr)
    with cg.bind(buf.data, ptr, align=ALLOC_ALIGN):
        cg.visit(s.body)
    if heap:
        cg.state.heap.pop()
        if not b.block.is_terminated:
            b.call(declare(b.module, "free", ir.VoidType(), [PTR]), [ptr])


__all__ = ["as_ramp", "emit_allocate", "emit_load", "emit_store", "known_multiple"]
