"""Template-free search (issue 24): reach, sample efficiency and the cost model, as tables.

Run: ``python benchmarks/bench_autosched.py {reach,efficiency,costmodel,all} [--quick]
[--task NAME ...]``.
Every budget and seed is a flag and is printed with the tables. ``--quick`` uses small
shapes (matmul 128^3, a 16->16 3x3 conv at 14^2; the new shape of the warm-start test
96x160x112) and small budgets; without it, the issue's tasks (matmul 1024^3, ResNet-18's
64->64 3x3 conv at 56^2; new shape 512x768x384). Workloads: ``autosched_workloads.py``.
``EMBER_NUM_THREADS`` is ``--threads`` (1 by default: steadier on a shared machine).

- ``reach`` (live): the template task (``matmul.llvm``, ``--conv-template``) tuned for
  ``--template-trials`` and the auto task (generated sketches, the learned cost model on,
  cold) for ``--trials``, both by ``ember.tuner.tune`` with its isolated measuring workers
  and seed ``--seed``. The two best configs are then rebuilt here and re-timed by turns
  (``--rounds`` rounds); the ratio template/auto >= 0.9 is the issue's goal.
- ``efficiency`` (replayed): a pool of ``--long`` random valid configs of each auto task
  is measured once here (checked against the fallback, timed by turns) and kept as
  records in ``--pool-records``; the pool's best stands for the best of a long run. Trials
  to reach 95% of it, median [quartiles] over ``--seeds`` seeds, for the search with the
  cost model, TPE alone, and random sampling, each replayed over the pool (what exactly is
  simulated: ``autosched_replay.py``'s notes). Goal: <= 64 with the model.
- ``costmodel`` (from the pool records): held-out pairwise ranking accuracy per task
  (``--folds``-fold, against the same with shuffled training costs; goal >= 0.8), and
  trials to 95% on the new shape's pool for the model-guided replay, cold against
  warm-started from the other tasks' pools, and the accuracy on the new shape of the model
  trained on the other tasks alone.

Limits. The pool's best is the best of random configs, not of a long search: on the quick
conv the live auto search found a config 1.7x faster than a 120-config pool's best, so the
efficiency counts measure how fast each rule finds the pool's top, not the space's. (The
``conv2d_NCHWc.llvm`` configs with other channel blocks than the fallback's used to fail
on inputs prepared in the fallback's layout; the measurer now prepares inputs per
layout, ``tests/tuner/test_measure_layouts.py``.) Cost: ``all --quick`` took about 16
minutes on 2 cores at load 3-7 (reach 8.5, efficiency 5.5, costmodel 2.5). At full size
on a Zen 4 guest, ``reach`` took 8 minutes for the conv and 16 for the matmul; the three
1000-config pools take hours, so they are measured in chunks that a later run resumes
(``autosched_pool.py``): keep ``--pool-records`` across runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import autosched_workloads as w
from autosched_pool import ensure_pool, load_pool, random_inputs, time_by_turns
from autosched_replay import (
    PoolEntry,
    PoolIndex,
    costmodel_table,
    efficiency_table,
    reach_table,
    replay_random,
    replay_tpe,
    warm_table,
)
from bench_costmodel import kfold_accuracy

import ember
from ember.tuner import tune
from ember.tuner.auto import create_auto_task
from ember.tuner.auto.cost_model import CostModel, Sample, pairwise_accuracy, relative_throughput
from ember.tuner.encode import SpaceEncoding
from ember.tuner.task import create_task

QUICK = {"trials": 30, "template_trials": 30, "long": 120, "seeds": 5}
FULL = {"trials": 200, "template_trials": None, "long": 1000, "seeds": 5}


def efficiency_results(
    pools: dict[str, list[Any]],
    encodings: dict[str, Any],
    seeds: list[int],
    proposals: int,
    eps: float,
) -> dict[str, dict[str, list[int]]]:
    """Trials to 95% per task and strategy, one count per seed (replayed over the pools)."""
    out: dict[str, dict[str, list[int]]] = {}
    for name, pool in pools.items():
        index = PoolIndex(encodings[name], pool)
        out[name] = {
            "model": [
                replay_tpe(pool, encodings[name], s, True, (), proposals, eps, index) for s in seeds
            ],
            "tpe": [replay_tpe(pool, encodings[name], s, index=index) for s in seeds],
            "random": [replay_random(pool, s) for s in seeds],
        }
    return out


def costmodel_rows(
    pools: dict[str, list[Any]], folds: int, seeds: list[int]
) -> list[dict[str, Any]]:
    """Held-out pairwise accuracy per task (median over seeds of the k-fold mean)."""
    rows = []
    for name, pool in pools.items():
        samples = [Sample(name, e.features, e.cost) for e in pool]
        acc = [kfold_accuracy(samples, folds, s, False) for s in seeds]
        sh = [kfold_accuracy(samples, folds, s, True) for s in seeds]
        rows.append(
            {
                "task": name,
                "samples": len(samples),
                "acc": statistics.median(acc),
                "shuffled": statistics.median(sh),
            }
        )
    return rows


def warm_runs(
    pool: list[Any],
    encoding: Any,
    priors: dict[str, list[Any]],
    seeds: list[int],
    proposals: int,
    eps: float,
) -> tuple[list[int], list[int], float]:
    """Trials to 95% on ``pool`` with the model cold and warm-started from ``priors``, and
    the pairwise accuracy on ``pool`` of the model trained on ``priors`` alone."""
    prior = [Sample(n, e.features, e.cost) for n, p in priors.items() for e in p]
    index = PoolIndex(encoding, pool)
    cold = [replay_tpe(pool, encoding, s, True, (), proposals, eps, index) for s in seeds]
    warm = [replay_tpe(pool, encoding, s, True, prior, proposals, eps, index) for s in seeds]
    mine = [Sample("new", e.features, e.cost) for e in pool]
    scores = CostModel(seed=seeds[0]).fit(prior).predict([e.features for e in pool])
    return cold, warm, pairwise_accuracy(relative_throughput(mine), scores)


def run_reach(a: argparse.Namespace, tasks: list[Any]) -> None:
    """Tune the template and the auto task live, then re-time both bests by turns."""
    rows = []
    for t in tasks:
        folder = Path(a.out) / "reach" / t.name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        tt = create_task(t.template, t.template_args, "llvm")
        at = create_auto_task(t.workload, t.args, "llvm")
        t0 = time.perf_counter()
        rt = tune(tt, a.template_trials, records=folder / "template.jsonl", seed=a.seed)
        t1 = time.perf_counter()
        ra = tune(at, a.trials, records=folder / "auto.jsonl", seed=a.seed, cost_model=True)
        t2 = time.perf_counter()
        print(f"  {t.name}: template {len(rt.trials)} trials in {t1 - t0:.0f} s (errors "
              f"{rt.errors or 'none'}), auto {len(ra.trials)} trials in {t2 - t1:.0f} s "
              f"(errors {ra.errors or 'none'})")  # fmt: skip
        mods, data = [], []
        for task, res in ((tt, rt), (at, ra)):
            if res.best_config is None:
                print(f"  {task.name}: no config measured; its fallback is re-timed")
            s, tensors = task.instantiate(res.best_config)
            mods.append(ember.build(s, tensors, target="llvm"))
            data.append(random_inputs(tensors, seed=0))
        turns = time_by_turns(mods, data, a.rounds, a.seed, a.min_repeat_ms)
        rows.append(
            {
                "task": t.name,
                "template": t.template,
                "template_trials": len(rt.trials),
                "template_cost": rt.best_cost,
                "auto_trials": len(ra.trials),
                "auto_cost": ra.best_cost,
                "template_turns": statistics.median(turns[0]),
                "auto_turns": statistics.median(turns[1]),
            }
        )
    print(f"\nreach: best of each search; ratio = template us / auto us (>= 0.9 is the goal); "
          f"'by turns' re-times both bests here, {a.rounds} rounds")  # fmt: skip
    print(reach_table(rows))


def load_pools(
    a: argparse.Namespace, tasks: list[Any]
) -> tuple[dict[str, list[PoolEntry]], dict[str, SpaceEncoding]]:
    """Each task's pool (measured now or read from ``--pool-records``) and encoding."""
    pools: dict[str, list[PoolEntry]] = {}
    encs: dict[str, SpaceEncoding] = {}
    for t in tasks:
        task = create_auto_task(t.workload, t.args, "llvm")
        path = ensure_pool(task, a.long, a.pool_records, a.rounds, a.min_repeat_ms, a.seed)
        pools[t.name] = load_pool(task, path)
        encs[t.name] = SpaceEncoding(task.config_space)
    return pools, encs


def run_efficiency(a: argparse.Namespace, tasks: list[Any]) -> None:
    """Replay the three strategies over each task's pool and print trials to 95%."""
    pools, encs = load_pools(a, tasks)
    t0 = time.perf_counter()
    res = efficiency_results(pools, encs, a.seed_list, a.proposals, a.eps)
    print(f"\nefficiency: trials to 95% of the pool's best (pool = {a.long} random configs, "
          f"the 'long run'), median [quartiles] over seeds {a.seed_list}; replayed over the "
          f"measured pool in {time.perf_counter() - t0:.0f} s (model: {a.proposals} TPE "
          f"proposals per trial, eps={a.eps})")  # fmt: skip
    print(efficiency_table(res, pools))


def run_costmodel(a: argparse.Namespace, tasks: list[Any], new: Any) -> None:
    """Held-out accuracy per task; cold against warm start on the new shape."""
    pools, _ = load_pools(a, tasks)
    rows = costmodel_rows(pools, a.folds, a.seed_list)
    print(f"\ncostmodel: held-out pairwise accuracy, {a.folds}-fold, median over seeds "
          f"{a.seed_list}")  # fmt: skip
    print(costmodel_table(rows))
    npools, nencs = load_pools(a, [new])
    cold, warm, cross = warm_runs(
        npools[new.name], nencs[new.name], pools, a.seed_list, a.proposals, a.eps
    )
    print(f"\nwarm start: trials to 95% of the new shape's pool best ({a.long} configs), "
          f"model-guided replay, median [quartiles] over seeds {a.seed_list}")  # fmt: skip
    print(warm_table(new.name, list(pools), cold, warm))
    print(f"pairwise accuracy on the new shape's pool of the model trained on the other "
          f"tasks' pools alone: {cross:.3f}")  # fmt: skip


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (budgets left unset take the ``--quick`` or full defaults)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("section", choices=["reach", "efficiency", "costmodel", "all"])
    p.add_argument("--quick", action="store_true", help="small shapes and budgets")
    p.add_argument("--trials", type=int, help="auto search budget (reach): 200, quick 30")
    p.add_argument("--template-trials", type=int, help="template budget: --trials, quick 30")
    p.add_argument("--long", type=int, help="pool size, the 'long run': 1000, quick 120")
    p.add_argument("--seeds", type=int, help="seeds per replay: 5")
    p.add_argument("--seed", type=int, default=0, help="first seed; tuning and pool seed")
    p.add_argument("--pool-records", default=None, help="pool records folder (a cache)")
    p.add_argument("--out", default="/tmp/ember-bench-autosched")
    p.add_argument("--conv-template", default="conv2d_NCHWc.llvm")
    p.add_argument("--task", action="append", help="run only the tasks so named (repeatable)")
    p.add_argument("--threads", default="1")
    p.add_argument("--rounds", type=int, default=3, help="timing rounds by turns")
    p.add_argument("--min-repeat-ms", type=float, default=10.0)
    p.add_argument("--folds", type=int, default=4)
    p.add_argument("--proposals", type=int, default=8, help="TPE proposals per guided trial")
    p.add_argument("--eps", type=float, default=0.2, help="explorer share of guided trials")
    a = p.parse_args(argv)
    defaults = QUICK if a.quick else FULL
    for k in ("trials", "long", "seeds"):
        if getattr(a, k) is None:
            setattr(a, k, defaults[k])
    if a.template_trials is None:
        a.template_trials = defaults["template_trials"] or a.trials
    a.pool_records = a.pool_records or str(Path(a.out) / ("pool-quick" if a.quick else "pool"))
    a.seed_list = list(range(a.seed, a.seed + a.seeds))
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the chosen section(s) and print their tables."""
    a = parse(argv)
    os.environ["EMBER_NUM_THREADS"] = a.threads  # read per call, and by the spawned workers
    tasks = [t for t in w.tasks(a.quick, a.conv_template) if not a.task or t.name in a.task]
    if not tasks:
        raise SystemExit(f"--task: none of {a.task} is a task of this run")
    load = os.getloadavg()
    print(f"bench_autosched {a.section}{' --quick' if a.quick else ''}: tasks "
          f"{[t.name for t in tasks]}; trials={a.trials} template-trials={a.template_trials} "
          f"long={a.long} seeds={a.seed_list} seed={a.seed} threads={a.threads} "
          f"rounds={a.rounds} min-repeat-ms={a.min_repeat_ms} folds={a.folds} "
          f"pool-records={a.pool_records}; load average {load[0]:.1f} on "
          f"{os.cpu_count()} cores")  # fmt: skip
    t0 = time.perf_counter()
    if a.section in ("reach", "all"):
        run_reach(a, tasks)
    if a.section in ("efficiency", "all"):
        run_efficiency(a, tasks)
    if a.section in ("costmodel", "all"):
        run_costmodel(a, tasks, w.new_shape_task(a.quick))
    print(f"\n({a.section} took {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
