"""The CUDA generic schedule of a graph kernel, and its group schedule around the strategy
templates' anchors.

A kernel's stages get this schedule unless a strategy template's anchor (the tensor-core
GEMM's, ``codegen_cuda/schedules/tensorcore_epilogue.py``) scheduled them: producers
without a reduction are inlined into their consumers; every stage that stays fuses its
axes and splits them by 256 onto blockIdx.x / threadIdx.x, one thread per output element;
a reduction to a scalar splits its reduction over the 256 threads of one block (a
cross-thread reduction), and ``ember.graph.kernels`` gives a 0-d output an axis of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te.operation import thread_axis
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tuner.strategy import Implementation, inline_injective, output_ops, schedule_anchors

THREADS = 256


def schedule_group(outputs: list[Tensor], anchors: Sequence[Implementation] = ()) -> Schedule:
    """The schedule of a kernel computing ``outputs``: each strategy implementation the
    group's nodes took (``anchors``) schedules its template's stages, the generic
    schedule the rest."""
    s = create_schedule(output_ops(outputs))
    for st in inline_injective(s, outputs, schedule_anchors(s, outputs, anchors)):
        op = cast(ComputeOp, st.op)  # inline_injective returns compute stages only
        axes = list(op.axis)
        if not axes:  # a reduction to a scalar: one block's threads reduce together
            red = list(op.reduce_axis)
            if red:
                _, tx = st.split(st.fuse(*red) if len(red) > 1 else red[0], factor=THREADS)
                st.bind(tx, thread_axis("threadIdx.x"))
            continue
        fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
        bx, tx = st.split(fused, factor=THREADS)
        st.bind(bx, "blockIdx.x")
        st.bind(tx, "threadIdx.x")
    return s


def schedule_generic(outputs: list[Tensor]) -> Schedule:
    """The generic CUDA schedule of a kernel computing ``outputs`` (no template anchors)."""
    return schedule_group(outputs)
