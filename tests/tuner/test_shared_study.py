"""Many runners, one study: tuning workers sharing a PostgreSQL study.

A real server is started on loopback (``postgres_server.py``). Two worker processes
tune the same task against it at once; together they measure the study's budget
with no config measured twice and no measured trial missing from their records. A
trial whose worker died on another host (a stale heartbeat) is failed and measured
again by the next worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.tuner.postgres_server import postgres_server, why_unavailable

pytest.importorskip("optuna")
REASON = why_unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))
ROOT = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import sys, time
    import ember
    import tests.tuner.templates  # noqa: F401  (registers tiny_add.llvm)
    from ember.tuner import create_task, tune
    from ember.tuner.result import MeasureResult

    class SlowFake:
        device_name = "fake-device"
        jobs = 1
        def measure(self, task, configs):
            time.sleep(0.05)   # long enough for the two workers to interleave
            return [MeasureResult((1.0 + c.index % 97,)) for c in configs]
        def close(self):
            pass

    url, seed, records, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    task = create_task("tiny_add.llvm", args=(4096,), target="llvm")
    result = tune(task, n_trials=n, storage=url, records=records, measure=SlowFake(),
                  sampler="random", seed=seed, study_name="shared")
    print(len([t for t in result.trials]), result.stopped)
    """
)


@pytest.fixture(scope="module")
def database():
    with postgres_server() as url:
        yield url


def _measured_trials(url: str, name: str) -> list:
    import optuna

    study = optuna.load_study(study_name=name, storage=url)
    return [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("measured")]


def _record_indices(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [json.loads(line)["config"]["index"] for line in path.read_text().splitlines()]


def test_two_workers_share_one_study(database, tmp_path):
    budget = 14
    logs = [tmp_path / f"worker{i}.jsonl" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, database, str(i), str(logs[i]), str(budget)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    measured = _measured_trials(database, "shared")
    indices = [t.user_attrs["config_index"] for t in measured]
    assert len(indices) == len(set(indices)), "a config was measured twice"
    # Each worker stops once the study holds the budget; the last batches may overlap.
    assert budget <= len(measured) <= budget + 1
    recorded = [_record_indices(log) for log in logs]
    assert all(recorded), "both workers measured candidates"
    assert sorted(recorded[0] + recorded[1]) == sorted(indices), "records and study disagree"


def test_a_dead_workers_trial_is_retried(database, tmp_path, monkeypatch):
    import optuna

    import tests.tuner.templates  # noqa: F401
    from ember.tuner import create_task, tune
    from ember.tuner.encode import SpaceEncoding
    from ember.tuner.result import MeasureResult

    tune_module = sys.modules["ember.tuner.tune"]
    monkeypatch.setattr(tune_module, "HEARTBEAT_INTERVAL", 1)
    monkeypatch.setattr(tune_module, "GRACE_PERIOD", 2)
    task = create_task("tiny_add.llvm", args=(4096,), target="llvm")
    storage = tune_module.open_storage(database, None)
    study = optuna.create_study(study_name="orphan", storage=storage, direction="minimize")
    cfg = next(c for c in (task.config_space.get(i) for i in range(50, 500)) if c.is_valid())
    # A worker on another host asked for this config, beat once, then died.
    study.enqueue_trial(SpaceEncoding(task.config_space).encode(cfg))
    trial = study.ask()
    trial.set_user_attr("owner", "another-host:4242")
    trial.set_user_attr("config_index", cfg.index)
    storage.record_heartbeat(trial._trial_id)
    time.sleep(2.5)

    seen: list[int] = []

    class Fake:
        device_name = "fake-device"
        jobs = 1

        def measure(self, task, configs):
            seen.extend(c.index for c in configs)
            return [MeasureResult((1.0,)) for _ in configs]

        def close(self):
            pass

    tune(task, n_trials=3, storage=database, measure=Fake(), seed=0, study_name="orphan")
    assert cfg.index in seen, "the dead worker's candidate was not measured again"
    states = {t.number: t.state.name for t in study.get_trials(deepcopy=False)}
    assert states[trial.number] == "FAIL"
