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

A full-size pool (1,000 configs of a 1024^3 matmul) takes hours on two cores, so it is
measured in chunks of :data:`CHUNK` configs, each chunk's records appended as soon as it
is timed (a config that fails to build or check is recorded with its error kind), and a
run that stops part way is resumed by the next: the sample is the same for the same seed,
and the configs already recorded are skipped. Each chunk also times the fallback by turns
with its configs (the *anchor*), kept in every record's message, but its costs are not
scaled by it: on the 1024^3 matmul pool the anchor (a memory-bound generic kernel) read
104-112 ms in some chunks and 158-170 in others while each chunk's best config read
20.6-28 ms, so scaling by it made whole chunks 1.5x slower than they ran. ``n`` at most
``chunk`` is one chunk, timed by turns as a whole, as before.
"""

from __future__ import annotations

import json
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
from ember.tuner.result import ErrorKind
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


CHUNK = 100  # configs built and timed by turns together (see the module notes)
Failed = list[tuple[ConfigEntity, ErrorKind]]  # configs that failed, and why
# A config whose checking call takes longer is recorded as a timeout and not timed: the
# tuner's runner (10 s a run, warm-up and repeats included) would have timed it out too,
# and timing the slowest random configs of a 1024^3 matmul by turns took most of a pool.
SLOW_CALL_S = 1.0


def measure_configs(
    task: Any, configs: Sequence[ConfigEntity], rounds: int, min_repeat_ms: float
) -> tuple[list[ConfigEntity], list[list[float]], Failed, list[float]]:
    """Build, check and time ``configs`` by turns with the task's fallback: the ones that
    pass and their costs, the ones that failed with why (a build refused, a wrong result,
    a check over :data:`SLOW_CALL_S`), and the fallback's costs."""
    s, tensors = task.instantiate(None)
    ref = random_inputs(tensors, seed=0)
    fallback = ember.build(s, tensors, target="llvm")
    fallback(*ref)
    want = ref[-1].copy()
    ok, mods, data = [], [fallback], [[a.copy() for a in ref]]
    failed: Failed = []
    for cfg in configs:
        try:
            s, tensors = task.instantiate(cfg)
            mod = ember.build(s, tensors, target="llvm")
        except EmberError:
            failed.append((cfg, ErrorKind.COMPILE))
            continue
        args = [a.copy() for a in ref]
        args[-1][...] = 0
        try:
            t0 = time.perf_counter()
            mod(*args)
            took = time.perf_counter() - t0
            np.testing.assert_allclose(args[-1], want, rtol=1e-3, atol=1e-3)
        except (EmberError, AssertionError):
            failed.append((cfg, ErrorKind.WRONG_RESULT))
            continue
        if took > SLOW_CALL_S:
            failed.append((cfg, ErrorKind.TIMEOUT))
            continue
        ok.append(cfg)
        mods.append(mod)
        data.append(args)
    costs = time_by_turns(mods, data, rounds, 0, min_repeat_ms)
    return ok, costs[1:], failed, costs[0]


def pool_path(folder: str | Path, task: Any) -> Path:
    """Where a task's pool records are kept."""
    return Path(folder) / f"{task.key}.jsonl"


def _sample(task: Any, n: int, seed: int, path: Path) -> list[ConfigEntity]:
    """:func:`sample_configs`, kept beside the pool (``.sample.json``) on the first run:
    instantiating a thousand candidates to draw them took minutes, at every resume."""
    kept = path.with_name(f"{path.stem}.sample.json")
    try:
        data = json.loads(kept.read_text())
        if data.get("n") == n and data.get("seed") == seed and data.get("task") == task.key:
            return [ConfigEntity.from_json(c, task.config_space) for c in data["configs"]]
    except (OSError, ValueError, KeyError, TypeError, EmberError):
        pass  # none kept, or not this sample: draw it
    configs = sample_configs(task, n, seed)
    kept.parent.mkdir(parents=True, exist_ok=True)
    record = {"task": task.key, "n": n, "seed": seed, "configs": [c.to_json() for c in configs]}
    kept.write_text(json.dumps(record))
    return configs


def _config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def _recorded(path: Path, task: Any) -> tuple[set[str], int]:
    """The configs of ``task`` already in the pool at ``path`` (measured or failed) and how
    many of them are ok."""
    keys: set[str] = set()
    ok = 0
    if path.exists():
        for rec in read_records(path):
            if rec.task_key != task.key:
                continue
            keys.add(_config_key(rec.config))
            ok += rec.ok
    return keys, ok


def ensure_pool(
    task: Any,
    n: int,
    folder: str | Path,
    rounds: int,
    min_repeat_ms: float,
    seed: int,
    log: Any = print,
    chunk: int = CHUNK,
) -> Path:
    """The task's pool records: the ``n`` configs sampled with ``seed``, those not yet in
    ``folder`` measured now, ``chunk`` at a time (see the module notes)."""
    path = pool_path(folder, task)
    keys, ok_count = _recorded(path, task)
    if ok_count >= n:  # a pool written whole (before chunks) or complete
        log(f"  {task.name}{task.args}: pool read from {path}")
        return path
    todo = [c for c in _sample(task, n, seed, path) if _config_key(c.to_json()) not in keys]
    if not todo:
        log(f"  {task.name}{task.args}: pool read from {path}")
        return path
    log(f"  {task.name}{task.args}: {len(keys)} of {n} configs recorded, measuring "
        f"{len(todo)} in chunks of {chunk} -> {path}")  # fmt: skip
    for start in range(0, len(todo), chunk):
        t0 = time.perf_counter()
        ok, costs, failed, anchor_costs = measure_configs(
            task, todo[start : start + chunk], rounds, min_repeat_ms
        )
        own = median_cost(anchor_costs)
        kinds = [(cfg, kind.value) for cfg, kind in failed]
        write_records(path, task, ok, costs, kinds, f"anchor {own:.6g} s", append=True)
        log(f"    chunk {start // chunk + 1}: {len(ok)} configs measured, {len(failed)} failed, "
            f"fallback {own * 1e3:.3f} ms, {time.perf_counter() - t0:.0f} s")  # fmt: skip
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
