"""The edge lanes of a versioned vector loop stay a loop for LLVM's loop vectorizer.

``version_lane_guards`` leaves a GEMM tile's partial column panel (150 columns in 16-lane
panels) as a serial loop of guarded lanes. LLVM's full unroll, which runs before its
loop vectorizer, used to turn each such loop of an unrolled micro-kernel into guarded
scalar statements: a 13x40x8 GEMM tile compiled to 681 scalar multiply-adds and 1.6 MB
of optimised IR in 9 s. Marked ``llvm.loop.unroll.disable``, the loop reaches the loop
vectorizer, which writes it with masked vector loads and stores (see
:mod:`ember.codegen_llvm.loop_hints`).
"""

from __future__ import annotations

import numpy as np

import ember
from ember.codegen_llvm.loop_hints import (
    NO_LOOP_VECTORIZE,
    NO_UNROLL,
    loop_hints,
    minmax_reduction_loops,
)
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.transform.vectorize_loops import LANE_EDGE
from tests.codegen_llvm.schedules.template_helpers import config_with, task_of

EDGE = ((LANE_EDGE, True),)


def test_edge_lanes_are_not_unrolled_unless_they_hold_a_min_max_reduction():
    A, B = decl_buffer((64,), "float32", "A"), decl_buffer((8,), "float32", "B")
    c, i = E.Var("c"), E.Var("i")
    scale = S.For(c, E.const(0), E.const(16), S.ForKind.SERIAL,
                  S.BufferStore(A, A[c] * 2.0, (c,)), "", EDGE)  # fmt: skip
    assert loop_hints(scale, set()) == (NO_UNROLL,)
    plain = S.For(c, E.const(0), E.const(16), S.ForKind.SERIAL, S.BufferStore(A, A[c] * 2.0, (c,)))
    assert loop_hints(plain, set()) == ()
    # a float max accumulator keeps LLVM's loop vectorizer off, as before (it aborts there)
    acc = S.BufferStore(B, E.max_(B[i], A[i * 8 + c]), (i,))
    lanes = S.For(c, E.const(0), E.const(8), S.ForKind.SERIAL, acc, "", EDGE)
    found = minmax_reduction_loops(lanes)
    assert loop_hints(lanes, found) == (NO_LOOP_VECTORIZE,)


def test_a_gemm_edge_panel_compiles_to_masked_vectors_and_matches_numpy():
    """13x40x8 in 6-row tiles of two 16-lane panels: the second panel of the second
    column block holds 8 of 16 columns."""
    task = task_of("matmul.llvm", 13, 40, 8, "float32")
    s, args = task.instantiate(config_with(task, pack="ahead", mr=6, nr=16, nc_panels=2, ku=4))
    mod = ember.build(s, args, target="llvm")
    assert '!"llvm.loop.unroll.disable"' in mod.get_source("ll-unopt")
    optimised = mod.get_source("ll")
    assert optimised.count("@llvm.fmuladd.f32(") < 64  # was 681: each lane unrolled apart
    rng = np.random.default_rng(3)
    a = rng.standard_normal((13, 8)).astype("float32")
    b = rng.standard_normal((8, 40)).astype("float32")
    c = np.full((13, 40), np.nan, "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
