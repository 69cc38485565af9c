"""``call_packed`` in CPU code: a call back into Python's global function registry.

Used by :mod:`ember.codegen_llvm.codegen` for ``Call`` nodes of ``CALL_PACKED``. The
generated code fills an array of 64-bit slots on its stack (an array argument: its
data pointer then each dimension; an integer: its value; a float: a double's bits)
and calls the C symbol ``ember_call_packed(name, signature, slots, count)``, where
``signature`` is a constant string saying what each slot group holds. That symbol
is a ctypes callback, registered with LLVM's JIT symbol table before the module is
compiled, that rebuilds numpy views and scalars from the slots and calls
:func:`ember.runtime.registry.call_packed_func`. An exception never crosses the C frames: the
callback keeps it (``report_pending``) and returns a nonzero status, the generated
function returns ``PACKED_CALL_FAILED`` at once, and the module's status check raises
the kept error — a ``PackedFuncError`` chained to the cause — at the Python call site.
An exported shared library cannot call back (the symbol lives in this process's JIT).
"""

from __future__ import annotations

import ctypes
import functools
import struct
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from ember.codegen_llvm.builder_utils import I8, I32, I64, PTR, declare
from ember.codegen_llvm.casts import emit_cast
from ember.codegen_llvm.emitter import Emitter
from ember.runtime.module import PACKED_CALL_FAILED
from ember.runtime.registry import call_packed_func, report_pending
from ember.tir import dtype as dt
from ember.tir import expr as E

TRAMPOLINE = "ember_call_packed"
_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int32
)


def _trampoline(name: bytes, signature: bytes, slots: int, count: int) -> int:
    try:
        values = (ctypes.c_int64 * max(count, 1)).from_address(slots)
        call_packed_func(name.decode(), decode_arguments(signature.decode(), values))
        return 0
    except BaseException as e:  # noqa: BLE001 - nothing may unwind through C frames
        report_pending(e)
        return 1


@functools.cache
def install_trampoline() -> Any:
    """Make ``ember_call_packed`` resolvable by JIT-compiled code (once per process)."""
    callback = _CALLBACK(_trampoline)
    llvm.add_symbol(TRAMPOLINE, ctypes.cast(callback, ctypes.c_void_p).value)
    return callback  # kept alive by the cache: the symbol points into it


def decode_arguments(signature: str, slots: Any) -> list[Any]:
    """numpy views and scalars from the slots, as ``signature`` describes them."""
    out: list[Any] = []
    k = 0
    for item in signature.split(";") if signature else []:
        kind, rest = item[0], item[1:]
        if kind == "a":
            dtype, ndim = rest.rsplit("/", 1)
            ptr, dims = slots[k], tuple(int(d) for d in slots[k + 1 : k + 1 + int(ndim)])
            k += 1 + int(ndim)
            npdt = np.dtype(dt.numpy_dtype(dtype))
            count = int(np.prod(dims)) if dims else 1
            if count <= 0 or not ptr:
                out.append(np.empty(dims, npdt))
                continue
            raw = (ctypes.c_char * (count * npdt.itemsize)).from_address(ptr)
            out.append(np.frombuffer(raw, npdt).reshape(dims))
        elif kind == "f":
            (value,) = struct.unpack("<d", struct.pack("<q", slots[k]))
            out.append(np.dtype(dt.numpy_dtype(rest)).type(value))
            k += 1
        else:
            out.append(np.dtype(dt.numpy_dtype(rest)).type(slots[k]))
            k += 1
    return out


def emit_packed_call(cg: Emitter, e: E.Call) -> ir.Value:
    """Fill the slots, call the trampoline, return ``PACKED_CALL_FAILED`` if it failed."""
    install_trampoline()
    b = cg.builder
    name = e.args[0]
    assert isinstance(name, E.StringImm)
    parts: list[str] = []
    values: list[ir.Value] = []
    for a in e.args[1:]:
        if isinstance(a, E.Call) and a.op is E.Intrinsic.PACK_ARRAY:
            data, dtype, *shape = a.args
            assert isinstance(dtype, E.StringImm)
            parts.append(f"a{dtype.value}/{len(shape)}")
            values.append(b.ptrtoint(cg.visit(data), I64))
            values += [emit_cast(b, cg.visit(d), d.dtype, "int64") for d in shape]
        elif dt.is_float(a.dtype):
            parts.append(f"f{a.dtype}")
            wide = emit_cast(b, cg.visit(a), a.dtype, "float64")
            values.append(b.bitcast(wide, I64))
        else:
            parts.append(f"i{a.dtype}")
            values.append(emit_cast(b, cg.visit(a), a.dtype, "int64"))
    slots = _entry_alloca(cg, ir.ArrayType(I64, max(len(values), 1)))
    for i, v in enumerate(values):
        b.store(v, b.gep(slots, [ir.Constant(I32, 0), ir.Constant(I32, i)]))
    fn = declare(b.module, TRAMPOLINE, I32, [PTR, PTR, PTR, I32])
    rc = b.call(
        fn,
        [
            _cstring(b, name.value),
            _cstring(b, ";".join(parts)),
            b.bitcast(slots, PTR),
            ir.Constant(I32, len(values)),
        ],
    )
    with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
        cg.emit_error_return(ir.Constant(I32, PACKED_CALL_FAILED))
    return rc


def _entry_alloca(cg: Emitter, ty: ir.Type) -> ir.Value:
    """Stack space in the entry block: a call inside a loop reuses it."""
    b = cg.builder
    entry = cg.state.fn.entry_basic_block
    eb = ir.IRBuilder(entry)
    eb.position_at_start(entry)
    slot = eb.alloca(ty)
    if b.block is entry:  # the insertion index moved by one: append after it again
        b.position_at_end(entry)
    return slot


def _cstring(b: ir.IRBuilder, text: str) -> ir.Value:
    data = bytearray(text.encode() + b"\0")
    ty = ir.ArrayType(I8, len(data))
    g = ir.GlobalVariable(b.module, ty, name=b.module.get_unique_name("packed_str"))
    g.global_constant = True
    g.linkage = "private"
    g.initializer = ir.Constant(ty, data)
    return b.bitcast(g, PTR)
