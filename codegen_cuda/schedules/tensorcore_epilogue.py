"""The tensor-core GEMM's group schedule: the anchor of the CUDA strategy's GEMM templates.

``codegen_cuda/strategy.py`` gives fp16/bf16 GEMM nodes the stages of
``matmul_tensorcore.cuda`` (``AP``, ``BP``, ``CF``, ``CS`` and a cast tagged :data:`TAG`),
paired there with :func:`tensorcore_stages` as their schedule. Where the kernel's group has
one output, of the GEMM's shape, that reads the GEMM only elementwise (every read of it,
and of the stages between, at the output's own indices), :func:`tensorcore_stages` inlines
the stages between into that output, which becomes the template's epilogue (bias,
activation, cast), and applies
:func:`~ember.codegen_cuda.schedules.matmul_tensorcore.schedule_tensorcore_gemm`.
A GEMM tagged ``layout="nchw"`` (the NCHW convolution of
``tir/topi/conv_gemm.py``) is scheduled as its own kernel's ``[M, O]``
output (a device workspace), its bias the epilogue; the NCHW output and the group's tail
(activation, residual) are left to the generic schedule, a second kernel.
Otherwise (a transposed or reduced tail, several outputs) it leaves the stages to the
generic schedule (``codegen_cuda/schedules/generic.py``), which computes the same values
slowly.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_cuda.schedules.matmul_tensorcore import schedule_tensorcore_gemm
from ember.tir.schedule.schedule import Schedule
from ember.tir.te.reads import elementwise_tail
from ember.tir.te.tensor import ComputeOp

TAG = "tensorcore_gemm"  # the cast stage of the strategy's tensor-core GEMM compute


def _producer_ops(t: Any) -> list[Any]:
    """Every op ``t`` depends on (not ``t.op`` itself)."""
    seen: dict[int, Any] = {}
    stack = [t.op]
    while stack:
        for p in getattr(stack.pop(), "input_tensors", ()):
            if id(p.op) not in seen:
                seen[id(p.op)] = p.op
                stack.append(p.op)
    return list(seen.values())


def tensorcore_stages(s: Schedule, outputs: list[Any]) -> set[int]:
    """Schedule a tensor-core GEMM with its group's tail as the epilogue, if there is one
    and the tail allows it (see the module docstring); the ids of the ops scheduled."""
    gemms = [st.op for st in s.stages if getattr(st.op, "tag", "") == TAG]
    if len(gemms) != 1 or len(outputs) != 1:
        return set()
    gemm, out = gemms[0].output(0), outputs[0]
    ops = _producer_ops(out)
    cs = gemm.op.input_tensors[0]
    cf = cs.op.input_tensors[0]
    named = {t.op.name: t for t in cf.op.input_tensors}
    ap, bp = named["AP"], named["BP"]
    if [op for op in ops if getattr(op, "reduce_axis", ())] != [cf.op]:
        return set()
    attrs = dict(gemm.op.attrs)
    knobs = dict(attrs["knobs"])
    if attrs.get("layout") == "nchw":  # the NCHW conv: its [M, O] GEMM is a kernel of its own
        schedule_tensorcore_gemm(s, ap, bp, cf, cs, gemm, knobs, True, attrs["vectors"])
        return {id(t.op) for t in (ap, bp, cf, cs, gemm)}
    if not elementwise_tail(out, gemm):
        return set()
    keep = {id(t.op) for t in (ap, bp, cf, cs, out)}
    for st in s.stages:
        if isinstance(st.op, ComputeOp) and id(st.op) not in keep:
            st.compute_inline()
    schedule_tensorcore_gemm(s, ap, bp, cf, cs, out, knobs, attrs["trans_b"], attrs["vectors"])
    return {id(st.op) for st in s.stages if isinstance(st.op, ComputeOp)}
