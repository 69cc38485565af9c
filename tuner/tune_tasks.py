"""``tune_tasks``: tune the several tasks of a model under one trial budget.

Takes what ``ember.extract_tasks`` gives (objects with ``task`` and ``weight``) or
plain tasks (weight 1), splits the total number of trials between them in proportion
to their weights (how many of the model's kernels run each task; one trial each,
the rest by largest remainders), and runs :func:`ember.tuner.tune` on each in turn with one
shared measurer, all appending to the same records file. The fallback cost is not
used to split the budget: measuring it first would cost a trial per task up front.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError
from ember.tuner.task import Task
from ember.tuner.tune import TuneResult, _measurer, tune


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


def _entries(tasks: Sequence[Any]) -> list[tuple[Task, int]]:
    out = []
    for k, item in enumerate(tasks):
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


def tune_tasks(
    tasks: Sequence[Any],
    n_trials: int = 200,
    records: str | Path | None = None,
    measure: Any = None,
    sampler: str = "tpe",
    seed: int | None = 0,
    early_stopping: int | None = None,
    on_task: Callable[[int, Task, int], None] | None = None,
    **tune_options: Any,
) -> list[TuneResult]:
    """Tune each task with its share of ``n_trials`` (see :func:`split_trials`); one
    :class:`TuneResult` per task, in the order given. ``on_task(index, task, trials)``
    is called before each task starts; other keywords go to :func:`ember.tuner.tune`."""
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ArgumentError(f"tune_tasks: n_trials must be a positive int, got {n_trials!r}")
    entries = _entries(tasks)
    shares = split_trials([w for _, w in entries], n_trials)
    measurer, owned = _measurer(measure)
    results = []
    try:
        for k, ((task, _), share) in enumerate(zip(entries, shares)):
            if on_task is not None:
                on_task(k, task, share)
            results.append(
                tune(
                    task,
                    n_trials=share,
                    records=records,
                    sampler=sampler,
                    seed=seed,
                    measure=measurer,
                    early_stopping=early_stopping,
                    **tune_options,
                )
            )
    finally:
        if owned:
            measurer.close()
    return results
