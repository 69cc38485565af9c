"""Which tensors a compute reads, and where: the questions schedules ask before fusing.

:func:`producer_loads` lists a compute's tensor reads. :func:`elementwise_tail` decides
whether a group's output is an elementwise function of a template's anchor (a GEMM), so
that the template may take the output's loops and apply the tail (bias, residual,
activation, cast) to each tile as it stores it: the CPU's packed GEMM
(``codegen_llvm/schedules/generic.py``) and the CUDA tensor-core GEMM
(``codegen_cuda/schedules/tensorcore_epilogue.py``) both ask it.
"""

from __future__ import annotations

from typing import Any

from ember.tir import expr as E
from ember.tir.functor import post_order_visit
from ember.tir.te.tensor import ComputeOp, Tensor


def producer_loads(op: ComputeOp) -> list[E.ProducerLoad]:
    """Every tensor read in ``op``'s bodies, each distinct load node once."""
    found: list[E.ProducerLoad] = []

    def visit(node: Any) -> None:
        if isinstance(node, E.ProducerLoad):
            found.append(node)

    for body in op.bodies:
        post_order_visit(body, visit, once=True)
    return found


def elementwise_tail(out: Tensor, anchor: Tensor) -> bool:
    """Whether ``out`` is an elementwise function of ``anchor`` (trivially so when it is
    ``anchor`` itself): every op on a path from ``out`` down to ``anchor`` is a one-output compute
    without a reduction, of ``anchor``'s static shape, that reads ``anchor`` and the ops
    between only at its own indices, in order (index 0 along a dimension of one counts,
    as a broadcast reads a ``(1, M, N)`` operand). Inputs off those paths (a bias, a
    residual) may be read at any index."""
    on_path: dict[int, Any] = {}  # id -> op, for the ops that depend on the anchor
    decided: set[int] = set()

    def depends(op: Any) -> bool:
        if op is anchor.op:
            return True
        if id(op) not in decided:
            decided.add(id(op))
            # a list, not any(): every input is decided, so none on a path is missed
            if any([depends(t.op) for t in getattr(op, "input_tensors", ())]):
                on_path[id(op)] = op
        return id(op) in on_path

    if out.op is anchor.op:
        return True
    if not depends(out.op):
        return False
    shape = _static(anchor)
    for op in on_path.values():
        if not isinstance(op, ComputeOp) or op.reduce_axis or op.num_outputs != 1:
            return False
        if shape is None or _static(op.output(0)) != shape:
            return False
        axes = [iv.var for iv in op.axis]
        for load in producer_loads(op):
            if load.producer.op is anchor.op or id(load.producer.op) in on_path:
                dims = load.producer.shape
                if len(load.indices) != len(axes) or not all(
                    _same_index(i, a, d) for i, a, d in zip(load.indices, axes, dims)
                ):
                    return False
    return True


def _same_index(index: Any, axis: Any, dim: Any) -> bool:
    """``index`` reads ``axis``'s element: the axis itself, or 0 along a dimension of one."""
    return index is axis or (_const(dim) == 1 and _const(index) == 0)


def _static(t: Tensor) -> tuple[int, ...] | None:
    dims = tuple(_const(d) for d in t.shape)
    return None if None in dims else dims  # type: ignore[return-value]


def _const(x: Any) -> int | None:
    return int(x.value) if isinstance(x, E.IntImm) else None
