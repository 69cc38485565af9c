"""Re-timing a search's pick against its fallback by turns (``ember.tuner.retime``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ember.tuner import create_task
from ember.tuner.measure import LocalMeasurer, MeasureOption
from ember.tuner.result import ErrorKind, MeasureResult
from ember.tuner.retime import retime
from ember.tuner.tune import fallback_entity


class NoisyMeasurer:
    """Every config's true time is ``base[index]`` seconds; each measurement is that times
    lognormal noise (sigma 0.2: this guest's run-to-run spread), as a shared machine gives."""

    def __init__(self, base: dict[int, float], seed: int = 0, fail: int | None = None):
        self.base, self.rng, self.fail, self.calls = base, np.random.default_rng(seed), fail, 0

    def measure(self, task, configs):
        self.calls += 1
        out = []
        for cfg in configs:
            if cfg.index == self.fail:
                out.append(MeasureResult.failed(ErrorKind.RUNTIME, "boom"))
                continue
            noise = self.rng.lognormal(0.0, 0.2, 3)
            out.append(MeasureResult(tuple(self.base.get(cfg.index, 1e-3) * noise)))
        return out


def _task():
    return create_task("matmul.llvm", (16, 24, 8, "float32"))


def _searched(fallback_s: float = 2e-3):
    """A task whose search timed its fallback at ``fallback_s`` and picked another config at
    1 ms: the task, the search's result, and the model task holding it."""
    from ember.tuner.search import TrialRecord
    from ember.tuner.tune import TuneResult

    task = _task()
    fallback = fallback_entity(task)
    pick = task.config_space.get((fallback.index + 1) % len(task.config_space))
    trials = [TrialRecord(0, fallback, MeasureResult((fallback_s,) * 3), fallback_s),
              TrialRecord(1, pick, MeasureResult((1e-3,) * 3), 1e-3)]  # fmt: skip
    result = TuneResult(task, pick, 1e-3, trials, 0, 0, "trials", None)
    return task, result, SimpleNamespace(task=task, weight=1, nodes=["n"])


def test_retiming_removes_the_winners_curse_of_a_search_among_equal_kernels() -> None:
    task = _task()
    space = task.config_space
    fallback = fallback_entity(task)
    others = [space.get(i) for i in range(len(space)) if i != fallback.index][:200]
    measurer = NoisyMeasurer({})  # every kernel takes 1 ms
    first = measurer.measure(task, [fallback])[0].cost
    found = measurer.measure(task, others)
    best = min(range(len(others)), key=lambda k: found[k].cost)
    searched = first / found[best].cost
    assert searched > 1.15  # the best of 200 noisy draws looks faster than it is
    again = retime(measurer, task, fallback, others[best], rounds=9)
    assert again is not None and again.rounds == 9
    assert 0.85 < again.speedup < 1.15 and abs(again.saved) < 0.15


def test_retiming_keeps_a_real_speedup() -> None:
    task = _task()
    fallback = fallback_entity(task)
    pick = task.config_space.get((fallback.index + 1) % len(task.config_space))
    measurer = NoisyMeasurer({fallback.index: 2e-3, pick.index: 1e-3}, seed=3)
    again = retime(measurer, task, fallback, pick, rounds=7)
    assert again is not None and 1.6 < again.speedup < 2.5
    assert measurer.calls == 7  # a measurer without measure_by_turns: one call per round


def test_a_pick_that_fails_when_timed_again_gives_no_retimed_figure() -> None:
    task = _task()
    fallback = fallback_entity(task)
    pick = task.config_space.get((fallback.index + 1) % len(task.config_space))
    assert retime(NoisyMeasurer({}, fail=pick.index), task, fallback, pick) is None


@pytest.mark.slow
def test_local_measurer_times_configs_by_turns_from_one_build_each(tmp_path) -> None:
    task = _task()
    fallback = fallback_entity(task)
    pick = task.config_space.get((fallback.index + 1) % len(task.config_space))
    with LocalMeasurer(MeasureOption(number=2, repeat=2, flush_cache=True)) as m:
        rounds = m.measure_by_turns(task, [fallback, pick], 3)
        assert [len(r) for r in rounds] == [2, 2, 2]
        assert all(r.ok and len(r.costs) == 2 for results in rounds for r in results)
        assert not list(m._dir.glob("cand*.so"))  # the libraries are removed at the end
        again = retime(m, task, fallback, pick, rounds=2)
    assert again is not None and again.fallback_s > 0 and again.best_s > 0


def test_the_model_summary_shows_the_retimed_speedup_and_predicts_from_it(capsys) -> None:
    from ember.cli.tune_model import print_model_summary
    from ember.graph.model_tuning import ModelCheck, RecordChoice
    from ember.tuner.retime import Retimed

    task, result, mt = _searched()
    choice = RecordChoice(frozenset({task.key}), (), {frozenset(): 1.0})
    check = ModelCheck(choice, 10e-3, 0.9, 0.9, {task.key: 4e-3}, [], 10e-3,
                       kernels=[(4e-3, (task.key,))])  # fmt: skip
    print_model_summary([mt], [result], None, check, {task.key: Retimed(2e-3, 1.6e-3, 3)})
    out = capsys.readouterr().out
    assert "1.25x re-timed (search: 2.00x)" in out
    # 4 ms in the model times the re-timed saving (0.2), not the search's (0.5)
    assert "-0.800 ms (-8.0%)" in out


def test_retime_picks_times_only_tasks_whose_pick_is_not_their_measured_fallback(capsys) -> None:
    from ember.cli.tune_model import retime_picks
    from ember.tuner.search import TrialRecord
    from ember.tuner.tune import TuneResult

    task = _task()
    fallback = fallback_entity(task)
    pick = task.config_space.get((fallback.index + 1) % len(task.config_space))
    ok = MeasureResult((1e-3,) * 3)

    def result(configs, best):  # noqa: ANN001, ANN202
        trials = [TrialRecord(k, c, ok, 1e-3) for k, c in enumerate(configs)]
        return TuneResult(task, best, 1e-3, trials, 0, 0, "trials", None)

    picked = result([fallback, pick], pick)
    kept_fallback = result([fallback, pick], fallback)  # nothing beat the untuned kernel
    no_fallback = result([pick], pick)  # a resumed study: the fallback not measured here
    measurer = NoisyMeasurer({fallback.index: 2e-3, pick.index: 1e-3}, seed=5)
    found = retime_picks(measurer, [picked, kept_fallback, no_fallback], 3)
    assert list(found) == [task.key] and measurer.calls == 3  # one task, three rounds
    assert 1.5 < found[task.key].speedup < 2.7
    assert (
        "re-timing 1 pick(s) against their fallbacks (3 rounds by turns)" in capsys.readouterr().out
    )
    assert retime_picks(measurer, [picked], 0) == {} and measurer.calls == 3


def test_a_pick_that_re_times_slower_loses_its_records_and_its_predicted_saving(
    tmp_path, capsys
) -> None:
    """A tuned kernel is never slower than the one it replaces: a task whose pick re-timed
    below its fallback has its records moved out of the log, so the model runs the
    fallback there, and the summary names it and predicts nothing from it."""
    import json

    from ember.cli.tune_model import drop_slower_picks, print_model_summary
    from ember.graph.model_tuning import ModelCheck, RecordChoice
    from ember.tuner.retime import Retimed

    log = tmp_path / "r.jsonl"
    lines = [json.dumps({"task_key": k, "n": i}) + "\n" for i, k in enumerate("abab")]
    log.write_text("".join(lines))
    retimed = {"a": Retimed(1e-3, 1.1e-3, 3), "b": Retimed(2e-3, 1e-3, 3)}
    assert drop_slower_picks(str(log), retimed) == ["a"]
    assert log.read_text() == lines[1] + lines[3]
    assert (tmp_path / "r.jsonl.dropped").read_text() == lines[0] + lines[2]
    assert "dropping 2 record line(s) of 1 task(s)" in capsys.readouterr().out
    assert drop_slower_picks(None, retimed) == []  # no log: nothing to move

    task, result, mt = _searched()
    check = ModelCheck(RecordChoice(frozenset(), [], {frozenset(): 1.0}), 10e-3, 1.0, 1.0,
                       {task.key: 4e-3}, [], 10e-3, kernels=[(4e-3, (task.key,))])  # fmt: skip
    slow = {task.key: Retimed(1e-3, 1.25e-3, 3)}
    print_model_summary([mt], [result], None, check, slow, [task.key])
    out = capsys.readouterr().out
    assert "0.80x re-timed" in out and "dropped (pick re-timed slower than its fallback)" in out
    assert "+0.000 ms (+0.0%)" in out  # predicted: the fallback runs, nothing changes


def test_the_prediction_counts_only_the_records_the_check_kept(capsys) -> None:
    """A task whose records the model check dropped runs its fallback in the model the
    summary compares against: its kernels' saving is not part of the prediction."""
    from ember.cli.tune_model import print_model_summary
    from ember.graph.model_tuning import ModelCheck, RecordChoice
    from ember.tuner.retime import Retimed

    task, result, mt = _searched()
    for kept, want in ((frozenset({task.key}), "-2.000 ms (-20.0%)"), (frozenset(), "+0.000 ms")):
        choice = RecordChoice(kept, [] if kept else [task.key], {frozenset(): 1.0, kept: 1.0})
        check = ModelCheck(choice, 10e-3, 0.9, 0.9, {task.key: 4e-3}, [], 10e-3,
                           kernels=[(4e-3, (task.key,))])  # fmt: skip
        print_model_summary([mt], [result], None, check, {task.key: Retimed(2e-3, 1e-3, 3)})
        out = capsys.readouterr().out
        assert "predicted by the kept records' kernels" in out and want in out


class LuckyPick:
    """The search sees ``pick`` at a lucky ``lucky`` seconds once; timed again, every config
    takes its ``base`` time (the fallback ``fallback_s``, the rest 2 ms)."""

    def __init__(self, fallback, pick, fallback_s: float, pick_s: float, lucky: float = 0.5e-3):
        from ember.tuner.records import host_device_name

        self.device_name = host_device_name()  # what apply_history_best reads by default
        self.fallback, self.pick, self.lucky = fallback, pick, lucky
        self.base = {fallback.index: fallback_s, pick.index: pick_s}
        self.seen_pick = False

    def measure(self, task, configs):
        out = []
        for cfg in configs:
            cost = self.base.get(cfg.index, 2e-3)
            if cfg.index == self.pick.index and not self.seen_pick:
                self.seen_pick, cost = True, self.lucky
            out.append(MeasureResult((cost,) * 3))
        return out


def _lucky_run(tmp_path, pick_s: float, **kw):
    from ember.tuner import tune

    task = _task()
    fallback, space = fallback_entity(task), task.config_space
    pick = next(c for c in map(space.get, range(len(space))) if c.is_valid() and c != fallback)
    measurer = LuckyPick(fallback, pick, 1e-3, pick_s)
    log = tmp_path / "r.jsonl"
    # the pick is enqueued second, as a transferred config would be
    result = tune(task, n_trials=3, records=log, measure=measurer, seed=0,
                  transfer=[_record(task, pick)], **kw)  # fmt: skip
    return task, fallback, pick, log, result


def _record(task, cfg, cost: float = 1e-3):
    from ember.tuner.records import task_record

    return task_record(task, cfg, (cost,), "ok", "d")


def test_tune_keeps_the_fallback_when_its_lucky_pick_re_times_slower(tmp_path) -> None:
    """The search's best (0.5 ms, once) runs 1.5 ms when timed again beside the 1 ms
    fallback: ``tune`` returns the fallback, every timing is recorded, and
    ``apply_history_best`` picks the fallback from those records too."""
    from ember.tuner import apply_history_best
    from ember.tuner.dispatch import best_config_for
    from ember.tuner.records import read_records

    task, fallback, pick, log, result = _lucky_run(tmp_path, pick_s=1.5e-3)
    assert [t.config for t in result.trials[:2]] == [fallback, pick]
    assert result.trials[1].result.cost == 0.5e-3  # the search's best, by luck
    assert result.retimed is not None and result.retimed.rounds == 3
    assert result.retimed.speedup == 1.0 and result.retimed.fallback_s == 1e-3
    assert result.kept_fallback and result.best_config == fallback
    assert result.best_cost == 1e-3
    recs = read_records(log)
    assert len(recs) == 3 + 2 * 3  # the search's trials, then both configs for 3 rounds
    assert [r.cost for r in recs if r.config == pick.to_json()] == [0.5e-3] + [1.5e-3] * 3
    with apply_history_best(log):
        assert best_config_for(task) == fallback


def test_tune_keeps_a_pick_that_re_times_faster_at_its_middle_timing(tmp_path) -> None:
    from ember.tuner import apply_history_best
    from ember.tuner.dispatch import best_config_for

    task, fallback, pick, log, result = _lucky_run(tmp_path, pick_s=0.8e-3)
    assert result.best_config == pick and not result.kept_fallback
    assert result.retimed.speedup == pytest.approx(1.25)
    assert result.best_cost == 0.8e-3  # not the lucky 0.5 ms
    with apply_history_best(log):
        assert best_config_for(task) == pick


def test_tune_times_the_next_pick_when_the_first_loses() -> None:
    """The lucky pick loses; the search's second best, timed once at 0.9 ms, is then the
    cheapest config not yet timed again, and wins its own re-timing at 0.9 ms."""
    from ember.tuner import tune

    task = _task()
    fallback, space = fallback_entity(task), task.config_space
    valid = [c for c in map(space.get, range(len(space))) if c.is_valid() and c != fallback]
    pick, second = valid[:2]
    measurer = LuckyPick(fallback, pick, 1e-3, 1.5e-3)
    measurer.base[second.index] = 0.9e-3
    recs = [_record(task, pick), _record(task, second)]
    result = tune(task, n_trials=3, measure=measurer, seed=0, transfer=recs)
    assert [t.config for t in result.trials] == [fallback, pick, second]
    assert result.best_config == second and result.best_cost == 0.9e-3
    assert result.retimed.speedup == pytest.approx(1e-3 / 0.9e-3)


def test_tune_with_retime_rounds_0_returns_the_searchs_best(tmp_path) -> None:
    task, fallback, pick, log, result = _lucky_run(tmp_path, pick_s=1.5e-3, retime_rounds=0)
    assert result.best_config == pick and result.retimed is None


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_tune_rejects_a_bad_retime_rounds(bad) -> None:
    from ember.errors import ArgumentError
    from ember.tuner import tune

    with pytest.raises(ArgumentError, match="retime_rounds"):
        tune(_task(), n_trials=1, measure=LuckyPick(*[fallback_entity(_task())] * 2, 1, 1),
             retime_rounds=bad)  # fmt: skip


def test_the_tuning_summary_says_whether_the_fallback_stood(tmp_path, capsys, monkeypatch) -> None:
    from ember.cli.tune import print_summary

    monkeypatch.setenv("COLUMNS", "200")  # rich folds cells to the terminal's width
    for pick_s, verdict in ((1.5e-3, "1.00x, the fallback stands"), (0.8e-3, "1.25x, kept")):
        *_, result = _lucky_run(tmp_path, pick_s=pick_s)
        print_summary(result, None)
        out = capsys.readouterr().out
        assert "re-timed by turns (3 rounds)" in out and verdict in out


def test_a_measurer_that_dies_while_re_timing_leaves_the_searchs_result(tmp_path, caplog) -> None:
    """An RPC server gone after the search: ``tune`` returns what the search found."""
    from ember.errors import DeviceError
    from ember.tuner import tune

    class DiesAfterSearch(LuckyPick):
        def measure(self, task, configs):
            if self.seen_pick and len(configs) == 2:
                raise DeviceError("rpc server at host:9190 is gone")
            return super().measure(task, configs)

    task = _task()
    fallback, space = fallback_entity(task), task.config_space
    pick = next(c for c in map(space.get, range(len(space))) if c.is_valid() and c != fallback)
    measurer = DiesAfterSearch(fallback, pick, 1e-3, 1.5e-3)
    result = tune(task, n_trials=3, measure=measurer, seed=0, transfer=[_record(task, pick)])
    assert result.best_config == pick and result.retimed is None and len(result.trials) == 3
    assert "re-timing the pick failed" in caplog.text and "is gone" in caplog.text


def test_transfer_ranks_a_config_timed_again_by_its_middle_timing() -> None:
    """A config that won one lucky timing and lost its re-timing is seeded after one
    steadily faster, as ``apply_history_best`` would rank them."""
    from ember.tuner.transfer import transfer_configs

    task = _task()
    space = task.config_space
    lucky, steady = [c for c in map(space.get, range(len(space))) if c.is_valid()][:2]
    recs = [_record(task, lucky, 0.5e-3), _record(task, steady, 1e-3)]
    recs += [_record(task, lucky, 1.5e-3) for _ in range(3)]
    assert transfer_configs(task, recs) == [steady, lucky]
    assert transfer_configs(task, recs[:2]) == [lucky, steady]  # each timed once


def test_a_search_whose_best_is_the_fallback_is_not_re_timed(tmp_path) -> None:
    """Nothing beat the fallback in the search: no re-timing, no extra records."""
    from ember.tuner import tune
    from ember.tuner.records import read_records

    task = _task()
    fallback, space = fallback_entity(task), task.config_space
    pick = next(c for c in map(space.get, range(len(space))) if c.is_valid() and c != fallback)
    measurer = LuckyPick(fallback, pick, 1e-3, 1.5e-3, lucky=1.5e-3)  # never lucky
    log = tmp_path / "r.jsonl"
    result = tune(task, n_trials=3, records=log, measure=measurer, seed=0,
                  transfer=[_record(task, pick)])  # fmt: skip
    assert result.best_config == fallback and result.best_cost == 1e-3
    assert result.retimed is None and not result.kept_fallback
    assert len(read_records(log)) == 3
