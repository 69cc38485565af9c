"""Scheduling idioms every GPU template uses."""

from __future__ import annotations

import math
from typing import Any

from ember.tir.schedule.schedule import Stage

# CUDA's grid limits (every architecture since sm_30): x up to 2^31 - 1, y and z up to 65535
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535


def bind_blocks(stage: Stage, axes: list[Any], extents: list[int]) -> Any:
    """Bind a block tile nest (``axes`` outermost first, e.g. ``[*batch, by, bx]``, with their
    trip counts) to the grid, within CUDA's grid limits; gives the innermost block axis,
    where the block's stages attach.

    The usual layout is the last axis on ``blockIdx.x``, the one before on ``y`` and the
    rest (fused) on ``z``. When ``y`` or ``z`` would pass 65535 (a batched MatMul with
    70,000 batches) every block axis is fused onto ``x`` instead, whose limit is 2^31 - 1:
    a template, not the user, must keep its grid legal."""
    *outer, last = axes
    batch, middle = (outer[:-1], outer[-1]) if outer else ([], None)
    z = math.prod(extents[: len(batch)]) if batch else 1
    y = extents[len(batch)] if middle is not None else 1
    if y <= MAX_GRID_YZ and z <= MAX_GRID_YZ:
        if batch:
            stage.bind(stage.fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
        if middle is not None:
            stage.bind(middle, "blockIdx.y")
        stage.bind(last, "blockIdx.x")
        return last
    fused = stage.fuse(*axes)
    stage.bind(fused, "blockIdx.x")
    return fused


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
