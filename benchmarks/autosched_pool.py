"""Measured pools of auto-scheduled configs, kept as tuning records, and timing by turns.

``ensure_pool`` samples ``n`` distinct random configs of an auto task that instantiate and
pass verification (the tuner's ``config_space.sample``: every sketch, every knob), builds
each in this process, checks its output against the task's fallback (the generic
schedule, built by other code), and times them by turns: ``rounds`` rounds over all
configs in a shuffled order, each run a batch of at least ``min_repeat_ms``; a config's
cost is its median round. The pool is written as ordinary tuning records
(``<dir>/<task key>.jsonl``, via ``bench_costmodel.write_records``) and read back from
there on the next run: the replays and the cost-model tables are reproducible from the
records alone.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from autosched_replay import PoolEntry
from bench_costmodel import write_records

import ember
from ember.errors import EmberError
from ember.tir.topi.transform import static_shape
from ember.tuner.auto.features import features_of_config
from ember.tuner.encode import SpaceEncoding
from ember.tuner.records import read_records
from ember.tuner.space import ConfigEntity


def random_inputs(tensors: Sequence[Any], seed: int) -> list[np.ndarray]:
    """Random float data for every tensor (the outputs are overwritten by the kernel)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(static_shape(t)).astype(t.dtype) for t in tensors]


def sample_configs(task: Any, n: int, seed: int) -> list[ConfigEntity]:
    """``n`` distinct random configs that instantiate (constraints and verification pass)."""
    rng = random.Random(seed)
    out: list[ConfigEntity] = []
    seen: set[ConfigEntity] = set()
    for _ in range(50 * n):
        if len(out) >= n:
            break
        cfg = task.config_space.sample(rng)
        if cfg in seen:
            continue
        seen.add(cfg)
        try:
            task.instantiate(cfg)
        except EmberError:
            continue
        out.append(cfg)
    return out


def time_by_turns(
    mods: Sequence[Any],
    data: Sequence[list[np.ndarray]],
    rounds: int,
    seed: int,
    min_repeat_ms: float,
) -> list[list[float]]:
    """Seconds per call of each module, one entry per round, rounds in shuffled orders."""
    costs: list[list[float]] = [[] for _ in mods]
    order = list(range(len(mods)))
    for r in range(rounds):
        random.Random(seed + r).shuffle(order)
        for i in order:
            ev = mods[i].time_evaluator(number=1, repeat=1, min_repeat_ms=min_repeat_ms)
            costs[i].append(float(ev(*data[i]).mean))
    return costs


def measure_configs(
    task: Any, configs: Sequence[ConfigEntity], rounds: int, min_repeat_ms: float
) -> tuple[list[ConfigEntity], list[list[float]], int]:
    """Build, check and time ``configs``: the ones that pass, their costs, how many failed."""
    s, tensors = task.instantiate(None)
    ref = random_inputs(tensors, seed=0)
    ember.build(s, tensors, target="llvm")(*ref)
    want = ref[-1].copy()
    ok, mods, data, failed = [], [], [], 0
    for cfg in configs:
        try:
            s, tensors = task.instantiate(cfg)
            mod = ember.build(s, tensors, target="llvm")
            args = [a.copy() for a in ref]
            args[-1][...] = 0
            mod(*args)
            np.testing.assert_allclose(args[-1], want, rtol=1e-3, atol=1e-3)
        except (EmberError, AssertionError):
            failed += 1
            continue
        ok.append(cfg)
        mods.append(mod)
        data.append(args)
    return ok, time_by_turns(mods, data, rounds, 0, min_repeat_ms), failed


def pool_path(folder: str | Path, task: Any) -> Path:
    """Where a task's pool records are kept."""
    return Path(folder) / f"{task.key}.jsonl"


def ensure_pool(
    task: Any,
    n: int,
    folder: str | Path,
    rounds: int,
    min_repeat_ms: float,
    seed: int,
    log: Any = print,
) -> Path:
    """The task's pool records, measured now unless ``folder`` already holds ``n`` of them."""
    path = pool_path(folder, task)
    if path.exists() and sum(r.ok for r in read_records(path)) >= n:
        log(f"  {task.name}{task.args}: pool read from {path}")
        return path
    t0 = time.perf_counter()
    configs = sample_configs(task, n, seed)
    ok, costs, failed = measure_configs(task, configs, rounds, min_repeat_ms)
    write_records(path, task, ok, costs)
    log(f"  pool of {len(ok)} configs measured in {time.perf_counter() - t0:.0f} s "
        f"({failed} failed to build or check) -> {path}")  # fmt: skip
    return path


def load_pool(task: Any, path: str | Path) -> list[PoolEntry]:
    """The pool's entries: each ok record's config, its parameters, features and cost."""
    enc = SpaceEncoding(task.config_space)
    out = []
    for rec in read_records(path):
        if not rec.ok or rec.task_key != task.key:
            continue
        cfg = ConfigEntity.from_json(rec.config, task.config_space)
        out.append(PoolEntry(cfg, enc.encode(cfg), features_of_config(task, cfg), rec.cost))
    return out


def median_cost(costs: Sequence[float]) -> float:
    """The median of a config's rounds."""
    return float(statistics.median(costs))
