"""Model-guided search: rank a pool of candidates and measure only the best and a few explorers.

Sits between the cost model (:mod:`ember.tuner.auto.cost_model`) and the search loop
(:mod:`ember.tuner.search`); ``tune(task, cost_model=...)`` (:mod:`ember.tuner.tune`)
uses it. :func:`propose` is the hook a tuning round calls before it measures: it draws a
pool of candidates from a generator (the space's random sampling by default), scores
their features, and returns the ``k`` best by predicted score plus ``explore`` others
picked at random (ε-greedy, as Ansor measures its top candidates and a few random ones so
that the model keeps seeing where it is wrong).

:class:`ModelGuidedSearch` runs the same round inside the Optuna search: each batch it
asks the sampler for ``pool`` times as many valid new configs as it will measure, keeps
the model's top ones (configs queued by the tuner — the fallback, transferred configs —
always; a share ``eps`` of the measured ones, on average, picked from the pool at
random), and tells Optuna the others as PRUNED, the state it gives configs the
constraints refuse: TPE then proposes less of what the model ranks low, while the
explorers keep the model honest. A pruned config is not counted as seen, so the sampler
may propose it again once the model thinks better of it. Every measured candidate
updates the model before the next batch (a full retrain, a tenth of a second on a few
hundred samples; features cost a few milliseconds per proposal). A grid search is not
guided: it measures every point anyway. Until
the model has something to order (four measured candidates of different cost), batches
are the sampler's own.

Half of each pool (:data:`RANDOM_SHARE`) is drawn uniformly from the space and queued in
the study ahead of the sampler's proposals, so the model ranks the sampler's ideas
against configs of every part of the space, as Ansor's model ranks random and evolved
candidates together. TPE alone over a space of several sketches settles on the sketch
whose first configs happened to measure well: on a 64->64 3x3 conv at 56x56 it spent 168
of 200 trials on a sketch whose best ran 3.98 ms, and 14 on one whose best ran 2.56.

A space of at most ``ENUMERABLE`` configs (a ``dense_packed.llvm`` GEMM's 96, a row
template's handful) is ranked whole instead: every valid config not yet measured is
scored, and the batch (the top ones and the explorers) is queued in the study, so each
measured candidate costs one trial. Sampled, such a space ran out of new configs: TPE
proposed measured ones again and again, each a trial told its known cost, until the
BERT encoder's study held about 85 trials per measured candidate and ``Study.ask``
(which walks every trial) took most of the budget.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.errors import ConfigError, EmberError
from ember.tuner.auto.cost_model import CostModel, Sample
from ember.tuner.auto.features import features_of_config
from ember.tuner.result import MeasureResult
from ember.tuner.search import Search
from ember.tuner.space import ConfigEntity, ConfigSpace

ENUMERABLE = 256  # configs: a space this small is ranked whole, not sampled
# Share of each guided batch's pool drawn uniformly from the space rather than from the
# sampler (see the module notes).
RANDOM_SHARE = 0.5


def valid_configs(space: ConfigSpace) -> list[ConfigEntity]:
    """Every valid config of ``space`` (fixed knobs at their values), in index order."""
    names = list(space.knobs)
    fixed = space.fixed
    ranges = [[fixed[n]] if n in fixed else range(len(space.knobs[n])) for n in names]
    configs = (space.from_choices(dict(zip(names, c))) for c in itertools.product(*ranges))
    return sorted((c for c in configs if c.is_valid()), key=lambda c: c.index)


def choose(
    model: CostModel, rows: Sequence[np.ndarray], k: int, explore: int, rng: random.Random
) -> list[int]:
    """Indices of ``rows`` to measure: the ``k`` best predicted, then ``explore`` of the
    rest at random."""
    ranked = model.rank(rows) if len(rows) else []
    top, rest = ranked[:k], ranked[k:]
    return top + rng.sample(rest, min(explore, len(rest)))


def propose(
    task: Any,
    model: CostModel,
    k: int,
    explore: int = 2,
    pool: int = 64,
    seed: int | random.Random | None = 0,
    generator: Callable[[random.Random], ConfigEntity] | None = None,
    exclude: Sequence[ConfigEntity] = (),
) -> list[ConfigEntity]:
    """The candidates of one round: the ``k`` best of ``pool`` distinct generated configs
    by predicted score, then ``explore`` random others; configs in ``exclude`` (already
    measured) and configs that fail to instantiate are never proposed."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    draw = generator or task.config_space.sample
    seen = set(exclude)
    configs: list[ConfigEntity] = []
    rows: list[np.ndarray] = []
    for _ in range(20 * pool):
        if len(configs) >= pool:
            break
        cfg = draw(rng)
        if cfg in seen:
            continue
        seen.add(cfg)
        try:
            rows.append(features_of_config(task, cfg))
        except EmberError:
            continue
        configs.append(cfg)
    return [configs[i] for i in choose(model, rows, k, explore, rng)]


class ModelGuidedSearch(Search):
    """A :class:`~ember.tuner.search.Search` whose batches the cost model picks (see the
    module notes): ``pool`` proposals per measured candidate, a share ``eps`` of the
    measured ones picked at random from the pool (ε-greedy)."""

    def __init__(
        self,
        *args: Any,
        model: CostModel,
        pool: int = 8,
        eps: float = 0.2,
        seed: int | None = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.model, self.pool, self.eps = model, max(1, pool), min(max(eps, 0.0), 1.0)
        self.rng = random.Random(seed)
        self.rows: dict[int, np.ndarray | None] = {}
        self.pending: list[Sample] = []
        self.pinned: set[int] = set()
        self.skipped = 0
        self.restored = False
        self.whole: list[ConfigEntity] | None = None  # the space, where it is enumerable
        if self.opt.max_attempts is None:
            self.opt.max_attempts = (20 * self.opt.n_trials + 200) * self.pool

    def enqueue(self, configs: Sequence[ConfigEntity]) -> None:
        self.pinned.update(c.index for c in configs)
        super().enqueue(configs)

    def restore(self) -> None:
        super().restore()
        if self.restored:
            return
        # a resumed study: configs the model ranked out before were proposed, not seen
        self.restored = True
        for t in self.study.get_trials(deepcopy=False):
            index = t.user_attrs.get("config_index")
            if t.user_attrs.get("error") == "model_skipped" and index not in self.known:
                self.seen.discard(index)

    def _row(self, cfg: ConfigEntity) -> np.ndarray | None:
        if cfg.index not in self.rows:
            try:
                self.rows[cfg.index] = features_of_config(self.task, cfg)
            except EmberError:  # the template refuses it: the measurer will say so
                self.rows[cfg.index] = None
        return self.rows[cfg.index]

    def _propose(self, want: int, limit: int) -> list[tuple[Any, ConfigEntity]]:
        if self.pending:
            self.model.update(self.pending)
            self.pending = []
        if not self.model.trained or want < 1:
            return super()._propose(want, limit)
        if self.task.config_space.size <= ENUMERABLE:
            self._queue_ranked(want)
            return super()._propose(want, limit)
        self._queue_random(int(want * self.pool * RANDOM_SHARE))
        batch = super()._propose(want * self.pool, limit)
        pinned = [b for b in batch if b[1].index in self.pinned]
        free = [b for b in batch if b[1].index not in self.pinned]
        rows = [self._row(cfg) for _, cfg in free]
        scored = [i for i, r in enumerate(rows) if r is not None]
        free_slots = max(0, want - len(pinned))
        n_explore = int(free_slots * self.eps + self.rng.random())  # eps of them on average
        n_top = free_slots - n_explore
        picked = choose(self.model, [rows[i] for i in scored], n_top, n_explore, self.rng)  # type: ignore[misc]
        ordered = pinned + [free[scored[p]] for p in picked]
        keep = ordered[:want]
        kept = {trial.number for trial, _ in keep}
        for trial, cfg in batch:
            if trial.number not in kept:  # a queued config past this batch comes back next
                self._skip(trial, cfg, requeue=cfg.index in self.pinned)
        return keep

    def _queue_random(self, n: int) -> None:
        """Queue ``n`` valid configs drawn uniformly that no trial has had (the pool's
        random share; the model ranks them with the sampler's)."""
        space, done = self.task.config_space, set(self.known) | self.seen | self.elsewhere
        queued: set[int] = set()
        for _ in range(20 * n):
            if len(queued) >= n:
                break
            try:
                cfg = space.sample(self.rng)
            except ConfigError:  # a space almost all invalid: the sampler's share only
                return
            if cfg.index in done or cfg.index in queued:  # (sample draws valid ones)
                continue
            queued.add(cfg.index)
            self.study.enqueue_trial(
                self.encoding.encode(cfg), user_attrs={"proposal": "random"}, skip_if_exists=False
            )

    def _queue_ranked(self, want: int) -> None:
        """Queue this batch from the whole space (see the module notes): the configs
        not yet measured, the model's top ones and explorers; queued configs (the
        fallback, transferred ones) stay ahead of them."""
        if self.whole is None:
            self.whole = valid_configs(self.task.config_space)
        done = set(self.known) | self.seen | self.elsewhere
        left = [c for c in self.whole if c.index not in done and c.index not in self.pinned]
        scored = [(c, r) for c in left if (r := self._row(c)) is not None]
        free = max(0, want - len(self.pinned - done))
        n_explore = int(free * self.eps + self.rng.random())
        rows = [r for _, r in scored]
        for p in choose(self.model, rows, free - n_explore, n_explore, self.rng):
            self.study.enqueue_trial(self.encoding.encode(scored[p][0]), skip_if_exists=False)

    def run(self) -> Any:
        state = super().run()
        if self.pending:  # the last batch's measurements too
            self.model.update(self.pending)
            self.pending = []
        return state

    def _skip(self, trial: Any, cfg: ConfigEntity, requeue: bool) -> None:
        # optional dependency: optuna
        from optuna.trial import TrialState

        trial.set_user_attr("error", "model_skipped")
        self.study.tell(trial, state=TrialState.PRUNED)
        self.seen.discard(cfg.index)
        if requeue:
            self.study.enqueue_trial(self.encoding.encode(cfg), skip_if_exists=False)
        else:
            self.skipped += 1

    def _tell(self, trial: Any, cfg: ConfigEntity, result: MeasureResult) -> None:
        super()._tell(trial, cfg, result)
        row = self._row(cfg) if result.ok else None
        if row is not None:
            self.pending.append(Sample(self.task.key, row, result.cost))


__all__ = ["ModelGuidedSearch", "choose", "propose"]
