"""The generic CPU schedule of an elementwise output (``codegen_llvm/schedules/generic.py``):
its parallel loop is the fewest leading axes that give ``PARALLEL_PARTS`` iterations, the
axes after them stay loops of their own; checked on the lowered loop nest and, on odd
shapes, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen_llvm.schedules.generic import (
    PARALLEL_MIN_WORK,
    PARALLEL_PARTS,
    schedule_generic,
)
from ember.tir import stmt as S
from ember.tir import topi
from ember.tir.functor import post_order_visit
from ember.tir.te import placeholder


def _loops(func: S.PrimFunc) -> list[tuple[str, int]]:
    """(kind, extent) of each loop, outermost first."""
    found: list[S.For] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, S.For) else None)
    return [(f.kind.value, f.extent.value) for f in reversed(found)]


@pytest.mark.parametrize(
    ("channels", "h", "w", "parallel", "inner"),
    [
        (58, 28, 28, 4 * 28, 28),  # 4 blocks < 64: the rows join them
        (1040, 7, 5, 65, 7),  # 65 blocks: the parallel loop alone
        (5, 3, 2, 1 * 3 * 2, 2),  # never 64: every outer axis, as before (and too small to fork)
    ],
)
def test_the_parallel_loop_is_the_fewest_leading_axes(channels, h, w, parallel, inner) -> None:
    """An NCHW to NCHW16c transform: one parallel loop over the leading axes that reach
    PARALLEL_PARTS iterations (or all of them), the rest plain loops; equal to numpy."""
    x = placeholder((1, channels, h, w), "float32", name="x")
    y = topi.layout_transform(x, 0, 16, channels)
    s = schedule_generic([y])
    loops = _loops(ember.lower(s, [x, y]))
    forks = -(-channels // 16) * 16 * h * w >= PARALLEL_MIN_WORK
    assert loops[0] == ("parallel" if forks else "serial", parallel)
    assert [k for k, _ in loops].count("parallel") == forks
    if parallel >= PARALLEL_PARTS:
        assert loops[1] == ("serial", inner)  # the next axis, not fused into it
    f = ember.build(schedule_generic([y]), [x, y], target="llvm")
    rng = np.random.default_rng(channels)
    a = rng.standard_normal((1, channels, h, w)).astype("float32")
    blocks = -(-channels // 16)
    got = np.full((1, blocks, h, w, 16), np.nan, "float32")
    f(a, got)
    padded = np.zeros((1, blocks * 16, h, w), "float32")
    padded[:, :channels] = a
    np.testing.assert_array_equal(got, padded.reshape(1, blocks, 16, h, w).transpose(0, 1, 3, 4, 2))
