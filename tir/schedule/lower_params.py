"""The buffers and parameters of a lowered function, as ``schedule_to_primfunc`` declares them.

:mod:`ember.tir.schedule.lower` builds the loop nests; it asks this module how a tensor
becomes a buffer and what the PrimFunc's signature is. A tensor of a vector dtype
(``float32x4``) is a buffer of its elements with one more, innermost lane dimension; a
multi-output compute, extern or scan has a buffer per output. A float scalar argument
becomes a 0-d buffer (native functions take only integer sizes by value), and the
variables that a split divides by are listed so that the runtime refuses a call where
one of them is below 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.functor import substitute
from ember.tir.schedule.relations import Split
from ember.tir.schedule.schedule import Schedule, Stage
from ember.tir.te.extern import ExternOp
from ember.tir.te.scan import ScanOp
from ember.tir.te.tensor import ComputeOp


def num_outputs(st: Stage) -> int:
    """Outputs with a buffer each: those of a multi-output compute, extern or scan."""
    return st.op.num_outputs if isinstance(st.op, (ComputeOp, ExternOp, ScanOp)) else 1


def decl_lanes(shape: Sequence[E.ExprLike], dtype: str, name: str, scope: str = "global") -> Buffer:
    """A buffer for a tensor of ``dtype``; a vector dtype (``float32x4``, TVM allows it in
    placeholders and computes) is stored as its elements with one more, innermost
    dimension of the lane count, so every backend sees an ordinary vector access."""
    lanes = dt.lanes_of(dtype)
    if lanes == 1:
        return decl_buffer(tuple(shape), dtype, name=name, scope=scope)
    return decl_buffer((*shape, lanes), dt.element_of(dtype), name=name, scope=scope)


def scratch_buffer(st: Stage, shape: tuple[int | E.PrimExpr, ...], k: int = 0) -> Buffer:
    """The buffer of output ``k`` of a stage that is no argument, of ``shape`` (the region
    its consumers read, from bound inference), padded per dim as ``storage_align`` asks."""
    strides: tuple[int, ...] = ()
    if st.storage_align_:
        acc, out = 1, []
        for d in reversed(range(len(shape))):
            if d in st.storage_align_ and d != len(shape) - 1:
                factor, offset = st.storage_align_[d]
                acc = acc + ((offset - acc) % factor)
            out.append(acc)
            acc *= shape[d]
        strides = tuple(reversed(out))
    dtype = st.op.output_dtype(k)
    name = st.op.output(k).name if num_outputs(st) > 1 else st.name
    if dt.lanes_of(dtype) > 1 and not strides:
        return decl_lanes(shape, dtype, name, st.scope)
    return decl_buffer(shape, dtype, name=name, scope=st.scope, strides=strides)


def box_float_scalars(
    params: Sequence[Buffer | E.Var], body: S.Stmt
) -> tuple[tuple[Buffer | E.Var, ...], S.Stmt]:
    """A float scalar argument (TVM's ``bias = te.var("bias", dtype="float32")`` in its
    extern_op tutorial) as a 0-d buffer read where the variable was: native functions take
    sizes by value as integers only, and the runtime accepts a Python float for a 0-d
    input (see ``ember.runtime.signature``)."""
    out: list[Buffer | E.Var] = []
    vmap: dict[E.Var, E.PrimExpr] = {}
    for p in params:
        if isinstance(p, E.Var) and dt.is_float(p.dtype):
            buf = decl_buffer((), p.dtype, name=p.name)
            vmap[p] = E.BufferLoad(p.dtype, buf, ())
            out.append(buf)
        else:
            out.append(p)
    return tuple(out), substitute(body, vmap) if vmap else body


def symbolic_split_amounts(sch: Schedule) -> tuple[E.Var, ...]:
    """Variables that are a split's factor or part count: loops divide by them."""
    out: list[E.Var] = []
    for st in sch.stages:
        for rel in st.relations:
            for amount in (rel.factor, rel.nparts) if isinstance(rel, Split) else ():
                if isinstance(amount, E.Var) and amount not in out:
                    out.append(amount)
    return tuple(out)
