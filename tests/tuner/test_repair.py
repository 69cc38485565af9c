"""Repairing configs the constraints refuse (``ember.tuner.repair``), and the search
measuring the repaired config next, so a narrow valid region is found."""

from __future__ import annotations

import pytest

from ember.tuner import create_task, tune
from ember.tuner.repair import nearest_valid
from tests.tuner import templates  # noqa: F401  (registers the test templates)
from tests.tuner.test_search import FakeMeasurer


@pytest.fixture
def task():
    return create_task("narrow.llvm", args=(16,))


def entity(task, **values):
    space = task.config_space
    choices = {n: k.candidates.index(values[n]) for n, k in space.knobs.items()}
    return space.from_choices(choices)


def values(cfg) -> dict:
    return {n: cfg[n].val for n in cfg.space.knobs}


def test_fewest_knobs_changed_then_smallest_move(task):
    # Before: narrow mode with a=2: one knob (a) breaks the constraint.
    before = entity(task, a=2, d=4, b=1, c=False, mode="narrow", split=1)
    assert not before.is_valid()
    # Expected: one change; a 2 -> 1 and mode narrow -> wide are both one index away,
    # and the lower config index wins: the mode flip (a varies fastest, mode slower).
    after = nearest_valid(before)
    assert values(after) == {"a": 2, "d": 4, "b": 1, "c": False, "mode": "wide", "split": 1}


def test_a_far_move_loses_to_a_near_one(task):
    # a=12 is five indices from a=1; flipping the mode is one
    before = entity(task, a=12, d=4, b=1, c=False, mode="narrow", split=1)
    assert values(nearest_valid(before))["mode"] == "wide"


def test_two_changes_when_one_is_not_enough(task):
    # narrow with split 4 and a=2: the mode flip needs split 1 too; fixing a is one change
    before = entity(task, a=2, d=4, b=2, c=False, mode="narrow", split=4)
    after = nearest_valid(before)
    assert values(after) == {"a": 1, "d": 4, "b": 1, "c": False, "mode": "narrow", "split": 4}


def test_no_repair_within_the_limits(task):
    before = entity(task, a=12, d=4, b=8, c=True, mode="narrow", split=8)
    assert nearest_valid(before, max_changes=1) is None  # mode and split must both move
    fixed = nearest_valid(before, max_changes=2)
    assert values(fixed)["mode"] == "wide" and values(fixed)["split"] == 1
    assert nearest_valid(before, budget=10) is None


def narrow_cost(cfg) -> float:
    """The narrow region holds the best configs by far; ``d`` matters in both modes."""
    d = abs(cfg.choices["d"] - 2) / 4
    if cfg["mode"].val == "narrow":
        return (1.0 + d + (0.0 if cfg["split"].val == 2 else 0.2)) * 1e-3
    return (2.0 + d + cfg["a"].val / 12 + cfg["b"].val / 8) * 1e-3


def test_each_refused_config_is_followed_by_its_repair(task):
    result = tune(task, n_trials=20, measure=FakeMeasurer(cost=narrow_cost), seed=0)
    trials = result.study.get_trials(deepcopy=False)
    space = task.config_space
    seen: set[int] = set()
    repaired = 0
    for t, nxt in zip(trials, trials[1:]):
        index = t.user_attrs.get("config_index")
        if t.state.name == "PRUNED" and t.user_attrs.get("error") == "invalid_config":
            fixed = nearest_valid(space.get(index))
            if fixed is not None and fixed.index not in seen:
                assert nxt.user_attrs.get("config_index") == fixed.index
                repaired += 1
        seen.add(index)
    assert result.rejected > 0 and repaired > 0
