"""Property test: random rfactor schedules against numpy.

Hypothesis draws the extents, the split factor, ``factor_axis``, the reducer (sum, max,
min, or TVM's argmax tuple reducer, whose ties the reference breaks in the schedule's
order) and the form: the CPU (the factored stage at the root, LLVM) or TVM's GPU
pattern (the factored stage computed at the thread-bound reduction, in the emulator
with race checks on). Data is random and tie-heavy for argmax.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember import te
from tests.nightly import examples
from tests.numerics import assert_close, random_array
from tests.te.reducers import argmax, inputs_for_argmax, lanes_reference

PLAIN = {"sum": (te.sum, np.sum), "max": (te.max, np.max), "min": (te.min, np.min)}


def build(m: int, n: int, kind: str, factor: int, factor_axis: int, gpu: bool, rows_ty: int):
    if kind == "argmax":
        idx = te.placeholder((m, n), name="idx", dtype="int32")
        val = te.placeholder((m, n), name="val")
        k = te.reduce_axis((0, n), name="k")
        outs = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="B")
        args = [idx, val, *outs]
    else:
        A = te.placeholder((m, n), name="A")
        k = te.reduce_axis((0, n), name="k")
        outs = [te.compute((m,), lambda i: PLAIN[kind][0](A[i, k], axis=k), name="B")]
        args = [A, *outs]
    B = outs[0]
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=factor)
    BF = s.rfactor(B, ki, factor_axis=factor_axis)
    BF = BF[0] if isinstance(BF, list) else BF
    if gpu:
        s[B].bind(s[B].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
        s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
        if rows_ty > 1:
            bo, bi = s[B].split(s[B].op.axis[0], factor=rows_ty)
            s[B].bind(bo, te.thread_axis("blockIdx.x"))
            s[B].bind(bi, te.thread_axis("threadIdx.y"))
        else:
            s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    return s, args


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    m=st.integers(1, 6),
    n=st.integers(1, 90),
    factor=st.sampled_from([1, 3, 7, 8, 16, 20, 32, 64]),
    factor_axis=st.sampled_from([0, 1, -1]),
    kind=st.sampled_from(["sum", "max", "min", "argmax"]),
    gpu=st.booleans(),
    rows_ty=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 2**16),
)
def test_random_rfactor_schedules_match_numpy(m, n, factor, factor_axis, kind, gpu, rows_ty, seed):
    rng = np.random.default_rng(seed)
    s, args = build(m, n, kind, factor, factor_axis, gpu, rows_ty)
    if kind == "argmax":
        ins = list(inputs_for_argmax(m, n, rng))
        outs = [np.full(m, 77, "int32"), np.full(m, np.nan, "float32")]
        want = lanes_reference(ins[0], ins[1], factor, threads=gpu)
    else:
        ins = [random_array((m, n), "float32", rng)]
        outs = [np.full(m, np.nan, "float32")]
        want = (PLAIN[kind][1](ins[0].astype(np.float64), axis=1),)
    if gpu:
        ember.build(s, args, target="cuda -arch=sm_80").emulate(*ins, *outs)
    else:
        ember.build(s, args, target="llvm")(*ins, *outs)
    for got, w in zip(outs, want):
        if got.dtype == np.int32:
            np.testing.assert_array_equal(got, w)
        else:
            assert_close(got, w, "float32", what=f"{kind} {m}x{n} f={factor} gpu={gpu}")
