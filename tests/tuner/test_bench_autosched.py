"""``benchmarks/bench_autosched.py``'s table-making code, on a small fake pool (nothing is
built or timed), so the script cannot rot: the replays, the cost-model rows and every table."""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("optuna")
pytest.importorskip("lightgbm")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import autosched_replay as R  # noqa: E402
import autosched_workloads as W  # noqa: E402
import bench_autosched as B  # noqa: E402

from ember.tuner.auto import create_auto_task  # noqa: E402
from ember.tuner.auto.features import N_FEATURES  # noqa: E402
from ember.tuner.encode import SpaceEncoding  # noqa: E402


def fake_pool(n: int, seed: int) -> tuple[list[R.PoolEntry], SpaceEncoding]:
    """Distinct configs of a real auto task's space, with a made-up cost that depends on the
    parameters and features that carry it (so a model can learn the order)."""
    task = create_auto_task(W.matmul, (24, 20, 12), "llvm")
    enc = SpaceEncoding(task.config_space)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    pool, seen = [], set()
    while len(pool) < n:
        cfg = task.config_space.sample(rng)
        if cfg in seen:
            continue
        seen.add(cfg)
        params = enc.encode(cfg)
        x = nrng.random(N_FEATURES)
        cost = 1e-5 * (1.0 + 4.0 * x[0] + 0.01 * sum(params.values()))
        pool.append(R.PoolEntry(cfg, params, x, cost))
    return pool, enc


def test_replays_count_trials_within_the_pool():
    pool, enc = fake_pool(24, seed=1)
    best = min(e.cost for e in pool)
    for seed in range(2):
        for n in (R.replay_random(pool, seed), R.replay_tpe(pool, enc, seed)):
            assert 1 <= n <= len(pool)
    # the snapping finds a pool config's own parameters, and never a measured one
    index = R.PoolIndex(enc, pool)
    free = np.ones(len(pool), dtype=bool)
    assert index.nearest(pool[5].params, free) == 5
    free[5] = False
    assert index.nearest(pool[5].params, free) != 5
    assert any(R.qualifies(pool, i, best) for i in range(len(pool)))


def test_tables_print_every_task_strategy_and_goal():
    pool, enc = fake_pool(24, seed=2)
    other, _ = fake_pool(16, seed=3)
    pools = {"fake": pool}
    res = B.efficiency_results(pools, {"fake": enc}, [0, 1], proposals=4, eps=0.2)
    assert set(res["fake"]) == set(R.STRATEGIES)
    assert all(1 <= n <= len(pool) for v in res["fake"].values() for n in v)
    text = R.efficiency_table(res, pools)
    assert "fake" in text and "model+TPE" in text and "random" in text
    assert re.search(r"\n-+", text)

    rows = B.costmodel_rows({"fake": pool + other}, folds=2, seeds=[0])
    assert rows[0]["samples"] == 40
    assert rows[0]["acc"] > 0.7 > rows[0]["shuffled"]  # the made-up cost is learnable
    assert "pairwise acc" in R.costmodel_table(rows)

    cold, warm, cross = B.warm_runs(pool, enc, {"other": other}, [0], proposals=4, eps=0.2)
    assert 1 <= cold[0] <= len(pool) and 1 <= warm[0] <= len(pool)
    assert cross > 0.7  # the other pool's made-up costs follow the same rule
    assert "warm: other" in R.warm_table("fake", ["other"], cold, warm)

    reach = R.reach_table(
        [
            {
                "task": "t",
                "template": "matmul.llvm",
                "template_trials": 3,
                "template_cost": 2e-5,
                "auto_trials": 3,
                "auto_cost": 1e-5,
                "template_turns": 2e-5,
                "auto_turns": 1e-5,
            }
        ]
    )
    assert "2.00" in reach and "yes" in reach


def test_quick_defaults_and_printed_settings():
    a = B.parse(["efficiency", "--quick", "--seeds", "2", "--seed", "3"])
    assert (a.trials, a.template_trials, a.long, a.seed_list) == (30, 30, 120, [3, 4])
    full = B.parse(["reach", "--trials", "50"])
    assert (full.trials, full.template_trials, full.long) == (50, 50, 1000)
    assert [t.name for t in W.tasks(True)] == ["matmul128x128x128", "conv16->16@14"]


def test_pool_is_measured_in_chunks_and_resumed(tmp_path, monkeypatch):
    """A pool is appended chunk by chunk (each chunk's fallback time in its records'
    messages, its costs as measured), and a second run measures only what the first did
    not record."""
    import autosched_pool as P

    task = create_auto_task(W.matmul, (24, 20, 12), "llvm")
    timed: list[int] = []
    anchor = iter([1e-3, 2e-3, 4e-3])  # the fallback reads slower chunk by chunk

    def fake_turns(mods, data, rounds, seed, min_repeat_ms):
        timed.append(len(mods) - 1)  # mods[0] is the fallback, the anchor
        return [[next(anchor)] * rounds] + [[1e-4 * (i + 1)] * rounds for i in range(len(mods) - 1)]

    monkeypatch.setattr(P, "time_by_turns", fake_turns)
    path = P.ensure_pool(task, 5, tmp_path, 3, 1.0, seed=0, log=lambda *a: None, chunk=3)
    recs = list(P.read_records(path))
    assert timed == [3, 2] and len(recs) == 5 and all(r.ok for r in recs)
    # costs as measured, whatever the fallback read (it swung 1.5x where configs did not)
    assert [round(r.cost / 1e-4, 6) for r in recs] == [1.0, 2.0, 3.0, 1.0, 2.0]
    assert "anchor 0.001 s" in recs[0].message and "anchor 0.002 s" in recs[3].message

    # a run cut short: the last record lost; the next run measures that config alone
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))
    P.ensure_pool(task, 5, tmp_path, 3, 1.0, seed=0, log=lambda *a: None, chunk=3)
    recs = list(P.read_records(path))
    assert timed == [3, 2, 1] and len(recs) == 5
    assert round(recs[-1].cost / 1e-4, 6) == 1.0
    assert len(P.load_pool(task, path)) == 5
    P.ensure_pool(task, 5, tmp_path, 3, 1.0, seed=0, log=lambda *a: None, chunk=3)
    assert timed == [3, 2, 1]  # complete: nothing measured


def test_a_failed_config_is_recorded_and_not_built_again(tmp_path, monkeypatch):
    import autosched_pool as P

    from ember.errors import ScheduleError

    task = create_auto_task(W.matmul, (24, 20, 12), "llvm")
    real_build, builds = P.ember.build, []

    def build(s, tensors, target):
        builds.append(1)
        if len(builds) == 3:  # the fallback, one config, then this one
            raise ScheduleError("refused")
        return real_build(s, tensors, target=target)

    monkeypatch.setattr(P.ember, "build", build)
    path = P.ensure_pool(task, 3, tmp_path, 1, 1.0, seed=0, log=lambda *a: None)
    recs = list(P.read_records(path))
    assert [r.error for r in recs] == ["ok", "ok", "compile"] and not recs[2].costs
    assert len(P.load_pool(task, path)) == 2
    builds.clear()
    P.ensure_pool(task, 3, tmp_path, 1, 1.0, seed=0, log=lambda *a: None)
    assert builds == []  # every sampled config is on record: nothing built


def test_a_config_slower_than_the_cap_is_a_timeout(tmp_path, monkeypatch):
    import autosched_pool as P

    task = create_auto_task(W.matmul, (24, 20, 12), "llvm")
    monkeypatch.setattr(P, "SLOW_CALL_S", 0.0)  # every checking call is over it
    path = P.ensure_pool(task, 2, tmp_path, 1, 1.0, seed=0, log=lambda *a: None)
    assert [r.error for r in P.read_records(path)] == ["timeout", "timeout"]


def test_the_sample_is_kept_beside_the_pool(tmp_path, monkeypatch):
    import autosched_pool as P

    task = create_auto_task(W.matmul, (24, 20, 12), "llvm")
    drawn = []
    real = P.sample_configs
    monkeypatch.setattr(P, "sample_configs", lambda *a: drawn.append(1) or real(*a))
    path = P.pool_path(tmp_path, task)
    first = P._sample(task, 4, 0, path)
    assert P._sample(task, 4, 0, path) == first and drawn == [1]  # read back, not drawn
    assert P._sample(task, 5, 0, path)[:4] == first and drawn == [1, 1]  # another n: drawn
    path.with_name(f"{path.stem}.sample.json").write_text("{not json")
    assert P._sample(task, 5, 0, path)[:4] == first and len(drawn) == 3
