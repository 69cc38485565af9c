"""``tune_tasks``: tune the several tasks of a model under one trial budget.

Takes what ``ember.extract_tasks`` gives (objects with ``task`` and ``weight``) or
plain tasks (weight 1) and spends ``n_trials`` where the model's weighted latency,
``sum(weight * best cost)``, is expected to drop most, in the manner of Ansor's task
scheduler (the estimate below is Ember's own):

- a warm-up round gives every task ``round_trials`` trials (its fallback config first),
  so every task has a measured cost;
- then, round by round, the task with the largest expected gain gets the next
  ``round_trials``: ``weight * (recent + hope) / 2``, where ``recent`` is how fast its
  best cost fell per trial over its last round (what the search is doing now) and
  ``hope`` is ``best / (trials + 1)`` (a task tried less is more likely to improve,
  by an amount in proportion to what it costs). A task whose search stopped on its own
  (early stopping, space exhausted) gets no more rounds.

Each task keeps one Optuna study across its rounds (``resume``), so a round continues
the search rather than restarting it. ``schedule="weight"`` instead splits the budget
once in proportion to the weights (:func:`split_trials`), one ``tune`` per task.
Rounds do not re-time their picks (``tune(retime_rounds=0)``): a round's pick is not
final, and ``ember tune MODEL`` re-times each task's last pick once, at the end.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError
from ember.tuner.measure import MeasureOption
from ember.tuner.task import Task
from ember.tuner.tune import TuneResult, _measurer, tune

SCHEDULES = ("gradient", "weight")
_FINISHED = ("early_stopping", "space_exhausted", "max_attempts")


def split_trials(weights: Sequence[int], n_trials: int) -> list[int]:
    """``n_trials`` split between tasks: one each, the rest in proportion to ``weights``
    (largest remainders, ties to the earlier task). The total exceeds ``n_trials`` only
    when there are more tasks than trials."""
    total = sum(weights)
    rest = n_trials - len(weights)
    if rest <= 0 or total <= 0:
        return [1] * len(weights)
    exact = [rest * w / total for w in weights]
    shares = [int(e) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (shares[i] - exact[i], i))
    for i in order[: rest - sum(shares)]:
        shares[i] += 1
    return [1 + s for s in shares]


def expected_gain(weight: int, curve: Sequence[float], window: int) -> float:
    """How much ``weight * best cost`` is expected to drop per trial given to a task whose
    best cost after each measured trial is ``curve`` (see the module docstring)."""
    if not curve:
        return math.inf
    best, t = curve[-1], len(curve)
    if not math.isfinite(best):  # nothing worked yet: worth a round only at the start
        return math.inf if t < window else 0.0
    k = min(window, t - 1)
    earlier = curve[-1 - k] if k > 0 else math.inf
    recent = (earlier - best) / k if k > 0 and math.isfinite(earlier) else best / t
    hope = best / (t + 1)
    return weight * (recent + hope) / 2


@dataclass
class _Entry:
    task: Task
    weight: int
    storage: Any
    result: TuneResult | None = None
    rounds: int = 0
    done: bool = False
    curve: list[float] = field(default_factory=list)

    @property
    def measured(self) -> int:
        return len(self.curve)


def _entries(tasks: Sequence[Any]) -> list[tuple[Task, int]]:
    out = []
    for k, item in enumerate(tasks):
        task: object
        weight: object
        if isinstance(item, Task):
            task, weight = item, 1
        else:
            task, weight = getattr(item, "task", None), getattr(item, "weight", None)
        if not isinstance(task, Task) or isinstance(weight, bool) or not isinstance(weight, int):
            raise ArgumentError(
                f"tune_tasks: item #{k} must be a Task or have .task (a Task) and .weight "
                f"(an int), got {item!r}"
            )
        if weight < 1:
            raise ArgumentError(f"tune_tasks: item #{k} has weight {weight}; weights must be >= 1")
        out.append((task, weight))
    return out


def _check(n_trials: Any, schedule: str, round_trials: Any) -> None:
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ArgumentError(f"tune_tasks: n_trials must be a positive int, got {n_trials!r}")
    if schedule not in SCHEDULES:
        raise ArgumentError(f"tune_tasks: schedule must be one of {SCHEDULES}, got {schedule!r}")
    if round_trials is not None and (
        isinstance(round_trials, bool) or not isinstance(round_trials, int) or round_trials < 1
    ):
        raise ArgumentError(
            f"tune_tasks: round_trials must be a positive int or None, got {round_trials!r}"
        )


def tune_tasks(
    tasks: Sequence[Any],
    n_trials: int = 200,
    records: str | Path | None = None,
    measure: Any = None,
    sampler: str = "tpe",
    seed: int | None = 0,
    early_stopping: int | None = None,
    on_task: Callable[[int, Task, int], None] | None = None,
    schedule: str = "gradient",
    round_trials: int | None = None,
    timeout: float | None = None,
    **tune_options: Any,
) -> list[TuneResult]:
    """Tune the tasks under one budget of ``n_trials`` measured candidates; one
    :class:`TuneResult` per task (its whole history), in the order given.

    ``schedule``: ``"gradient"`` (rounds to the task of largest expected gain, see the
    module docstring) or ``"weight"`` (one share per task by weight). ``round_trials``:
    trials per round (default: a quarter of an even share, 1 to 10). ``timeout``: seconds
    for the whole call. ``measure``: as :func:`~ember.tuner.tune`'s, but by default
    ``MeasureOption(flush_cache=True)``: the caches flushed before each timed call.
    ``on_task(index, task, trials)`` is called before each round;
    other keywords go to :func:`ember.tuner.tune`.
    """
    _check(n_trials, schedule, round_trials)
    pairs = _entries(tasks)
    # a model's kernels find their weights cold: by default they are measured so
    measurer, owned = _measurer(MeasureOption(flush_cache=True) if measure is None else measure)
    deadline = None if timeout is None else time.monotonic() + timeout
    common = dict(records=records, sampler=sampler, measure=measurer, early_stopping=early_stopping)
    try:
        if schedule == "weight":
            return _by_weight(pairs, n_trials, seed, on_task, deadline, common, tune_options)
        size = round_trials or max(1, min(10, n_trials // (4 * max(1, len(pairs)))))
        entries = [_Entry(t, w, _storage(tune_options, records)) for t, w in pairs]
        _by_gain(entries, n_trials, size, seed, on_task, deadline, common, tune_options)
        return [e.result for e in entries]  # type: ignore[misc]
    finally:
        if owned:
            measurer.close()


def _storage(tune_options: dict[str, Any], records: str | Path | None) -> Any:
    """The storage a task's rounds share: the caller's, the journal beside the records,
    or one in-memory storage per task (a fresh in-memory study per round would forget)."""
    if "storage" in tune_options or records is not None:
        return tune_options.get("storage")
    # optional dependency: optuna
    import optuna

    return optuna.storages.InMemoryStorage()


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _by_weight(
    pairs: list[tuple[Task, int]],
    n_trials: int,
    seed: int | None,
    on_task: Callable[[int, Task, int], None] | None,
    deadline: float | None,
    common: dict[str, Any],
    tune_options: dict[str, Any],
) -> list[TuneResult]:
    results = []
    for k, ((task, _), share) in enumerate(
        zip(pairs, split_trials([w for _, w in pairs], n_trials))
    ):
        if on_task is not None:
            on_task(k, task, share)
        results.append(
            tune(task, n_trials=share, seed=seed, timeout=_remaining(deadline), retime_rounds=0,
                 **common, **tune_options)
        )  # fmt: skip
    return results


def _by_gain(
    entries: list[_Entry],
    budget: int,
    size: int,
    seed: int | None,
    on_task: Callable[[int, Task, int], None] | None,
    deadline: float | None,
    common: dict[str, Any],
    tune_options: dict[str, Any],
) -> None:
    """Warm-up rounds for every task, then rounds by :func:`expected_gain` until the budget,
    the deadline or every task's search is spent."""
    options = {k: v for k, v in tune_options.items() if k != "storage"}
    first_resume = bool(options.pop("resume", False))
    spent = 0
    warm = (
        split_trials([e.weight for e in entries], budget) if budget < size * len(entries) else None
    )
    order = list(range(len(entries)))
    while (order or spent < budget) and (deadline is None or time.monotonic() < deadline):
        if order:  # warm-up: every task gets its round, even past a budget too small for all
            k = order.pop(0)
            want = warm[k] if warm is not None else size
        else:
            live = [k for k, e in enumerate(entries) if not e.done]
            if not live:
                break
            k = max(
                live, key=lambda i: (expected_gain(entries[i].weight, entries[i].curve, size), -i)
            )
            want = min(size, budget - spent)
        e = entries[k]
        if on_task is not None:
            on_task(k, e.task, want)
        before = e.measured
        e.result = tune(
            e.task, n_trials=before + want, storage=e.storage, timeout=_remaining(deadline),
            resume=first_resume or e.rounds > 0,
            seed=None if seed is None else seed + e.rounds, retime_rounds=0, **common, **options,
        )  # fmt: skip
        e.rounds += 1
        e.curve = [t.best_cost for t in e.result.trials]
        spent += e.measured - before
        e.done = e.result.stopped in _FINISHED or e.measured == before
