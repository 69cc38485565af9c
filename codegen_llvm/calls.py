"""TIR calls to LLVM IR: intrinsics, extern and packed calls, addresses, lazy selects.

Used by :mod:`ember.codegen_llvm.codegen`, whose ``visit_Call`` hands every ``Call``
node here with the visitor (seen through the :class:`~.emitter.Emitter` protocol, so
this module sits below the visitor). A call becomes what its operator names: a math
intrinsic through the table in :mod:`.intrinsics` (its arguments cast or splatted to
the call's type first), an extern function through :mod:`.externs` (chosen for the
target's CPU), a packed function through :mod:`.packed`, the address of an element for
``access_ptr``, or a branch per side and a phi for ``if_then_else``. A CUDA
tensor-core intrinsic is a :class:`~ember.errors.CompileError`: the CPU cannot run it.
"""

from __future__ import annotations

from llvmlite import ir

from ember.codegen_llvm.builder_utils import I32, declare, mem_type, splat, to_index
from ember.codegen_llvm.casts import emit_cast
from ember.codegen_llvm.cpu_intrinsics import cpu_facts
from ember.codegen_llvm.emitter import Emitter
from ember.codegen_llvm.externs import emit_extern_call
from ember.codegen_llvm.intrinsics import emit_intrinsic
from ember.codegen_llvm.packed import emit_packed_call
from ember.errors import CompileError, InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E


def emit_call(cg: Emitter, e: E.Call) -> ir.Value:
    """The value of call ``e``, emitted at ``cg``'s builder."""
    if e.op is E.Intrinsic.IF_THEN_ELSE:
        return _if_then_else(cg, e)
    if e.op is E.Intrinsic.CALL_PACKED:
        return emit_packed_call(cg, e)
    if e.op is E.Intrinsic.PACK_ARRAY:
        raise InternalError(f"pack_array outside a call_packed in '{cg.func_name}'")
    if e.op in E.EXTERN_CALLS:
        return emit_extern_call(cg.builder, e, [cg.visit(a) for a in e.args[1:]], cg.cpu)
    if e.op is E.Intrinsic.PREFETCH:
        return _prefetch(cg, e)
    if e.op is E.Intrinsic.ACCESS_PTR:  # Buffer.access_ptr: the element's address
        data, offset, elem, _ = e.args
        assert isinstance(data, E.Var) and isinstance(elem, E.StringImm)
        index = to_index(cg.builder, cg.visit(offset), offset.dtype)
        return cg.builder.gep(cg.visit(data), [index], source_etype=mem_type(elem.value))
    if e.op in E.TENSOR_CORE_CALLS:
        raise CompileError(
            f"'{e.op.value}' in '{cg.func_name}' is a CUDA tensor-core intrinsic; "
            "only CUDA kernels (and the SIMT emulator) run it"
        )
    lanes = dt.lanes_of(e.dtype)
    # the arguments' type: the result's, but for isnan/clz... whose result differs
    arg_dtype = e.args[0].dtype if e.op in E.OWN_RESULT_TYPE else e.dtype
    args = []
    for a in e.args:
        v = cg.visit(a)
        if dt.element_of(a.dtype) != dt.element_of(arg_dtype) and e.op is not E.Intrinsic.LIKELY:
            v = emit_cast(cg.builder, v, a.dtype, arg_dtype)
        elif dt.lanes_of(a.dtype) < lanes:
            v = splat(cg.builder, v, lanes)
        args.append(v)
    cpu = (cg.cpu or cpu_facts()).features or frozenset()  # a named CPU's are not known
    return emit_intrinsic(
        cg.builder, e.op, args, e.dtype, fast=bool(cg.fast), arg_dtype=arg_dtype, cpu=cpu
    )


def _prefetch(cg: Emitter, e: E.Call) -> ir.Value:
    """``llvm.prefetch(address, read, locality, data cache)``, locality 3 (L1) unless the
    call names one; the TIR call's value is 0. The address is an ``access_ptr`` the
    schedule's ``prefetch`` clamped into its buffer, though a prefetch would not fault
    anyway."""
    ptr, *rest = e.args
    locality = int(rest[0].value) if rest else 3  # type: ignore[attr-defined]
    address = cg.visit(ptr)
    fn = declare(
        cg.builder.module, "llvm.prefetch.p0", ir.VoidType(), [address.type, I32, I32, I32]
    )
    cg.builder.call(
        fn, [address, ir.Constant(I32, 0), ir.Constant(I32, locality), ir.Constant(I32, 1)]
    )
    return ir.Constant(I32, 0)


def _if_then_else(cg: Emitter, e: E.Call) -> ir.Value:
    """A branch per side and a phi: the side not taken never runs (its loads may be out
    of bounds), for vectors too when the condition is one scalar. A per-lane condition
    (its sides read no memory, see vectorize_loops) selects."""
    cond, t, f = e.args
    c = cg.visit(cond)
    if dt.lanes_of(cond.dtype) > 1:
        tv, fv = cg.operands(t, f)
        return cg.builder.select(c, tv, fv)
    b = cg.builder
    with b.if_else(c) as (then, otherwise):
        with then:
            tv = cg.visit(t)
            t_end = b.block
        with otherwise:
            fv = cg.visit(f)
            f_end = b.block
    phi = b.phi(tv.type)
    phi.add_incoming(tv, t_end)
    phi.add_incoming(fv, f_end)
    return phi
