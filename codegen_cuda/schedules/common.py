"""Scheduling idioms every GPU template uses."""

from __future__ import annotations

from ember.tir.schedule.schedule import Stage


def cooperative_fetch(stage: Stage, threads_y: int, threads_x: int) -> None:
    """Spread a staged copy over all threads of the block.

    The copy's axes are fused into one loop, whose innermost ``threads_y *
    threads_x`` iterations are bound to ``threadIdx.y``/``threadIdx.x`` with the
    same extents the compute stage uses (a thread axis has one extent per kernel);
    the remaining iterations run as a serial loop in each thread.
    """
    fused = stage.fuse(*stage.op.axis)
    rest, inner = stage.split(fused, factor=threads_y * threads_x)
    ty, tx = stage.split(inner, factor=threads_x)
    stage.bind(ty, "threadIdx.y")
    stage.bind(tx, "threadIdx.x")
    del rest
