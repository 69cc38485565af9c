"""Property: every candidate of every sketch of a random DAG computes what numpy does.

Hypothesis draws a compute DAG (:mod:`.random_dag`: elementwise, broadcast, transposes,
reductions, matmul- and conv-like stages, odd shapes), the auto-scheduler generates its
sketches for the target, and one sketch with random knob values is replayed on the DAG
built afresh, built, and run on random data (never zeros) against the numpy twin: on
``llvm`` natively, on ``cuda`` in the SIMT emulator (which also checks shared-memory
races and out-of-bounds accesses).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember.tuner.auto.rules import CPU_RULES
from ember.tuner.auto.rules_cuda import CUDA_RULES
from ember.tuner.auto.sketch import generate_sketches
from ember.tuner.auto.space import define_sketch_space, steps_for
from ember.tuner.auto.steps import apply_steps
from ember.tuner.space import ConfigSpace
from tests.nightly import examples
from tests.tuner.auto.random_dag import OPS, ROW_OPS, build

SIZES = st.sampled_from([1, 3, 5, 7, 8, 12, 13])


@st.composite
def dags(draw: st.DrawFn, kinds: tuple[str, ...] = OPS) -> tuple[list[tuple[str, int]], int, int]:
    ops = draw(st.lists(st.tuples(st.sampled_from(kinds), SIZES), min_size=1, max_size=3))
    rows = draw(st.sampled_from([2, 3, 5, 7, 9]))
    # long rows now and then: a reduction over few outputs is factored (rfactor)
    cols = draw(st.sampled_from([1, 4, 6, 11, 70]))
    return ops, rows, cols


def check_candidate(dag, seed: int, pick: int, target: str, rules) -> None:
    ops, rows, cols = dag
    tensors, reference = build(ops, rows, cols)
    sketches = generate_sketches(tensors, rules)
    space = ConfigSpace()
    define_sketch_space(space, sketches)
    space.freeze()
    cfg = space.sample(seed)
    picked = space.from_choices({**cfg.choices, "sketch": pick % len(sketches)})
    cfg = picked if picked.is_valid() else cfg  # a GPU sketch's thread limits may refuse it
    fresh, _ = build(ops, rows, cols)  # replayed on a DAG built afresh, as a record is
    s, args = apply_steps(fresh, steps_for(cfg, sketches))
    mod = ember.build(s, args, target=target)
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, [int(d) for d in t.shape]).astype("float32") for t in args[:-1]]
    out = np.full([int(d) for d in args[-1].shape], np.nan, "float32")
    if target == "cuda":
        mod.emulate(*arrays, out)
    else:
        mod(*arrays, out)
    np.testing.assert_allclose(out, reference(*arrays), rtol=1e-4, atol=1e-4)


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag=dags(ROW_OPS), seed=st.integers(0, 2**16), pick=st.integers(0, 7))
def test_every_cpu_sketch_candidate_matches_numpy(dag, seed, pick):
    check_candidate(dag, seed, pick, "llvm", CPU_RULES)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag=dags(), seed=st.integers(0, 2**16), pick=st.integers(0, 7))
def test_every_cuda_sketch_candidate_matches_numpy_on_the_emulator(dag, seed, pick):
    check_candidate(dag, seed, pick, "cuda", CUDA_RULES)


@pytest.mark.parametrize("ops", [[("padconv", 5), ("relu", 1)], [("padconv", 4)]])
def test_every_padded_copy_sketch_matches_numpy(ops):
    """The sketches that compute a conv's padding first (``rule_padding``), each with
    random parameters; odd widths and channel counts."""
    tensors, _ = build(ops, 3, 11)
    names = [sk.name for sk in generate_sketches(tensors, CPU_RULES)]
    picks = [k for k, name in enumerate(names) if name.endswith("+pad")]
    assert len(picks) == len(names) // 2
    for pick in picks:
        for seed in range(2):
            check_candidate((ops, 3, 11), seed, pick, "llvm", CPU_RULES)
