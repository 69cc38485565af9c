"""The generic CPU schedule's reductions (``codegen_llvm/schedules/generic.py``) against
numpy on odd shapes: partial sums in vector lanes where the outputs' last axis is short
(a row mean, global pooling; extents the lane width does not divide), 64-wide output
blocks where there is one output axis (a sum over the first axis), and the register tile
otherwise; a property test over random shapes and reduced axes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules import generic
from ember.codegen_llvm.schedules.generic import schedule_group
from ember.tir.te import operation as te
from tests.nightly import examples

KINDS = {"sum": (te.sum, np.sum), "max": (te.max, np.max)}


def _reduce(shape: tuple[int, ...], axes: tuple[int, ...], keep: bool, kind: str) -> tuple:
    x = te.placeholder(shape, "float32", name="x")
    rs = {a: te.reduce_axis((0, shape[a]), name=f"r{a}") for a in axes}
    kept = [a for a in range(len(shape)) if a not in axes]
    out_shape = (
        tuple(1 if a in axes else shape[a] for a in range(len(shape)))
        if keep
        else tuple(shape[a] for a in kept)
    )
    reducer = KINDS[kind][0]

    def f(*i):  # noqa: ANN002, ANN202
        idx, k = [], 0
        for a in range(len(shape)):
            if a in axes:
                idx.append(rs[a].var)
                k += keep
            else:
                idx.append(i[k])
                k += 1
        return reducer(x[tuple(idx)], axis=[rs[a] for a in axes])

    return x, te.compute(out_shape or (1,), f if out_shape else (lambda _: f()), name="red")


def _check(shape, axes, keep, kind, rng) -> str:  # noqa: ANN001
    x, y = _reduce(shape, axes, keep, kind)
    s = schedule_group([y])
    a = rng.standard_normal(shape).astype("float32")
    out = np.full([int(d.value) for d in y.shape], np.nan, "float32")
    mod = ember.build(s, [x, y], target="llvm")
    mod(a, out)
    want = KINDS[kind][1](a.astype(np.float64), axis=axes, keepdims=keep).reshape(out.shape)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    return mod.get_source("ll")


@pytest.mark.parametrize(
    "shape, axes, keep",
    [
        ((5, 37), (1,), True),  # row sums: lanes of 16 with a guarded tail
        ((3, 7, 7), (1, 2), True),  # 7 x 7 pooling: short rows fused
        ((2, 6, 50), (2,), True),  # 50: neither 16 nor 8 divides it
        ((37, 70), (0,), False),  # over the first axis: 64-wide blocks and an edge
        ((9, 3), (0,), False),  # fewer outputs than a vector
    ],
    ids=str,
)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_generic_reductions_match_numpy(shape, axes, keep, kind, rng):  # noqa: ANN001
    _check(shape, axes, keep, kind, rng)


def test_short_rows_reduce_in_vector_lanes(rng):  # noqa: ANN001
    ll = _check((4, 160), (1,), True, "sum", rng)
    assert f"<{generic.LANES} x float>" in ll  # the partial sums, one register


def test_sum_over_the_first_axis_reads_whole_blocks(rng):  # noqa: ANN001
    ll = _check((33, 128), (0,), False, "sum", rng)
    assert f"<{generic.COLUMNS} x float>" in ll


@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    shape=st.lists(st.integers(1, 23), min_size=1, max_size=3).map(tuple),
    data=st.data(),
    keep=st.booleans(),
    kind=st.sampled_from(sorted(KINDS)),
)
def test_random_reductions_match_numpy(shape, data, keep, kind, rng):  # noqa: ANN001
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    _check(shape, axes, keep, kind, rng)
