"""A padded input fetched with vectorized loads (TVM's ``opt_conv_cuda``): a vector
is loaded only where all of it is in bounds, lanes with their own bounds keep guarded
scalar loads, and no executor reads outside the input (the emulator checks every
load's bounds), with numbers against numpy."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
from ember import te
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.interp import run as interp_run
from ember.tir.transform.vectorize_loops import vectorize_loops
from tests.robust.opt_conv_schedule import conv_reference, opt_conv


# -- vectorize_loops: Before / Expected ------------------------------------------------
def _padded_copy(cond: E.PrimExpr, h: E.Var, c: E.Var) -> S.PrimFunc:
    A, B = decl_buffer((32,), "float32", "A"), decl_buffer((40,), "float32", "B")
    value = E.if_then_else(cond, A[(h - 1) * 4 + c], E.const(0.0))
    inner = S.For(
        c, E.const(0), E.const(4), S.ForKind.VECTORIZED, S.BufferStore(B, value, (h * 4 + c,))
    )
    return S.PrimFunc("f", (A, B), S.For(h, E.const(0), E.const(10), S.ForKind.SERIAL, inner))


def test_lane_invariant_guard_becomes_a_vector_if_then_else() -> None:
    h, c = E.Var("h"), E.Var("c")
    after = vectorize_loops(_padded_copy(E.logical_and(h >= 1, h < 9), h, c))
    assert repr(after).splitlines()[1:] == [
        "    for h in range(10):",
        "        B[ramp(h * 4 + 0, 1, 4)] = if_then_else(h >= 1 and h < 9, "
        "A[ramp((h - 1) * 4 + 0, 1, 4)], broadcast(0.0, 4))",
    ]


def test_lane_dependent_guard_keeps_guarded_scalar_loads() -> None:
    h, c = E.Var("h"), E.Var("c")
    after = vectorize_loops(_padded_copy(E.logical_and(h * 4 + c >= 3, h < 9), h, c))
    assert repr(after).splitlines()[1:] == [
        "    for h in range(10):",
        "        for c in unroll(4):",
        "            B[h * 4 + c] = if_then_else(h * 4 + c >= 3 and h < 9, "
        "A[(h - 1) * 4 + c], 0.0)",
    ]


# -- a padded copy on every executor -----------------------------------------------------
def _padded_rows(rows: int, cols: int, pad: int, vec: int, lane_guard: bool):  # noqa: ANN202
    """``P[r, j] = A[r - pad, j]`` inside, 0 in the padding rows (and, with ``lane_guard``,
    also where ``j`` is beyond ``cols - 1``, a test that differs between lanes)."""
    A = te.placeholder((rows, cols), name="A")

    def body(r, j):  # noqa: ANN001, ANN202
        inside = te.all(r >= pad, r - pad < rows)
        if lane_guard:
            inside = te.all(inside, j < cols - 1)
        return te.if_then_else(inside, A[r - pad, j], te.const(0.0, "float32"))

    P = te.compute((rows + 2 * pad, cols), body, name="P")
    s = te.create_schedule(P.op)
    _, ji = s[P].split(P.op.axis[1], factor=vec)
    s[P].vectorize(ji)
    return s, [A, P]


def _padded_rows_reference(a: np.ndarray, pad: int, lane_guard: bool) -> np.ndarray:
    out = np.zeros((a.shape[0] + 2 * pad, a.shape[1]), a.dtype)
    out[pad : pad + a.shape[0]] = a
    if lane_guard:
        out[:, -1] = 0
    return out


@pytest.mark.parametrize("lane_guard", [False, True])
@pytest.mark.parametrize(("rows", "cols", "pad"), [(5, 8, 1), (3, 12, 2), (7, 16, 3)])
def test_padded_vector_copy_on_interp_llvm_and_emulator(
    rows: int, cols: int, pad: int, lane_guard: bool
) -> None:
    rng = np.random.default_rng(rows * 100 + cols)
    a = rng.uniform(-2, 2, (rows, cols)).astype(np.float32)
    want = _padded_rows_reference(a, pad, lane_guard)
    s, args = _padded_rows(rows, cols, pad, 4, lane_guard)
    out = np.full(want.shape, np.nan, np.float32)
    interp_run(ember.lower(s, args), a, out)
    np.testing.assert_array_equal(out, want)
    out[:] = np.nan
    ember.build(s, args, target="llvm")(a, out)
    np.testing.assert_array_equal(out, want)

    s, args = _padded_rows(rows, cols, pad, 4, lane_guard)
    P = args[1]
    bx, tx = s[P].split(s[P].op.axis[0], factor=2)
    s[P].bind(bx, te.thread_axis("blockIdx.x"))
    s[P].bind(tx, te.thread_axis("threadIdx.x"))
    mod = ember.build(s, args, target="cuda")
    out[:] = np.nan
    mod.emulate(a, out)  # raises on any out-of-bounds load
    np.testing.assert_array_equal(out, want)
    src = mod.get_source()
    if lane_guard:
        assert "A_v" not in src  # each lane tests its own bounds: scalar loads
    else:
        assert "float4 A_v = *(const float4*)" in src


def test_llvm_loads_the_vector_inside_the_branch() -> None:
    s, args = _padded_rows(5, 8, 1, 4, lane_guard=False)
    ll = ember.build(s, args, target="llvm").get_source("ll-unopt")
    assert "load <4 x float>" in ll
    assert re.search(r"phi\s+<4 x float>", ll)  # a branch per side, not a select of both
    assert not re.search(r"select i1 [^,]+, <4 x float>", ll)


# -- TVM's opt_conv_cuda -----------------------------------------------------------------
CONV_CASES = [
    {"in_size": 7, "pad": 1},
    {"in_size": 5, "pad": 2, "kernel": 5},
    {"in_size": 6, "pad": 1, "stride": 2},
    {"in_size": 3, "pad": 1, "in_channel": 4, "step": 2},
]


def _conv_inputs(args: list, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, [int(d.value) for d in t.shape]).astype(np.float32) for t in args]


@pytest.mark.parametrize("case", CONV_CASES)
def test_opt_conv_cuda_fetches_padding_without_out_of_bounds_loads(case: dict) -> None:
    s, args = opt_conv(**case)
    mod = ember.build(s, args, target="cuda")
    src = mod.get_source()
    # the float4 load of A sits inside the bounds test, after an `if (`
    head, _, rest = src.partition("float4 A_v = *(const float4*)")
    assert rest and head.rstrip().splitlines()[-1].lstrip().startswith("if (")
    a, w, b = _conv_inputs(args, seed=len(src))
    b[:] = np.nan
    mod.emulate(a, w, b)  # thread 0 used to read A[-k..]: an out-of-bounds load error
    want = conv_reference(a, w, case["pad"], case.get("stride", 1))
    np.testing.assert_allclose(b, want, rtol=1e-4, atol=1e-4)


@pytest.mark.nvrtc
def test_opt_conv_cuda_compiles_with_nvrtc() -> None:
    s, args = opt_conv(in_size=7, pad=1)
    mod = ember.build(s, args, target="cuda -arch=sm_80")
    compiled = mod.compile()
    assert compiled.cubin
    assert "ld.global.v4.f32" in compiled.ptx or "ld.global.nc.v4.f32" in compiled.ptx
