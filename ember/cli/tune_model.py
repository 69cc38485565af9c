"""``ember tune model.onnx``: tune every template task behind a model's graph kernels.

:mod:`ember.cli.tune` hands a ``tune`` command that names a model here: the tasks come
from :func:`ember.graph.model_tuning.extract_tasks` (``--shape NAME=D0,D1,...`` fixes
symbolic input dims), :func:`ember.tuner.tune_tasks` spends ``--trials`` on them in
rounds, each to the task whose weighted cost (how many kernels run it times its best
cost) is expected to drop most, appending to ``--log``, and a table
summarises each task's fallback and best cost. ``ember compile model.onnx --records
LOG`` then builds the model with the best configs.
"""

from __future__ import annotations

import argparse
from typing import Any

from ember.cli.common import (
    best_result,
    console,
    error_examples,
    measured_text,
    parse_shapes,
    table,
)
from ember.errors import ArgumentError
from ember.tuner import LocalMeasurer, tune_tasks
from ember.tuner.tune import make_cost_model


def cmd_tune_model(ns: argparse.Namespace, measure_option: Any) -> int:
    """Tune the tasks of ``ns.model`` with ``measure_option`` and print the summary."""
    if ns.op is not None:
        raise ArgumentError("ember tune: pass a model or --op, not both")
    if ns.dry_run or ns.rpc or ns.plot or ns.transfer or ns.storage or ns.resume:
        raise ArgumentError(
            "ember tune MODEL: --dry-run, --rpc, --plot, --transfer, --storage and --resume "
            "apply to tuning one --op only"
        )
    # start-up cost: the model compiler (importer, graph passes) loads only when tuning runs
    from ember.graph.model_tuning import extract_tasks

    tasks = extract_tasks(ns.model, ns.target, parse_shapes(ns.shape) or None, search=ns.search)
    if not tasks:
        print(f"{ns.model}: no tunable kernels for {ns.target}")
        return 0
    print(f"{ns.model}: {len(tasks)} task(s), {ns.trials} trial(s), in rounds by gain")

    labels = {id(mt.task): task_label(mt) for mt in tasks}

    def started(k: int, task: Any, trials: int) -> None:
        print(f"[{k + 1}/{len(tasks)}] {labels[id(task)]}: {trials} more trial(s)", flush=True)

    # one cost model for every task, warm-started from the records file (Ansor's shared model)
    model = make_cost_model(True, ns.log, ns.seed, None) if ns.cost_model else None
    with LocalMeasurer(measure_option) as measurer:
        results = tune_tasks(
            tasks, n_trials=ns.trials, records=ns.log, measure=measurer, sampler=ns.sampler,
            seed=ns.seed, early_stopping=ns.early_stopping, on_task=started,
            timeout=ns.timeout, cost_model=model,
        )  # fmt: skip
    print_model_summary(tasks, results, ns.log)
    return 0


def print_model_summary(tasks: list[Any], results: list[Any], log: str | None) -> None:
    """One row per task: weight, trials, errors (kinds and counts), fallback and best cost,
    speedup. A cost whose repeats say the machine was busy is flagged, and so is a speedup
    taken from one: neither says what the kernel does on an idle machine."""
    columns = ("task", "weight", "trials", "errors", "fallback", "best", "speedup")
    out = table(f"model tuning summary (records: {log or 'not written'})", columns)
    messages: list[str] = []
    for mt, res in zip(tasks, results):
        first = res.trials[0].result if res.trials else None
        best = best_result(res.trials)
        errors = ", ".join(f"{k} {n}" for k, n in res.errors.items()) or "none"
        out.add_row(
            task_label(mt), str(mt.weight), str(len(res.trials)), errors,
            measured_text(first), measured_text(best), _speedup(first, best),
        )  # fmt: skip
        for kind, message in error_examples(res.trials).items():
            messages.append(f"{task_label(mt)} {kind}: {message}")
    screen = console(width=160)
    screen.print(out)
    for line in messages:
        screen.print(line, markup=False, highlight=False)


def task_label(mt: Any) -> str:
    """How the summary names a task: a template task by name and arguments, a fused
    group's auto task by its nodes (its argument is the group's whole JSON spec)."""
    if mt.task.name.startswith("auto/"):
        nodes = "+".join(dict.fromkeys(mt.nodes))
        return f"auto: {nodes if len(nodes) <= 60 else nodes[:57] + '...'}"
    return f"{mt.task.name}{mt.task.args}"


def _speedup(first: Any, best: Any) -> str:
    if first is None or best is None or not first.ok:
        return "-"
    text = f"{first.cost / best.cost:.2f}x"
    return f"{text} (unreliable: busy machine)" if first.busy or best.busy else text
