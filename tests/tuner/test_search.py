"""The search loop with a deterministic fake measurer: encodings, constraints, fallback
first, seeds, early stopping, samplers, transfer and resume. No processes here."""

from __future__ import annotations

import functools
import math
import socket
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.errors import ArgumentError
from ember.tuner import ErrorKind, MeasureResult, create_task, read_records
from ember.tuner import tune as tune_and_retime
from ember.tuner.encode import SpaceEncoding
from ember.tuner.tune import fallback_entity
from tests.nightly import examples
from tests.tuner import templates  # noqa: F401  (registers the test templates)

# these tests count the search's own measurements and records; re-timing the pick after
# the search adds more of both, and is tested in test_retime.py
tune = functools.partial(tune_and_retime, retime_rounds=0)


def cost_of(cfg) -> float:
    """A smooth bowl over the knob values, smallest at tile [.., 4, 2], vec 4, unroll on."""
    tile = cfg["tile"].size
    return (
        1.0
        + abs(math.log2(tile[1]) - 2)
        + abs(math.log2(tile[2]) - 1)
        + abs(math.log2(cfg["vec"].val) - 2)
        + (0.0 if cfg["unroll"].val else 0.5)
    ) * 1e-3


class FakeMeasurer:
    """Costs from a function of the config; ``fail(cfg)`` may name an error kind."""

    device_name = "fake-device"

    def __init__(self, cost=cost_of, fail=None, jobs: int = 1) -> None:
        self.cost, self.fail, self.jobs = cost, fail, jobs
        self.calls: list = []
        self.batches: list[int] = []

    def measure(self, task, configs):
        self.batches.append(len(configs))
        out = []
        for cfg in configs:
            assert cfg.is_valid(), f"an invalid config reached the measurer: {cfg}"
            self.calls.append(cfg)
            err = self.fail(cfg) if self.fail else None
            if err is not None:
                out.append(MeasureResult.failed(err, "fake failure"))
            else:
                c = self.cost(cfg)
                out.append(MeasureResult((c, c * 1.01, c * 0.99)))
        return out

    def close(self) -> None:
        pass


@pytest.fixture
def task():
    return create_task("tiny_add.llvm", args=(48,))


@pytest.mark.parametrize(
    "name,args",
    [("tiny_add.llvm", (48,)), ("tiny_add.llvm", (97,)), ("matmul.llvm", (33, 70, 21, "float32"))],
)
def test_every_config_encodes_and_decodes_back(name, args):
    t = create_task(name, args)
    enc = SpaceEncoding(t.config_space)
    for index in range(len(t.config_space)):
        cfg = t.config_space.get(index)
        params = enc.encode(cfg)
        assert set(params) == {p.name for p in enc.params}
        assert enc.decode(params) == cfg


def test_split_and_numeric_knobs_are_ordered(task):
    enc = SpaceEncoding(task.config_space)
    kinds = {p.name: p.ordered for p in enc.params}
    assert kinds == {"tile.1": True, "tile.2": True, "vec": True, "unroll": False}
    dists = enc.distributions()
    assert type(dists["tile.1"]).__name__ == "IntDistribution"
    assert type(dists["unroll"]).__name__ == "CategoricalDistribution"


@settings(max_examples=examples(200), deadline=None, derandomize=True)
@given(data=st.data(), n=st.sampled_from([1, 7, 48, 60, 97, 128]))
def test_any_sampled_vector_decodes_to_a_config_of_the_space(data, n):
    t = create_task("tiny_add.llvm", args=(n,))
    enc = SpaceEncoding(t.config_space)
    params = {p.name: data.draw(st.integers(0, p.size - 1), label=p.name) for p in enc.params}
    cfg = enc.decode(params)
    tile = t.config_space.knobs["tile"].candidates[cfg.choices["tile"]]
    assert math.prod(tile) == n  # an exact split of the axis
    assert enc.decode(enc.encode(cfg)) == cfg
    assert cfg == t.config_space.get(cfg.index)


def test_fallback_is_measured_first_and_constraints_hold(task):
    fake = FakeMeasurer()
    result = tune(task, n_trials=25, measure=fake, seed=1)
    assert fake.calls[0] == fallback_entity(task)
    assert len(fake.calls) == len(result.trials) == 25
    assert len({c.index for c in fake.calls}) == 25  # nothing measured twice
    assert result.rejected > 0  # the constraint turned configs down, not counted
    assert result.best_cost == min(cost_of(c) for c in fake.calls)
    assert result.best_config.is_valid()
    bests = [t.best_cost for t in result.trials]
    assert bests == sorted(bests, reverse=True)


def test_rejections_before_build_are_not_counted(task):
    result = tune(task, n_trials=10, measure=FakeMeasurer(), seed=3)
    trials = result.study.get_trials(deepcopy=False)
    invalid = [t for t in trials if t.user_attrs.get("error") == ErrorKind.INVALID_CONFIG.value]
    assert len(invalid) == result.rejected > 0
    assert all(t.state.name == "PRUNED" and not t.user_attrs.get("measured") for t in invalid)
    assert sum(1 for t in trials if t.user_attrs.get("measured")) == 10


def test_failed_candidates_count_and_invalid_from_builder_does_not(task):
    def fail(cfg):
        if cfg["vec"].val == 8:
            return ErrorKind.COMPILE
        if cfg["vec"].val == 2:
            return ErrorKind.INVALID_CONFIG
        return None

    result = tune(task, n_trials=20, measure=FakeMeasurer(fail=fail), sampler="random", seed=0)
    assert len(result.trials) == 20
    kinds = {t.result.error for t in result.trials}
    assert ErrorKind.INVALID_CONFIG not in kinds and ErrorKind.COMPILE in kinds
    assert result.errors.get("compile", 0) >= 1
    assert all(t.config["vec"].val != 2 for t in result.trials)


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes", "grid"])
def test_seeds_reproduce(task, sampler):
    runs = []
    for seed in (5, 5, 6):
        fake = FakeMeasurer()
        tune(task, n_trials=15, measure=fake, sampler=sampler, seed=seed)
        runs.append([c.index for c in fake.calls])
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_tpe_finds_better_than_random_on_average(task):
    def best(sampler, seed):
        return tune(task, n_trials=40, measure=FakeMeasurer(), sampler=sampler, seed=seed).best_cost

    tpe = sum(best("tpe", s) for s in range(3))
    rnd = sum(best("random", s) for s in range(3))
    assert tpe <= rnd


def test_grid_exhausts_a_small_space():
    t = create_task("tiny_add.llvm", args=(4,))
    fake = FakeMeasurer()
    result = tune(t, n_trials=500, measure=fake, sampler="grid", seed=0)
    valid = [c for c in map(t.config_space.get, range(len(t.config_space))) if c.is_valid()]
    assert sorted(c.index for c in fake.calls) == sorted(c.index for c in valid)
    assert result.stopped == "space_exhausted"


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes"])
def test_a_sampler_stuck_on_duplicates_still_exhausts_a_small_space(sampler):
    """Each duplicate queues an unseen config: every sampler measures all 48 configs and
    stops for that reason, with at most one duplicate per config (CMA-ES used to measure
    19 and spend its 10,200 attempts proposing what it knew)."""
    t = create_task("tiny_add.llvm", args=(4,))
    fake = FakeMeasurer()
    result = tune(t, n_trials=500, measure=fake, sampler=sampler, seed=0)
    assert sorted(c.index for c in fake.calls) == list(range(len(t.config_space)))
    assert result.stopped == "space_exhausted"
    assert result.duplicates <= len(t.config_space)


def test_early_stopping(task):
    fake = FakeMeasurer(cost=lambda cfg: 1.0)  # nothing ever beats the fallback
    result = tune(task, n_trials=100, measure=fake, early_stopping=7, seed=0)
    assert len(fake.calls) == 8 and result.stopped == "early_stopping"


def test_parallel_batches(task):
    fake = FakeMeasurer(jobs=4)
    result = tune(task, n_trials=10, measure=fake, seed=0)
    assert len(result.trials) == 10 and max(fake.batches) == 4 and sum(fake.batches) == 10


def test_records_round_trip(task, tmp_path):
    log = tmp_path / "tune.jsonl"
    result = tune(task, n_trials=6, records=log, measure=FakeMeasurer(), seed=0)
    recs = read_records(log)
    assert len(recs) == 6
    for rec, trial in zip(recs, result.trials):
        assert rec.task_key == task.key and rec.template == "tiny_add.llvm"
        assert rec.target == "llvm" and rec.device == "fake-device" and rec.format == 1
        assert rec.cost == pytest.approx(trial.result.cost)
        assert rec.config == trial.config.to_json()
    assert (tmp_path / "tune.jsonl.journal").exists()


def test_transfer_seeds_a_new_shape(tmp_path):
    small = create_task("tiny_add.llvm", args=(48,))
    log = tmp_path / "small.jsonl"
    tune(small, n_trials=30, records=log, measure=FakeMeasurer(), seed=0)
    best = sorted(read_records(log), key=lambda r: r.cost)[0]
    big = create_task("tiny_add.llvm", args=(96,))
    fake = FakeMeasurer()
    tune(big, n_trials=5, measure=fake, transfer=[log], seed=0)
    assert fake.calls[0] == fallback_entity(big)
    got = fake.calls[1].to_json()["values"]
    want = best.config["values"]
    assert got["tile"][1:] == want["tile"][1:]
    assert got["tile"][0] == 96 // math.prod(got["tile"][1:])
    assert (got["vec"], got["unroll"]) == (want["vec"], want["unroll"])


def test_resume_from_a_journal(task, tmp_path):
    log = tmp_path / "r.jsonl"
    first = FakeMeasurer()
    tune(task, n_trials=6, records=log, measure=first, seed=0)
    # a killed run leaves a trial RUNNING; resuming fails it and goes on
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(log) + ".journal"))
    study = optuna.load_study(study_name=f"ember-{task.key}", storage=storage)
    stale = study.ask()  # no owner: abandoned
    dead = study.ask()
    dead.set_user_attr("owner", f"{socket.gethostname()}:{_dead_pid()}")
    elsewhere = study.ask()
    elsewhere.set_user_attr("owner", "another-host:1")
    second = FakeMeasurer()
    result = tune(task, n_trials=10, records=log, measure=second, seed=0, resume=True)
    assert len(second.calls) == 4 and len(result.trials) == 10
    assert not {c.index for c in second.calls} & {c.index for c in first.calls}
    states = {t.number: t.state.name for t in result.study.trials}
    assert states[stale.number] == states[dead.number] == "FAIL"
    assert states[elsewhere.number] == "RUNNING"  # may be a live run on a shared database
    assert len(read_records(log)) == 10
    again = FakeMeasurer()
    tune(task, n_trials=3, records=log, measure=again, seed=0)  # no resume: a fresh study
    assert again.calls[0] == fallback_entity(task)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_bad_arguments(task):
    with pytest.raises(ArgumentError, match="n_trials"):
        tune(task, n_trials=0, measure=FakeMeasurer())
    with pytest.raises(ArgumentError, match="sampler"):
        tune(task, n_trials=3, sampler="annealing", measure=FakeMeasurer())
    with pytest.raises(ArgumentError, match="measure"):
        tune(task, n_trials=3, measure=object())
    with pytest.raises(ArgumentError, match="cannot open the Optuna storage"):
        tune(task, n_trials=3, measure=FakeMeasurer(), storage="nosuchdb://x")


def test_a_database_url_passes_through(task, tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first = tune(task, n_trials=4, measure=FakeMeasurer(), storage=url)
    again = tune(task, n_trials=6, measure=FakeMeasurer(), storage=url, resume=True)
    assert len(first.trials) == 4 and len(again.trials) == 6
    assert (tmp_path / "study.db").exists()


SLOW_RUN = """
import sys, time
from tests.tuner.test_search import FakeMeasurer
from ember.tuner import create_task, tune

class Slow(FakeMeasurer):
    def measure(self, task, configs):
        time.sleep(0.05)
        return super().measure(task, configs)

tune(create_task("tiny_add.llvm", (48,)), n_trials=300, records=sys.argv[1], measure=Slow(),
     retime_rounds=0)
"""


def test_a_sigkilled_run_resumes_losing_at_most_the_candidate_in_flight(task, tmp_path):
    import os
    import signal
    import time
    from pathlib import Path

    log = tmp_path / "killed.jsonl"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", SLOW_RUN, str(log)], cwd=root)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not log.exists() or log.read_text().count("\n") < 8):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    written = len(read_records(log))
    assert 8 <= written < 300
    fake = FakeMeasurer()
    result = tune(task, n_trials=written + 5, records=log, measure=fake, resume=True)
    assert len(result.trials) == written + 5
    assert len(fake.calls) in (5, 4)  # 4 when the killed run had told a trial it had not logged
    assert len(read_records(log)) >= written + 4
