"""The search loop: Optuna proposes configs, a measurer times them, Optuna learns.

Sits between the encoding (:mod:`ember.tuner.encode`), a measurer
(:mod:`ember.tuner.measure`, or a fake one in tests) and ``tune``
(:mod:`ember.tuner.tune`), which makes the study and writes records. It uses Optuna's
ask-and-tell interface rather than ``study.optimize`` so that a batch of ``jobs``
candidates can be built in parallel and so that what counts as a trial stays ours:

- a config the space's constraints (or the template, or ``verify_gpu``) turn down is
  told to Optuna as PRUNED (TPE then ranks it with the bad trials) and is never built;
  the nearest valid config to one the constraints refuse is measured next
  (:mod:`ember.tuner.repair`);
- a config seen before is told its known value and not measured again, and a config
  no trial has had is queued next, drawn at random;
- ``n_trials`` counts *measured* candidates: built and run, whatever the outcome. A
  candidate that failed (compile, runtime, timeout, wrong result, crash) is told as
  FAIL and also counts.

The loop ends after ``n_trials`` measured candidates, after ``early_stopping``
measured candidates without a better cost, when the space (or the grid) is exhausted,
at ``timeout`` seconds, or after ``max_attempts`` proposals.

The samplers by name are :mod:`ember.tuner.samplers`; who owns a trial when several
processes tune one study (owner names, heartbeats) is :mod:`ember.tuner.trial_owners`.
"""

from __future__ import annotations

import math
import random
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ember.tuner.encode import SpaceEncoding
from ember.tuner.repair import nearest_valid
from ember.tuner.result import ErrorKind, Measurer, MeasureResult
from ember.tuner.samplers import SAMPLERS, make_sampler  # noqa: F401 - re-exported
from ember.tuner.space import ConfigEntity
from ember.tuner.trial_owners import OWNER, Heartbeat, abandoned

# Spaces up to this many configs list their unseen ones when random draws find none
# (see Search._queue_unseen).
LISTED_SPACE = 1 << 16


@dataclass(frozen=True)
class TrialRecord:
    """One measured candidate, in measuring order (``number`` counts from 0)."""

    number: int
    config: ConfigEntity
    result: MeasureResult
    best_cost: float


@dataclass
class SearchState:
    """Progress of one search; ``trials`` is the history for convergence plots."""

    n_trials: int
    trials: list[TrialRecord] = field(default_factory=list)
    rejected: int = 0
    duplicates: int = 0
    errors: Counter = field(default_factory=Counter)
    best_config: ConfigEntity | None = None
    best_cost: float = math.inf
    since_best: int = 0
    stopped: str = ""
    started: float = field(default_factory=time.monotonic)

    @property
    def measured(self) -> int:
        return len(self.trials)

    def add(self, config: ConfigEntity, result: MeasureResult) -> TrialRecord:
        self.errors[result.error] += 0 if result.ok else 1
        if result.ok and result.cost < self.best_cost:
            self.best_cost, self.best_config, self.since_best = result.cost, config, 0
        else:
            self.since_best += 1
        record = TrialRecord(self.measured, config, result, self.best_cost)
        self.trials.append(record)
        return record


@dataclass
class SearchOptions:
    """How long and how widely a search runs: trials, parallel jobs, stopping rules."""

    n_trials: int
    jobs: int = 1
    early_stopping: int | None = None
    timeout: float | None = None
    max_attempts: int | None = None


Callback = Callable[[SearchState, TrialRecord | None], None]


class Search:
    """One task's search over one study; ``run`` drives it to the end."""

    def __init__(
        self,
        task: Any,
        study: Any,
        measurer: Measurer,
        options: SearchOptions,
        on_trial: Callback | None = None,
        state: SearchState | None = None,
    ) -> None:
        self.task, self.study, self.measurer, self.opt = task, study, measurer, options
        self.encoding = SpaceEncoding(task.config_space)
        self.on_trial = on_trial
        self.state = state or SearchState(options.n_trials)
        self.known: dict[int, MeasureResult] = {}
        self.seen: set[int] = set()
        self.taken_in: set[int] = set()  # trial numbers already accounted for
        self.elsewhere: set[int] = set()  # configs being measured by another process
        self.heartbeat = Heartbeat.start(study)
        self.attempts = 0

    def enqueue(self, configs: Sequence[ConfigEntity]) -> None:
        """Measure these configs first, in order (the fallback, transferred configs)."""
        for cfg in configs:
            self.study.enqueue_trial(self.encoding.encode(cfg), skip_if_exists=True)

    def restore(self) -> None:
        """Take in the study's trials that this search has not seen yet.

        Called once when a run resumes a study, and before each batch (so that several
        processes tuning one study on a shared database see each other's work): measured
        trials count towards ``n_trials`` and are never measured again; a trial RUNNING in
        another live process keeps its config taken; a trial left RUNNING by a killed
        process on this host is failed (its candidate is lost); with heartbeats on, Optuna
        fails trials whose heartbeat went stale (a killed worker on another host) and its
        retry callback asks for them again.
        """
        # optional dependency: optuna
        from optuna.trial import TrialState

        if self.heartbeat is not None:
            # optional dependency: optuna
            from optuna.storages import fail_stale_trials

            fail_stale_trials(self.study)
        self.elsewhere.clear()
        for t in self.study.get_trials(deepcopy=False):
            if t.number in self.taken_in:
                continue
            index = t.user_attrs.get("config_index")
            if t.state == TrialState.RUNNING:
                owner = t.user_attrs.get("owner")
                if owner == OWNER:
                    continue
                # On a database the owner is written just after the ask, so a trial without
                # one may be another worker's of a moment ago: heartbeats judge it there.
                shared_and_young = owner is None and self.heartbeat is not None
                if abandoned(owner) and not shared_and_young:
                    self.study.tell(t.number, state=TrialState.FAIL)
                elif index is not None:
                    self.seen.add(index)
                    self.elsewhere.add(index)
                continue
            if t.state == TrialState.WAITING:
                continue
            self.taken_in.add(t.number)
            if index is None:
                continue
            self.seen.add(index)
            if not t.user_attrs.get("measured"):
                continue
            if t.state == TrialState.COMPLETE:
                result = MeasureResult((float(t.value),))
            else:
                error = ErrorKind(t.user_attrs.get("error", ErrorKind.CRASH.value))
                result = MeasureResult.failed(error, "from an earlier run")
            self.known[index] = result
            self.state.add(self.task.config_space.get(index), result)

    def run(self) -> SearchState:
        opt, state = self.opt, self.state
        limit = opt.max_attempts or 20 * opt.n_trials + 200
        while not state.stopped:
            self.restore()
            batch = self._propose(min(opt.jobs, opt.n_trials - state.measured), limit)
            if batch:
                for trial, _ in batch:
                    if self.heartbeat is not None:
                        self.heartbeat.watch(trial)
                results = self.measurer.measure(self.task, [cfg for _, cfg in batch])
                for (trial, cfg), result in zip(batch, results):
                    self._tell(trial, cfg, result)
                    if self.heartbeat is not None:
                        self.heartbeat.forget(trial)
            state.stopped = state.stopped or self._why_stop(limit)
        if self.heartbeat is not None:
            self.heartbeat.stop()
        return state

    def _why_stop(self, limit: int) -> str:
        opt, state = self.opt, self.state
        if state.measured >= opt.n_trials:
            return "n_trials"
        if opt.early_stopping is not None and state.since_best >= opt.early_stopping:
            return "early_stopping"
        if opt.timeout is not None and time.monotonic() - state.started > opt.timeout:
            return "timeout"
        if len(self.seen) >= self.task.config_space.size or self._grid_exhausted():
            return "space_exhausted"
        if self.attempts >= limit:
            return "max_attempts"
        return ""

    def _grid_exhausted(self) -> bool:
        check = getattr(self.study.sampler, "is_exhausted", None)
        return bool(check and check(self.study))

    def _propose(self, want: int, limit: int) -> list[tuple[Any, ConfigEntity]]:
        """Ask until ``want`` new, valid configs are in hand (or a stop condition holds)."""
        batch: list[tuple[Any, ConfigEntity]] = []
        in_batch: set[int] = set()
        while (
            len(batch) < want and not self._why_stop(limit) and not self._batch_exhausts(in_batch)
        ):
            with warnings.catch_warnings():  # Optuna warns that ask/tell does not beat itself
                warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
                trial = self.study.ask()
            self.taken_in.add(trial.number)
            trial.set_user_attr("owner", OWNER)
            self.attempts += 1
            cfg = self.encoding.suggest(trial)
            self.seen.add(cfg.index)
            trial.set_user_attr("config_index", cfg.index)
            if (
                cfg.index in self.known
                or cfg.index in in_batch
                or cfg.index in self.elsewhere
                or self._held_elsewhere(trial.number, cfg.index)
            ):
                self._tell_known(trial, cfg)
                self._queue_unseen()
            elif not cfg.is_valid():
                self._reject(trial, cfg)
            else:
                in_batch.add(cfg.index)
                batch.append((trial, cfg))
        return batch

    def _reject(self, trial: Any, cfg: ConfigEntity) -> None:
        """Turn down a config the constraints refuse: told as PRUNED, so the sampler
        learns to keep off the invalid region, and its nearest valid config queued next,
        so the sampler also learns what the valid part of that region is worth (else a
        narrow valid region, mostly rejections, looks bad: see :mod:`ember.tuner.repair`).
        A grid search walks its grid and repairs nothing."""
        # optional dependency: optuna
        from optuna.samplers import GridSampler
        from optuna.trial import TrialState

        trial.set_user_attr("error", ErrorKind.INVALID_CONFIG.value)
        self.study.tell(trial, state=TrialState.PRUNED)
        self.state.rejected += 1
        if isinstance(self.study.sampler, GridSampler):
            return
        fixed = nearest_valid(cfg)
        if fixed is not None and fixed.index not in self.seen:
            self.study.enqueue_trial(self.encoding.encode(fixed), skip_if_exists=True)

    def _queue_unseen(self) -> None:
        """After a duplicate, queue a config no trial has had yet, drawn at random: a
        sampler that keeps proposing what it knows (CMA-ES once it has converged, TPE on
        an almost exhausted space) then still moves on, where before it could spend every
        attempt up to ``max_attempts`` on duplicates (CMA-ES measured 19 of a 48-config
        space in 10,181 attempts). AutoTVM's model-based tuners do the same when their
        model picks points already visited. A grid search has no duplicates to answer."""
        # optional dependency: optuna
        from optuna.samplers import GridSampler

        if isinstance(self.study.sampler, GridSampler):
            return
        space = self.task.config_space
        taken = self.seen | self.elsewhere
        if len(taken) >= space.size:
            return
        rng = random.Random(self.attempts * 1_000_003 + len(taken))  # reproducible runs
        # a few draws find a new config unless the space is nearly exhausted; only then
        # (and only for a space small enough) are the unseen ones listed
        draws = (rng.randrange(space.size) for _ in range(64))
        index = next((i for i in draws if i not in taken), -1)
        if index < 0 and space.size <= LISTED_SPACE:
            index = rng.choice([i for i in range(space.size) if i not in taken])
        if index < 0:
            return
        self.study.enqueue_trial(self.encoding.encode(space.get(index)), skip_if_exists=True)

    def _held_elsewhere(self, number: int, index: int) -> bool:
        """On a shared database, whether another trial already holds config ``index``.

        Another worker may have asked for the same config in the moment between its ask
        and writing the config's index, unseen by :meth:`restore`. Checked after this
        trial's own index is written, the later of two such workers always sees the
        earlier and lets the config go (both may, which loses a proposal, never a
        measurement)."""
        if self.heartbeat is None:
            return False
        # optional dependency: optuna
        from optuna.trial import TrialState

        live = (TrialState.RUNNING, TrialState.COMPLETE, TrialState.FAIL)
        return any(
            t.number != number
            and t.user_attrs.get("config_index") == index
            and (t.state != TrialState.FAIL or t.user_attrs.get("measured"))  # not a dead one's
            for t in self.study.get_trials(deepcopy=False, states=live)
        )

    def _batch_exhausts(self, in_batch: set[int]) -> bool:
        return bool(in_batch) and len(self.seen) >= self.task.config_space.size

    def _tell_known(self, trial: Any, cfg: ConfigEntity) -> None:
        # optional dependency: optuna
        from optuna.trial import TrialState

        self.state.duplicates += 1
        known = self.known.get(cfg.index)
        if known is not None and known.ok:
            self.study.tell(trial, known.cost)
        else:  # failed before, or still in this batch: nothing to learn twice
            self.study.tell(trial, state=TrialState.PRUNED)

    def _tell(self, trial: Any, cfg: ConfigEntity, result: MeasureResult) -> None:
        # optional dependency: optuna
        from optuna.trial import TrialState

        self.known[cfg.index] = result
        trial.set_user_attr("error", result.error.value)
        if result.error is ErrorKind.INVALID_CONFIG:  # the template refused it in the builder
            self.study.tell(trial, state=TrialState.PRUNED)
            self.state.rejected += 1
            return
        trial.set_user_attr("measured", True)
        if result.ok:
            self.study.tell(trial, result.cost)
        else:
            self.study.tell(trial, state=TrialState.FAIL)
        record = self.state.add(cfg, result)
        if self.on_trial is not None:
            self.on_trial(self.state, record)
