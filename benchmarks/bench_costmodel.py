"""The learned cost model on real timings: held-out ranking accuracy and trials-to-95%.

Run: ``python benchmarks/bench_costmodel.py`` (two small matmul.llvm shapes, ``--configs``
random valid configs each plus the fallback: 2 minutes for the first shape and 12 for the
second on a 2-core machine at load 10; ``--reuse`` re-reads the records, about a minute).
Each config is built once and timed in this process by turns (``--rounds`` rounds over
all configs in a shuffled order, each a batch of at least 20 ms; the cost is the median
round), with ``EMBER_NUM_THREADS`` set to ``--threads`` (1 by default: steadier on a
shared machine). The measured configs are written as tuning records
(``--out``/<task key>.jsonl), so the rest is reproducible from the records alone.

Printed per shape:

- pairwise ranking accuracy of the model on held-out configs (``--folds``-fold
  cross-validation), the same with the training costs shuffled (chance, ~0.5), and of a
  model trained on the other shape's configs alone;
- trials to reach 95% of the pool's best throughput, median over ``--seeds`` seeds, when
  the measured pool is searched (an offline replay: each "measurement" reads the pool)
  in random order, by the model trained online (rounds of 8: the top 6 plus 2 random
  explorers), and by the model warm-started from the other shape's records.

``--fixture PATH`` writes the first shape's records there (the test fixture
``tests/tuner/data/costmodel_matmul.jsonl`` was made by this script).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SHAPES = [(96, 160, 112), (160, 224, 192)]
TARGET = 0.95


def pick_configs(task: Any, n: int, seed: int) -> list[Any]:
    """The fallback (when valid) and ``n`` distinct random valid configs."""
    # the fallback's choices, as the tuner seeds a study with
    from ember.tuner.tune import fallback_entity

    rng = random.Random(seed)
    out = [c for c in [fallback_entity(task)] if c is not None]
    for _ in range(100 * n):
        if len(out) > n:
            break
        cfg = task.config_space.sample(rng)
        if cfg not in out:
            out.append(cfg)
    return out


def measure(task: Any, configs: list[Any], rounds: int, seed: int) -> list[list[float]]:
    """Seconds per call of each config, one entry per round, timed by turns."""
    import numpy as np

    import ember

    M, N, K, _ = task.args
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    want = a @ b
    mods = []
    for cfg in configs:
        s, args = task.instantiate(cfg)
        mod = ember.build(s, args, target="llvm")
        c = np.zeros((M, N), "float32")
        mod(a, b, c)
        np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3)
        mods.append((mod, c))
    costs: list[list[float]] = [[] for _ in configs]
    order = list(range(len(configs)))
    for _ in range(rounds):
        random.Random(seed + len(costs[0])).shuffle(order)
        for i in order:
            mod, c = mods[i]
            res = mod.time_evaluator(number=1, repeat=1, min_repeat_ms=20)(a, b, c)
            costs[i].append(float(res.mean))
    return costs


def write_records(
    path: Path,
    task: Any,
    configs: list[Any],
    costs: list[list[float]],
    failed: Sequence[tuple[Any, str]] = (),
    note: str = "",
    append: bool = False,
) -> None:
    """Measured ``configs`` (and ``failed`` ones, each with its error kind) as tuning
    records, timestamps 0 so the file is reproducible; the file replaced unless ``append``."""
    from dataclasses import replace

    from ember.tuner.records import RecordWriter, host_device_name, task_record

    path.parent.mkdir(parents=True, exist_ok=True)
    if not append:
        path.unlink(missing_ok=True)
    device = host_device_name()
    rows = [(cfg, cs, "ok") for cfg, cs in zip(configs, costs)]
    rows += [(cfg, (), kind) for cfg, kind in failed]
    with RecordWriter(path) as w:
        for cfg, cs, kind in rows:
            w.write(replace(task_record(task, cfg, cs, kind, device, note), timestamp=0.0))


def kfold_accuracy(samples: list[Any], folds: int, seed: int, shuffle: bool) -> float:
    """Mean pairwise accuracy over held-out folds (training costs permuted when ``shuffle``)."""
    from ember.tuner.auto.cost_model import (
        CostModel,
        Sample,
        pairwise_accuracy,
        relative_throughput,
    )

    idx = list(range(len(samples)))
    random.Random(seed).shuffle(idx)
    accs = []
    for f in range(folds):
        test = [samples[i] for i in idx[f::folds]]
        train = [samples[i] for j, i in enumerate(idx) if j % folds != f]
        if shuffle:
            costs = [s.cost for s in train]
            random.Random(seed + f).shuffle(costs)
            train = [Sample(s.group, s.features, c) for s, c in zip(train, costs)]
        model = CostModel(seed=seed).fit(train)
        accs.append(
            pairwise_accuracy(relative_throughput(test), model.predict([s.features for s in test]))
        )
    return statistics.mean(accs)


def trials_to_target(
    samples: list[Any], seed: int, guided: bool, prior: list[Any] = (), batch: int = 8
) -> int:
    """Trials until a config within 95% of the pool's best is measured (offline replay)."""
    from ember.tuner.auto.cost_model import CostModel

    best = min(s.cost for s in samples)
    rng = random.Random(seed)
    left = list(range(len(samples)))
    rng.shuffle(left)
    model = CostModel(seed=seed).fit(list(prior))
    measured: list[Any] = []
    while left:
        if guided and model.trained:
            ranked = [left[i] for i in model.rank([samples[i].features for i in left])]
            top, rest = ranked[: batch - 2], ranked[batch - 2 :]
            pick = top + rng.sample(rest, min(2, len(rest)))
        else:
            pick = left[:batch]
        for i in pick:
            left.remove(i)
            measured.append(samples[i])
            if best / samples[i].cost >= TARGET:
                return len(measured)
        if guided:
            model.fit([*prior, *measured])
    return len(measured)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", type=int, default=70)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--folds", type=int, default=4)
    p.add_argument("--out", default="/tmp/ember-bench-costmodel")
    p.add_argument("--fixture", default=None)
    p.add_argument("--reuse", action="store_true", help="read --out's records, measure nothing")
    args = p.parse_args()
    os.environ["EMBER_NUM_THREADS"] = args.threads
    # Ember is imported once EMBER_NUM_THREADS is set
    from ember.tuner.auto.cost_model import (
        CostModel,
        pairwise_accuracy,
        relative_throughput,
        samples_from_records,
    )
    from ember.tuner.records import read_records
    from ember.tuner.task import create_task

    print(f"cost model bench: matmul.llvm {SHAPES}, {args.configs}+1 configs, {args.rounds} "
          f"rounds, threads={args.threads}, seeds={args.seeds}, folds={args.folds}")  # fmt: skip
    data = []
    for shape in SHAPES:
        task = create_task("matmul.llvm", (*shape, "float32"), "llvm")
        path = Path(args.out) / f"{task.key}.jsonl"
        if not args.reuse:
            t0 = time.perf_counter()
            configs = pick_configs(task, args.configs, seed=sum(shape))
            costs = measure(task, configs, args.rounds, seed=0)
            write_records(path, task, configs, costs)
            print(f"  {shape}: measured {len(configs)} configs in {time.perf_counter() - t0:.0f} s")
        if args.fixture and shape == SHAPES[0]:
            Path(args.fixture).write_bytes(path.read_bytes())
        data.append(samples_from_records(read_records(path)))
    for k, (shape, samples) in enumerate(zip(SHAPES, data)):
        other = data[1 - k]
        costs = sorted(s.cost for s in samples)
        acc = [kfold_accuracy(samples, args.folds, s, False) for s in range(args.seeds)]
        sh = [kfold_accuracy(samples, args.folds, s, True) for s in range(args.seeds)]
        runs = {
            "random": [trials_to_target(samples, s, False) for s in range(args.seeds)],
            "model": [trials_to_target(samples, s, True) for s in range(args.seeds)],
            "model+warm": [trials_to_target(samples, s, True, other) for s in range(args.seeds)],
        }
        print(f"{shape}: {len(samples)} configs, best {costs[0] * 1e6:.1f} us, median "
              f"{costs[len(costs) // 2] * 1e6:.1f} us, worst {costs[-1] * 1e6:.1f} us")  # fmt: skip
        print(f"  held-out pairwise accuracy {statistics.median(acc):.3f} "
              f"(shuffled labels {statistics.median(sh):.3f})")  # fmt: skip
        cross = CostModel(seed=0).fit(other).predict([s.features for s in samples])
        print(f"  trained on the other shape only: pairwise accuracy "
              f"{pairwise_accuracy(relative_throughput(samples), cross):.3f}")  # fmt: skip
        within = sum(1 for c in costs if costs[0] / c >= TARGET)
        print(f"  trials to 95% of best ({within} configs qualify), median [quartiles] over "
              f"{args.seeds} seeds:")  # fmt: skip
        for name, v in runs.items():
            q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
            print(f"    {name:<11} {statistics.median(v):5.1f} [{q[0]:.0f}-{q[2]:.0f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
