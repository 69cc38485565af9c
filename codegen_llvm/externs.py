"""Calls of C functions by name (``call_pure_extern`` / ``call_extern``) in LLVM IR.

Used by :mod:`ember.codegen_llvm.codegen` for ``Call`` nodes of
:data:`ember.tir.expr.EXTERN_CALLS`. The function is declared with the types of
the call (the arguments' register types, the result's) and resolved when the
module is JIT-compiled, from the process and the C math library, which is loaded
here so that ``expf``, ``exp10``... are found whatever Python itself links. A
name that neither defines is a :class:`CompileError` at build time: calling an
unresolved symbol would otherwise abort the process when the module loads. A name
that starts with ``llvm.`` is an LLVM intrinsic (``call_llvm_pure_intrin``), checked
against the target's CPU first (:mod:`ember.codegen_llvm.cpu_intrinsics`), and
``reinterpret`` is a bitcast.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from ember.codegen_llvm.builder_utils import declare, reg_type
from ember.codegen_llvm.cpu_intrinsics import CpuFacts, cpu_facts, expansion_for
from ember.errors import CompileError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.op import REINTERPRET_NAME


@functools.cache
def _load_libm() -> None:
    path = ctypes.util.find_library("m")
    if path:
        try:
            llvm.load_library_permanently(path)
        except RuntimeError:
            pass  # then only what the process already has resolves


def symbol_exists(name: str) -> bool:
    """Whether JIT code can call the C function ``name``."""
    _load_libm()
    return llvm.address_of_symbol(name) is not None or hasattr(ctypes.CDLL(None), name)


def emit_extern_call(
    b: ir.IRBuilder, e: E.Call, args: Sequence[ir.Value], cpu: CpuFacts | None = None
) -> ir.Value:
    """``name(args)`` for the call ``e`` whose first argument is the name; an LLVM
    intrinsic is checked against the target's ``cpu`` (None: the host's) first."""
    name = e.args[0]
    assert isinstance(name, E.StringImm)
    if name.value == REINTERPRET_NAME:
        return b.bitcast(args[0], reg_type(e.dtype))
    if name.value.startswith("llvm."):  # an LLVM intrinsic: declared by name, no symbol
        expand = expansion_for(name.value, cpu or cpu_facts())
        if expand is not None:  # the target lacks its instruction: LLVM would abort
            return expand(b, reg_type(e.dtype), args)
        fn = declare(b.module, name.value, reg_type(e.dtype), [a.type for a in args])
        return b.call(fn, list(args))
    vectors = [a for a in e.args[1:] if dt.lanes_of(a.dtype) > 1]
    if vectors:  # a C function has no vector parameters Ember could match (CUDA's __dp4a has)
        raise CompileError(
            f"{e.op.value}: '{name.value}' is given a {vectors[0].dtype} argument; CPU code "
            "calls C functions with scalars only, so pass the lanes one by one"
        )
    if not symbol_exists(name.value):
        raise CompileError(
            f"{e.op.value}: no C function '{name.value}' is defined in this process or the C "
            "math library, so CPU code cannot call it; check the name (float versions of "
            "libm functions end in 'f': 'expf')"
        )
    fn = declare(b.module, name.value, reg_type(e.dtype), [a.type for a in args])
    if list(fn.function_type.args) != [a.type for a in args]:
        raise CompileError(
            f"{e.op.value}: '{name.value}' is called with different argument types in one "
            f"module ({fn.function_type} and {[str(a.type) for a in args]})"
        )
    return b.call(fn, list(args))
