"""``benchmarks/bench_outside.py`` splits a run into its kernels' span and the time before
and after them, from stamps the step loop writes in plain runs."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np

import ember
from ember.frontend.testing.models import mlp

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_outside.py"


def test_a_run_is_its_kernels_and_what_is_outside_them() -> None:
    outside = runpy.run_path(str(SCRIPT), run_name="bench_outside")["outside"]
    model, inputs = mlp(np.random.default_rng(0))
    lib = ember.compile(model, target="llvm")
    want = lib.run(inputs)
    run, span, before, after = outside(lib, inputs, 20)
    assert 0 < span < run and before > 0 and after > 0
    # one native run: nothing but its entry and its return lies outside the span
    assert before + span + after <= run * 1.05  # medians of the parts, not of their sum
    with lib._workspace() as ws:  # the loop no longer writes into the freed stamps
        assert all(call._job.stamps is None for _, call in ws.program)
    for got, ref in zip(lib.run(inputs), want):  # the stamps change nothing a run computes
        np.testing.assert_array_equal(got, ref)
