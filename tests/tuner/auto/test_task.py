"""Auto tasks through the ordinary tuner: tune, records with steps, replay, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ember
from ember.backend import get_backend
from ember.cli import main
from ember.errors import ArgumentError, ConfigError, EmberError, LoweringError
from ember.tuner import apply_history_best, read_records, tune
from ember.tuner.auto import apply_steps, create_auto_task, register_workload, steps_from_json
from ember.tuner.auto import task as auto_task
from ember.tuner.auto.space import is_fallback_choice
from ember.tuner.records import host_device_name
from ember.tuner.result import ErrorKind, MeasureResult
from ember.tuner.space import ConfigEntity
from tests.tuner.auto import workloads as w

SHAPE = (5, 6, 4)  # m, n, k


def _arrays(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    m, n, k = SHAPE
    return [rng.uniform(-1, 1, s).astype("float32") for s in ((m, k), (k, n), (n,))]


def _reference(a, b, bias):
    return np.maximum(a.astype(np.float64) @ b + bias, 0.0)


def _run(s, args) -> np.ndarray:
    a, b, bias = _arrays()
    out = np.full(SHAPE[:2], np.nan, "float32")
    ember.build(s, args, target="llvm")(a, b, bias, out)
    return out


class InProcessMeasurer:
    """Builds, checks against numpy and times each candidate in this process (the
    isolated workers of ``LocalMeasurer`` take seconds to start); a candidate the task
    turns down is ``invalid_config``, as the worker reports it. The untuned schedule (the
    ``fallback`` sketch choice, which has no steps) is built and checked but reported at
    ``fallback_cost`` seconds where that is set: timed for real it can win on a loaded
    machine, and the tests of recorded steps need a sketch to be best."""

    device_name = host_device_name()
    jobs = 1

    def __init__(self, fallback_cost: float | None = None) -> None:
        self.fallback_cost = fallback_cost

    def measure(self, task, configs):
        out = []
        for cfg in configs:
            try:
                s, args = task.instantiate(cfg)
            except EmberError as e:
                out.append(MeasureResult.failed(ErrorKind.INVALID_CONFIG, str(e)))
                continue
            mod = ember.build(s, args, target="llvm")
            a, b, bias = _arrays()
            c = np.full(SHAPE[:2], np.nan, "float32")
            costs = mod.time_evaluator(number=2, repeat=2)(a, b, bias, c).results
            if not np.allclose(c, _reference(a, b, bias), rtol=1e-4, atol=1e-4):
                out.append(MeasureResult.failed(ErrorKind.WRONG_RESULT, "differs from numpy"))
            elif self.fallback_cost is not None and is_fallback_choice(cfg):
                out.append(MeasureResult((self.fallback_cost,) * 2))
            else:
                out.append(MeasureResult(tuple(costs)))
        return out

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    records = tmp_path_factory.mktemp("auto") / "auto.jsonl"
    task = create_auto_task(w.matmul_bias_relu, SHAPE, "llvm")
    measure = InProcessMeasurer(fallback_cost=1.0)
    result = tune(task, n_trials=8, records=records, measure=measure, seed=0, retime_rounds=0)
    return task, result, records


def test_tuning_an_auto_task_finds_a_kernel_that_matches_numpy(tuned):
    task, result, _ = tuned
    assert task.name == "auto/tests.tuner.auto.workloads.matmul_bias_relu.llvm"
    assert task.args == SHAPE
    assert list(task.config_space.knobs["sketch"].candidates) == [
        "tile+fuse1",
        "tile+fuse2",
        "fallback",
    ]
    assert len(result.trials) == 8 and result.errors == {}
    out = _run(*task.instantiate(result.best_config))
    np.testing.assert_allclose(out, _reference(*_arrays()), rtol=1e-4, atol=1e-4)


def test_records_store_the_steps_and_replay_them(tuned):
    task, result, records = tuned
    recs = read_records(records)
    assert len(recs) == 8 and all(r.template == task.name for r in recs)
    best = min(recs, key=lambda r: r.cost)
    steps = steps_from_json(best.config["steps"])
    assert best.config["steps"]["version"] == 1 and steps
    assert best.config == result.best_config.to_json()
    # the recorded steps alone rebuild the kernel, without the task or its space
    replayed = ember.lower(*apply_steps(w.matmul_bias_relu(*SHAPE), steps))
    with apply_history_best(records):
        s, args = task.instantiate()  # no config: the best record's
    assert str(ember.lower(s, args)) == str(replayed)
    np.testing.assert_allclose(_run(s, args), _reference(*_arrays()), rtol=1e-4, atol=1e-4)


def test_a_record_whose_steps_differ_from_the_space_is_refused(tuned):
    task, result, _ = tuned
    data = json.loads(json.dumps(result.best_config.to_json()))
    data["steps"]["steps"] = data["steps"]["steps"][:-1]
    with pytest.raises(ConfigError, match="'steps' differ"):
        ConfigEntity.from_json(data, task.config_space)


def test_records_show_prints_the_steps(tuned, capsys):
    _, _, records = tuned
    assert main(["records", "best", str(records)]) == 0
    out = capsys.readouterr().out
    assert "steps of record 1 (auto/tests.tuner.auto.workloads.matmul_bias_relu.llvm" in out
    assert "compute_inline D" in out and "compute_at C E" in out


def test_a_candidate_that_fails_verification_is_an_invalid_config(tuned, monkeypatch):
    task, result, _ = tuned

    def broken(*args, **kwargs):
        raise LoweringError("made up")

    monkeypatch.setattr(auto_task, "schedule_to_primfunc", broken)
    with pytest.raises(ConfigError, match="fails verification: made up"):
        task.instantiate(result.best_config)
    got = InProcessMeasurer().measure(task, [result.best_config])
    assert got[0].error is ErrorKind.INVALID_CONFIG


def test_the_fallback_is_the_backends_generic_schedule():
    task = create_auto_task(w.matmul_bias_relu, SHAPE)
    s, args = task.instantiate()  # no records: the generic schedule, not a sketch's
    fresh = w.matmul_bias_relu(*SHAPE)
    generic = get_backend("llvm").schedule(fresh[-1:])
    assert str(ember.lower(s, args)) == str(ember.lower(generic, fresh))
    np.testing.assert_allclose(_run(s, args), _reference(*_arrays()), rtol=1e-4, atol=1e-4)
    cuda = create_auto_task(w.matmul_bias_relu, SHAPE, "cuda")
    s, args = cuda.instantiate()
    assert any(a.bind is not None for st in s.stages for a in st.iter_attrs.values())


def test_workloads_must_be_registered_module_level_functions():
    with pytest.raises(ArgumentError, match="module-level function"):
        register_workload(lambda: [])
    with pytest.raises(ArgumentError, match="is not registered; decorate"):
        create_auto_task(_reference, ())
    with pytest.raises(ArgumentError, match="is not registered"):
        create_auto_task("tests.tuner.auto.workloads.nothing", ())
    task = create_auto_task("tests.tuner.auto.workloads.matmul", (4, 4, 4))
    assert task.name == "auto/tests.tuner.auto.workloads.matmul.llvm"
    with pytest.raises(ArgumentError, match="takes arguments"):
        create_auto_task(w.matmul, (4, 4))
    cuda = create_auto_task(w.matmul, (4, 4, 4), "cuda")
    assert cuda.name == "auto/tests.tuner.auto.workloads.matmul.cuda"


def test_a_target_kind_without_rules_is_refused(monkeypatch):
    monkeypatch.setattr(auto_task, "RULES", {"llvm": auto_task.CPU_RULES})
    with pytest.raises(ConfigError, match="not for target 'cuda"):
        create_auto_task(w.matmul, (4, 4, 4), "cuda")
