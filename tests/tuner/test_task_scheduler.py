"""``tune_tasks``'s gradient schedule with a deterministic fake measurer: rounds go to
the task whose weighted best cost is expected to drop most, each task's study goes on
across its rounds, and the budget is spent exactly."""

from __future__ import annotations

import math

import pytest

from ember.errors import ArgumentError
from ember.tuner import MeasureResult, create_task, read_records, tune_tasks
from ember.tuner.tune_tasks import expected_gain
from tests.tuner import templates  # noqa: F401  (registers the test templates)
from tests.tuner.test_search import cost_of


class PerTask:
    """Costs from a function of (task size, config); counts the measured configs per task."""

    device_name = "fake-device"
    jobs = 1

    def __init__(self, costs: dict[int, object]) -> None:
        self.costs = costs
        self.count: dict[int, int] = {}

    def measure(self, task, configs):
        n = task.args[0]
        self.count[n] = self.count.get(n, 0) + len(configs)
        return [MeasureResult((self.costs[n](cfg),) * 3) for cfg in configs]

    def close(self) -> None:
        pass


def tasks(*sizes: int):
    return [create_task("tiny_add.llvm", args=(n,)) for n in sizes]


def test_expected_gain_prefers_falling_heavy_and_little_tried_tasks():
    falling = [4.0, 3.0, 2.0, 1.0]
    flat = [1.0, 1.0, 1.0, 1.0]
    assert expected_gain(1, falling, 3) > expected_gain(1, flat, 3) > 0
    assert expected_gain(3, flat, 3) == pytest.approx(3 * expected_gain(1, flat, 3))
    assert expected_gain(1, flat[:2], 3) > expected_gain(1, flat, 3)
    assert expected_gain(1, [], 3) == math.inf
    assert expected_gain(1, [math.inf], 3) == math.inf  # nothing measured yet: try it
    assert expected_gain(1, [math.inf] * 3, 3) == 0.0  # failing for a whole round: stop


def test_rounds_go_where_the_weighted_latency_can_drop():
    flat = lambda cfg: 1e-3  # noqa: E731  (the fallback is already the best)
    fake = PerTask({48: flat, 64: cost_of})
    results = tune_tasks(tasks(48, 64), n_trials=40, measure=fake, round_trials=4, seed=0)
    assert sum(fake.count.values()) == 40
    assert fake.count[64] > fake.count[48] >= 4  # both warmed up, more to the landscape
    assert [len(r.trials) for r in results] == [fake.count[48], fake.count[64]]
    # the study went on across rounds: no config measured twice, best is the minimum
    for r in results:
        indices = [t.config.index for t in r.trials]
        assert len(indices) == len(set(indices))
        assert r.best_cost == min(t.result.cost for t in r.trials)


def test_a_costlier_task_of_the_same_landscape_gets_more_rounds():
    fake = PerTask({48: cost_of, 64: lambda cfg: 20 * cost_of(cfg)})
    tune_tasks(tasks(48, 64), n_trials=40, measure=fake, round_trials=4, seed=1)
    assert fake.count[64] > fake.count[48]


def test_weight_counts_like_cost():
    fake = PerTask({48: cost_of, 64: cost_of})

    class Weighted:
        def __init__(self, task, weight):
            self.task, self.weight = task, weight

    a, b = tasks(48, 64)
    tune_tasks([Weighted(a, 1), Weighted(b, 20)], n_trials=40, measure=fake, round_trials=4)
    assert fake.count[64] > fake.count[48]


def test_finished_tasks_get_no_more_rounds_and_the_rest_is_spent_elsewhere():
    fake = PerTask({48: lambda cfg: 1e-3, 64: cost_of})
    results = tune_tasks(
        tasks(48, 64), n_trials=30, measure=fake, round_trials=3, early_stopping=3, seed=0
    )
    assert results[0].stopped == "early_stopping" and fake.count[48] == 4  # 1 + 3 without gain
    assert sum(fake.count.values()) <= 30


def test_weight_schedule_splits_once(tmp_path):
    fake = PerTask({48: cost_of, 64: cost_of, 80: cost_of})
    log = tmp_path / "t.jsonl"
    results = tune_tasks(tasks(48, 64, 80), n_trials=12, measure=fake, schedule="weight",
                         records=log, sampler="random")  # fmt: skip
    assert [len(r.trials) for r in results] == [4, 4, 4]
    assert len(read_records(log)) == 12


def test_rounds_continue_the_journal_study_beside_the_records(tmp_path):
    log = tmp_path / "t.jsonl"
    fake = PerTask({48: cost_of, 64: cost_of})
    results = tune_tasks(tasks(48, 64), n_trials=20, records=log, measure=fake, round_trials=2)
    assert sum(len(r.trials) for r in results) == 20 == len(read_records(log))
    assert (tmp_path / "t.jsonl.journal").exists()
    for r in results:
        assert len({t.config.index for t in r.trials}) == len(r.trials)
        assert len(r.study.trials) >= len(r.trials)  # one study holds every round's trials


def test_too_small_a_budget_still_tries_each_task_once():
    fake = PerTask({48: cost_of, 64: cost_of, 80: cost_of})
    results = tune_tasks(tasks(48, 64, 80), n_trials=2, measure=fake)
    assert [len(r.trials) for r in results] == [1, 1, 1]


@pytest.mark.parametrize(
    "kw,match",
    [({"schedule": "fair"}, "schedule"), ({"round_trials": 0}, "round_trials"),
     ({"n_trials": 0}, "n_trials")],
)  # fmt: skip
def test_bad_arguments(kw, match):
    with pytest.raises(ArgumentError, match=match):
        tune_tasks(tasks(48), **{"n_trials": 4, **kw})
