"""Schedule steps: JSON round trips, replay that rebuilds identical TIR, and errors."""

from __future__ import annotations

import json

import pytest

import ember
from ember.errors import ScheduleError
from ember.tir.stmt import ForKind
from ember.tir.structural import assert_structural_equal
from ember.tuner.auto import steps as S
from ember.tuner.auto.rules import CPU_RULES
from ember.tuner.auto.sketch import concretize, generate_sketches
from tests.tuner.auto import workloads as w

ONE_OF_EACH = [
    S.Split("C", 0, (4, 2)),
    S.Reorder("C", (1, 0, 2)),
    S.Fuse("C", (0, 1)),
    S.ComputeAt("C.local", "C", 0),
    S.ComputeInline("D"),
    S.ComputeRoot("D"),
    S.CacheWrite("C", "local"),
    S.CacheRead("A", "shared", ("C",)),
    S.Rfactor("S", 2, 0),
    S.Annotate("C", 0, "parallel"),
    S.Pragma("C", 0, "auto_unroll_max_step", 16),
    S.Bind("C", 0, "blockIdx.x"),
]


def test_every_step_kind_round_trips_through_json():
    assert {type(s) for s in ONE_OF_EACH} == set(S.STEP_KINDS.values())
    text = json.dumps(S.steps_to_json(ONE_OF_EACH))
    assert S.steps_from_json(json.loads(text)) == ONE_OF_EACH
    assert json.loads(text)["steps"][0] == ["split", "C", 0, [4, 2]]


def _concrete(sketch_index: int) -> list[S.Step]:
    """A sketch of matmul+bias+relu with its knobs at a fixed, non-trivial choice."""
    sk = generate_sketches(w.matmul(12, 20, 9), CPU_RULES)[sketch_index]
    values = {}
    for d in sk.knobs.values():
        values[d.name] = [1, 3, 2, 2] if "tile0" in d.name else [1, 5, 2, 2]
        if "rtile" in d.name:
            values[d.name] = [3, 3]
        if d.kind == "choice":
            values[d.name] = d.candidates[0]
    return concretize(sk, values.__getitem__)


@pytest.mark.parametrize("which", [0, 2])  # cache_write + fusion; tiling alone
def test_replaying_recorded_steps_rebuilds_identical_tir(which):
    steps = _concrete(which)
    recorded = S.steps_from_json(json.loads(json.dumps(S.steps_to_json(steps))))
    first = ember.lower(*S.apply_steps(w.matmul(12, 20, 9), steps))
    again = ember.lower(*S.apply_steps(w.matmul(12, 20, 9), recorded))
    assert_structural_equal(first, again, map_free_vars=True)
    assert str(first) == str(again)


def test_auto_unroll_unrolls_the_innermost_loops_within_its_budget():
    steps = [
        S.Split("C", 0, (3, 2)),  # i0 i1(3) i2(2) j k(9)
        S.Reorder("C", (0, 3, 1, 4, 2)),  # i0 j i1 k i2
        S.Pragma("C", 0, "auto_unroll_max_step", 20),
    ]
    s, _ = S.apply_steps(w.matmul(12, 20, 9), steps)
    loops = s[s.outputs[0]].leaf_iter_vars
    kinds = [s[s.outputs[0]].iter_attrs.get(iv) for iv in loops]
    unrolled = [a is not None and a.kind is ForKind.UNROLLED for a in kinds]
    assert unrolled == [False, False, False, True, True]  # 2 * 9 <= 20 < 2 * 9 * 3


@pytest.mark.parametrize(
    "budget, unrolled",
    [(20, [False, False, False, True]), (64, [False, False, True, True]), (8, [False] * 4)],
)
def test_auto_unroll_counts_a_vectorized_innermost_loop_as_one_step(budget, unrolled):
    """As in TVM, whose UnrollLoop runs after VectorizeLoop: the loops around a vector
    loop unroll within the budget (a register tile), where the pragma used to stop at it.
    Loops i0 j i1(3) k(9) i2(2, vectorized): k unrolls within 20; k and i1 within 64."""
    steps = [
        S.Split("C", 0, (3, 2)),
        S.Reorder("C", (0, 3, 1, 4, 2)),
        S.Annotate("C", 4, "vectorize"),
        S.Pragma("C", 0, "auto_unroll_max_step", budget),
    ]
    s, _ = S.apply_steps(w.matmul(12, 20, 9), steps)
    stage = s[s.outputs[0]]
    kinds = [stage.iter_attrs.get(iv) for iv in stage.leaf_iter_vars]
    assert kinds[4].kind is ForKind.VECTORIZED
    assert [a is not None and a.kind is ForKind.UNROLLED for a in kinds[:4]] == unrolled


def test_a_step_that_does_not_fit_raises_schedule_error_naming_it():
    with pytest.raises(
        ScheduleError, match=r"(?s)loop #7; the stage has 3 loops.*step #1 \['split', 'C', 7"
    ):
        S.apply_steps(w.matmul(4, 4, 4), [S.ComputeRoot("C"), S.Split("C", 7, (2,))])
    with pytest.raises(ScheduleError, match="no stage 'Z'"):
        S.apply_steps(w.matmul(4, 4, 4), [S.ComputeInline("Z")])
    with pytest.raises(ScheduleError, match="not a schedule step"):
        S.step_from_json(["tile", "C"])
    with pytest.raises(ScheduleError, match="version 99"):
        S.steps_from_json({"version": 99, "steps": []})
