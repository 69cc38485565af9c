"""Scheduling idioms every GPU template uses."""

from __future__ import annotations

from ember.tir.schedule.schedule import Stage


def cooperative_fetch(stage: Stage, threads_y: int, threads_x: int, vector: int = 1) -> None:
    """Spread a staged copy over all threads of the block.

    The copy's axes are fused into one loop; its innermost ``vector`` elements are
    one vector access per thread (a 16-byte load for 4 floats, when the tile's row
    length keeps it aligned), the next ``threads_y * threads_x`` iterations are
    bound to ``threadIdx.y``/``threadIdx.x`` with the extents the compute stage
    uses (a thread axis has one extent per kernel), and the rest is a serial loop.
    """
    fused = stage.fuse(*stage.op.axis)
    if vector > 1:
        fused, lanes = stage.split(fused, factor=vector)
        stage.vectorize(lanes)
    rest, inner = stage.split(fused, factor=threads_y * threads_x)
    ty, tx = stage.split(inner, factor=threads_x)
    stage.bind(ty, "threadIdx.y")
    stage.bind(tx, "threadIdx.x")
    del rest
