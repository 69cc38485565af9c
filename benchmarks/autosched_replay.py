"""Search strategies replayed over a measured pool, and the tables ``bench_autosched.py`` prints.

A pool is a fixed set of distinct random valid configs of one auto-scheduled task, each
measured once (:mod:`autosched_pool`). A replay runs a strategy as if it were tuning, but
each "measurement" reads the pool: the strategy picks one unmeasured pool config per
trial by its own rule, and the replay counts the trials until it has picked one within
95% of the pool's best throughput. Nothing is timed during a replay, so every strategy
sees the same timings and the counts differ by the rule alone. What is simulated:

- ``random``: the pool in a seeded random order (random sampling of the same sketches);
- ``tpe``: the tuner's own Optuna TPE sampler (``make_sampler("tpe", seed, ...)``, over
  the tuner's parameter encoding) asked for one config per trial; the proposal is
  snapped to the nearest unmeasured pool config (same sketch first, then the smallest
  distance over that sketch's parameters: normalised index distance for ordered ones,
  mismatch for categorical ones); the proposal is told FAIL (ignored by TPE) and the
  snapped config is added as a COMPLETE trial with its pool cost;
- ``model``: as ``tpe``, with the learned cost model choosing as
  :class:`~ember.tuner.auto.guided.ModelGuidedSearch` does with one measuring job:
  ``proposals`` TPE proposals per trial (snapped to distinct pool configs), the model's
  best of them measured (with probability ``eps`` a random one of them, the explorer),
  the others told PRUNED; the model (cold, or fitted on ``prior`` samples: warm start)
  is refitted on every measured config before the next trial. As in the live search,
  :data:`~ember.tuner.auto.guided.RANDOM_SHARE` of each trial's candidates are not TPE's
  but unmeasured pool configs drawn uniformly (the pool is a uniform sample of the
  space), ranked by the model with TPE's.

The snapping is the approximation: the live search measures TPE's proposal itself.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.tuner.auto.cost_model import CostModel, Sample
from ember.tuner.auto.guided import RANDOM_SHARE
from ember.tuner.samplers import make_sampler

TARGET = 0.95
STRATEGIES = ("model", "tpe", "random")


@dataclass(frozen=True)
class PoolEntry:
    """A measured pool config: the tuner's parameters for it, its features and its cost."""

    config: Any
    params: dict[str, int]
    features: np.ndarray
    cost: float


class PoolIndex:
    """Nearest-unmeasured-config look-ups over a pool, in the tuner's parameter encoding."""

    def __init__(self, encoding: Any, pool: Sequence[PoolEntry]) -> None:
        params = encoding.params
        self.names = [p.name for p in params]
        self.ordered = np.array([p.ordered for p in params], dtype=bool)
        self.scale = np.array([max(p.size - 1, 1) for p in params], dtype=np.float64)
        self.X = np.array([[e.params.get(n, 0) for n in self.names] for e in pool], np.float64)
        self.sketch_col = self.names.index("sketch") if "sketch" in self.names else None
        self._cols: dict[int, np.ndarray] = {}

    def _relevant(self, sketch: int) -> np.ndarray:
        # the sketch knob and the knobs of that sketch; the other sketches' knobs are inert
        if sketch not in self._cols:
            self._cols[sketch] = np.array(
                [n.startswith(f"s{sketch}.") for n in self.names], dtype=bool
            )
        return self._cols[sketch]

    def nearest(self, params: dict[str, int], free: np.ndarray) -> int:
        """The pool index nearest to ``params`` among those where ``free`` is True."""
        v = np.array([params.get(n, 0) for n in self.names], np.float64)
        d = np.where(self.ordered, np.abs(self.X - v) / self.scale, (self.X != v) * 1.0)
        if self.sketch_col is None:
            dist = d.sum(axis=1)
        else:
            sk = int(v[self.sketch_col])
            dist = d[:, self._relevant(sk)].sum(axis=1) + 100.0 * d[:, self.sketch_col]
        dist = np.where(free, dist, math.inf)
        return int(np.argmin(dist))


def qualifies(pool: Sequence[PoolEntry], i: int, best: float) -> bool:
    """Whether pool config ``i`` runs within 95% of the best throughput."""
    return best / pool[i].cost >= TARGET


def replay_random(pool: Sequence[PoolEntry], seed: int) -> int:
    """Trials to 95% when the pool is measured in a seeded random order."""
    best = min(e.cost for e in pool)
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    return next(n for n, i in enumerate(order, 1) if qualifies(pool, i, best))


def replay_tpe(
    pool: Sequence[PoolEntry],
    encoding: Any,
    seed: int,
    guided: bool = False,
    prior: Sequence[Any] = (),
    proposals: int = 8,
    eps: float = 0.2,
    index: PoolIndex | None = None,
) -> int:
    """Trials to 95% for TPE alone, or TPE with the cost model choosing (see the module notes)."""
    # optional dependency: optuna
    import optuna
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    index = index or PoolIndex(encoding, pool)
    dists = encoding.distributions()
    study = optuna.create_study(direction="minimize", sampler=make_sampler("tpe", seed, encoding))
    rng = random.Random(seed)
    best = min(e.cost for e in pool)
    free = np.ones(len(pool), dtype=bool)
    model = CostModel(seed=seed).fit(list(prior)) if guided else None
    measured: list[Any] = []
    for n in range(1, len(pool) + 1):
        many = guided and model is not None and model.trained
        share = int(proposals * RANDOM_SHARE) if many else 0
        asked, picks = [], []
        for _ in range(proposals - share if many else 1):
            if not free.any():
                break
            trial = study.ask(dists)
            i = index.nearest(trial.params, free)
            free[i] = False
            asked.append(trial)
            picks.append(i)
        for i in rng.sample(list(np.flatnonzero(free)), min(share, int(free.sum()))):
            free[i] = False  # the random share: uniform over the space, as the pool is
            picks.append(int(i))
        if many and model is not None:
            scores = model.predict([pool[i].features for i in picks])
            k = rng.randrange(len(picks)) if rng.random() < eps else int(np.argmax(scores))
        else:
            k = 0
        for j, i in enumerate(picks):
            if j != k:
                free[i] = True  # proposed, not measured: it may be proposed again
                if j < len(asked):
                    study.tell(asked[j], state=TrialState.PRUNED)
        if k < len(asked):
            study.tell(asked[k], state=TrialState.FAIL)
        chosen = pool[picks[k]]
        study.add_trial(create_trial(params=chosen.params, distributions=dists, value=chosen.cost))
        if qualifies(pool, picks[k], best):
            return n
        if model is not None:
            measured.append(Sample("replay", chosen.features, chosen.cost))
            model.fit([*prior, *measured])
    return len(pool)


def median_q(values: Sequence[float]) -> str:
    """``median [q1-q3]`` of trial counts."""
    if len(values) == 1:
        return f"{values[0]:g}"
    q = statistics.quantiles(values, n=4, method="inclusive")
    return f"{statistics.median(values):g} [{q[0]:g}-{q[2]:g}]"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table, columns padded to their widest cell."""
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def efficiency_table(results: dict[str, dict[str, list[int]]], pools: dict[str, Any]) -> str:
    """One row per task: pool size, configs that qualify, and each strategy's trials to 95%
    (median [quartiles] over seeds)."""
    rows = []
    for name, runs in results.items():
        pool = pools[name]
        best = min(e.cost for e in pool)
        within = sum(1 for i in range(len(pool)) if qualifies(pool, i, best))
        rows.append(
            [name, len(pool), within, f"{best * 1e6:.1f}"]
            + [median_q(runs[s]) for s in STRATEGIES]
            + ["yes" if statistics.median(runs["model"]) <= 64 else "no"]
        )
    head = ["task", "pool", "<=95%", "best us", "model+TPE", "TPE alone", "random", "model<=64"]
    return table(head, rows)


def reach_table(rows: Sequence[dict[str, Any]]) -> str:
    """Template best vs auto best per task, from the tuning runs and re-timed by turns."""
    out = []
    for r in rows:
        tuned = r["template_cost"] / r["auto_cost"] if r["auto_cost"] else 0.0
        turns = r["template_turns"] / r["auto_turns"] if r["auto_turns"] else 0.0
        out.append(
            [
                r["task"],
                f"{r['template']} ({r['template_trials']})",
                f"{r['template_cost'] * 1e6:.1f}",
                f"auto ({r['auto_trials']})",
                f"{r['auto_cost'] * 1e6:.1f}",
                f"{tuned:.2f}",
                f"{turns:.2f}",
                "yes" if turns >= 0.9 else "no",
            ]
        )
    head = [
        "task",
        "template (trials)",
        "us",
        "search (trials)",
        "us",
        "ratio",
        "by turns",
        ">=0.9",
    ]
    return table(head, out)


def costmodel_table(rows: Sequence[dict[str, Any]]) -> str:
    """Held-out pairwise accuracy per task (k-fold), against shuffled training costs."""
    out = [
        [
            r["task"],
            r["samples"],
            f"{r['acc']:.3f}",
            f"{r['shuffled']:.3f}",
            "yes" if r["acc"] >= 0.8 else "no",
        ]  # fmt: skip
        for r in rows
    ]
    return table(["task", "samples", "pairwise acc", "shuffled labels", ">=0.8"], out)


def warm_table(name: str, prior_from: Sequence[str], cold: list[int], warm: list[int]) -> str:
    """Trials to 95% on a new shape: the model cold against warm-started from other tasks."""
    rows = [
        [name, "cold (online only)", median_q(cold)],
        [name, "warm: " + ", ".join(prior_from), median_q(warm)],
    ]
    return table(["new shape", "cost model", "trials to 95%"], rows)
