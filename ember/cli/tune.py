"""``ember tune`` and ``ember records``: the tuner from the command line.

``ember tune model.onnx`` tunes a model's tasks (:mod:`ember.tune_model_cli`);
``ember tune --op matmul --shape 1024,1024,1024`` makes the task of template
``<op>.<target kind>`` on the shape (and ``--dtype`` when the template takes one),
tunes it (:func:`ember.tuner.tune`) with a live ``rich`` display of the trial, the
best cost so far, errors by kind and the time left, prints a summary table and can
draw the convergence plot (``--plot``, matplotlib's Agg backend).
``ember records show|best|merge`` read and combine records files. ``ember.cli`` wires
the subcommands in; user errors raise ``EmberError`` and exit 1 there.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
from pathlib import Path
from typing import Any

from ember.cli_common import add_threads_argument
from ember.errors import ArgumentError
from ember.tuner.result import spread_text


def add_parsers(sub: Any) -> None:
    tune = sub.add_parser("tune", help="tune a schedule template for one shape, or a model")
    tune.add_argument("model", nargs="?", default=None,
                      help="an .onnx model: tune every task of its kernels")  # fmt: skip
    tune.add_argument("--op", default=None, help="template op, e.g. matmul, dense, conv2d_nchw")
    tune.add_argument("--shape", action="append", default=[],
                      help="with --op: comma-separated ints, e.g. 1024,1024,1024; with a "
                      "model: NAME=D0,D1,... fixing an input's shape (repeatable)")  # fmt: skip
    tune.add_argument("--dtype", default="float32")
    tune.add_argument("--target", default="llvm")
    tune.add_argument("--trials", type=int, default=200, help="measured candidates")
    tune.add_argument("--log", default=None, help="records file (JSON lines), appended")
    tune.add_argument("--storage", default=None, help="Optuna storage URL (default: journal)")
    tune.add_argument("--resume", action="store_true", help="continue the study in storage")
    tune.add_argument("--sampler", default="tpe", choices=["tpe", "random", "cmaes", "grid"])
    tune.add_argument("--timeout", type=float, default=None, help="seconds for the whole run")
    tune.add_argument("--jobs", type=int, default=1, help="parallel builds")
    tune.add_argument("--number", type=int, default=10, help="runs per timed batch")
    tune.add_argument("--repeat", type=int, default=3, help="timed batches (median reported)")
    tune.add_argument("--min-repeat-ms", type=float, default=0.0, dest="min_repeat_ms")
    tune.add_argument("--run-timeout", type=float, default=10.0, dest="run_timeout",
                      help="seconds one candidate's run may take")  # fmt: skip
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--early-stopping", type=int, default=None, dest="early_stopping")
    tune.add_argument("--transfer", nargs="*", default=None, help="records of other shapes")
    tune.add_argument("--plot", default=None, help="write a convergence plot (PNG)")
    tune.add_argument("--rpc", default=None, metavar="HOST:PORT",
                      help="measure on the host running `ember rpc-server`")  # fmt: skip
    tune.add_argument("--token", default=None,
                      help="the rpc-server's token (default: $EMBER_RPC_TOKEN)")  # fmt: skip
    tune.add_argument("--dry-run", action="store_true", dest="dry_run",
                      help="build and check configs, no timing (CUDA: emulated)")  # fmt: skip
    add_threads_argument(tune)  # measuring workers inherit it (EMBER_NUM_THREADS)
    tune.set_defaults(fn=cmd_tune)
    from ember.rpc_cli import add_rpc_parser

    add_rpc_parser(sub)
    rec = sub.add_parser("records", help="show, pick the best of, or merge records files")
    rsub = rec.add_subparsers(dest="records_command", required=True)
    show = rsub.add_parser("show", help="print records")
    show.add_argument("files", nargs="+")
    show.add_argument("--limit", type=int, default=50)
    show.set_defaults(fn=cmd_records_show)
    best = rsub.add_parser("best", help="print the best valid record per task")
    best.add_argument("files", nargs="+")
    best.set_defaults(fn=cmd_records_best)
    merge = rsub.add_parser("merge", help="merge records files into one (readable lines only)")
    merge.add_argument("output")
    merge.add_argument("files", nargs="+")
    merge.set_defaults(fn=cmd_records_merge)


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(p) for p in text.split(","))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise ArgumentError(f"--shape must be comma-separated positive ints, got {text!r}")
    return dims


def make_task(op: str, shape: tuple[int, ...], dtype: str, target: str) -> Any:
    """The task of template ``<op>.<kind>``; the dtype follows the shape when the
    template has a ``dtype`` parameter right after it."""
    from ember.target import Target
    from ember.tuner import create_task, lookup_template

    info = lookup_template(f"{op}.{Target.parse(target).kind}")
    params = list(inspect.signature(info.func).parameters)
    args: tuple[Any, ...] = shape
    if len(params) > len(shape) and params[len(shape)] == "dtype":
        args = (*shape, dtype)
    return create_task(info.name, args, target)


def _check_counts(ns: argparse.Namespace) -> None:
    for name in ("trials", "jobs", "number", "repeat"):
        if getattr(ns, name) < 1:
            raise ArgumentError(f"--{name} must be >= 1, got {getattr(ns, name)}")
    if ns.timeout is not None and ns.timeout <= 0:
        raise ArgumentError(f"--timeout must be > 0, got {ns.timeout}")


def _measure_option(ns: argparse.Namespace) -> Any:
    from ember.tuner import MeasureOption

    return MeasureOption(
        number=ns.number, repeat=ns.repeat, min_repeat_ms=ns.min_repeat_ms,
        timeout=ns.run_timeout, jobs=ns.jobs,
    )  # fmt: skip


def cmd_tune(ns: argparse.Namespace) -> int:
    from ember.rpc_cli import cmd_dry_run, measurer_for

    _check_counts(ns)
    if ns.model is not None:
        from ember.tune_model_cli import cmd_tune_model

        return cmd_tune_model(ns, _measure_option(ns))
    if ns.op is None or len(ns.shape) != 1:
        raise ArgumentError("ember tune: pass a model, or --op and one --shape")
    task = make_task(ns.op, parse_shape(ns.shape[0]), ns.dtype, ns.target)
    measure, owned = measurer_for(ns, task, _measure_option(ns))
    try:
        if ns.dry_run:
            return cmd_dry_run(ns, task, measure)
        result = _run_tune(ns, task, measure)
    finally:
        if owned:
            measure.close()
    print_summary(result, ns.log)
    if ns.plot:
        plot_convergence(result, ns.plot)
        print(f"convergence plot: {ns.plot}")
    return 0


def _run_tune(ns: argparse.Namespace, task: Any, measure: Any) -> Any:
    from ember.tuner import tune

    display = LiveDisplay(task, ns.trials)
    with display:
        return tune(
            task, n_trials=ns.trials, records=ns.log, sampler=ns.sampler, seed=ns.seed,
            timeout=ns.timeout, storage=ns.storage, measure=measure,
            early_stopping=ns.early_stopping, resume=ns.resume, transfer=ns.transfer,
            on_trial=display.update,
        )  # fmt: skip


def _ms(cost: float) -> str:
    return "-" if math.isinf(cost) else f"{cost * 1e3:.4f} ms"


class LiveDisplay:
    """A ``rich`` progress line: task, trial, best so far, errors by kind, time left."""

    def __init__(self, task: Any, n_trials: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("best {task.fields[best]}"), TextColumn("{task.fields[errors]}"),
            TimeElapsedColumn(), TimeRemainingColumn(),
        )  # fmt: skip
        self.bar = self.progress.add_task(
            f"{task.name}{task.args}", total=n_trials, best="-", errors=""
        )

    def __enter__(self) -> LiveDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, state: Any, trial: Any) -> None:
        errors = ", ".join(f"{k.value} {n}" for k, n in state.errors.items() if n)
        self.progress.update(
            self.bar, completed=state.measured, best=_ms(state.best_cost),
            errors=f"errors: {errors}" if errors else "",
        )  # fmt: skip


def print_summary(result: Any, log: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="tuning summary", show_header=False)
    first = result.trials[0].result if result.trials else None
    rows = [
        ("task", f"{result.task.name}{result.task.args} on {result.task.target}"),
        ("measured trials", str(len(result.trials))),
        ("turned down before build", str(result.rejected)),
        ("repeats not re-measured", str(result.duplicates)),
        ("errors", ", ".join(f"{k} {n}" for k, n in result.errors.items()) or "none"),
        *(("  " + kind, message) for kind, message in error_examples(result.trials).items()),
        ("first trial (fallback)", measured_text(first)),
        ("best", measured_text(best_result(result.trials))),
        ("best config", str(result.best_config)),
        ("stopped by", result.stopped),
        ("records", log or "(not written)"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    Console().print(table)


def error_examples(trials: list[Any]) -> dict[str, str]:
    """The first message of each error kind among ``trials``, one line each."""
    out: dict[str, str] = {}
    for t in trials:
        kind = t.result.error.value
        if not t.result.ok and kind not in out:
            lines = [line.strip() for line in t.result.message.splitlines() if line.strip()]
            out[kind] = (lines[0][:MESSAGE_WIDTH] if lines else "(no message)") + (
                f" (trial {t.number + 1})"
            )
    return out


def best_result(trials: list[Any]) -> Any:
    """The result of the fastest valid trial, or None."""
    ok = [t.result for t in trials if t.result.ok]
    return min(ok, key=lambda r: r.cost) if ok else None


def measured_text(result: Any) -> str:
    """A result's median cost, flagged when its repeats say the machine was busy."""
    if result is None or not result.ok:
        return "-" if result is None else f"- ({result.error.value})"
    if result.busy:
        return f"{_ms(result.cost)} (busy machine: {spread_text(result.costs)}; re-measure)"
    return _ms(result.cost)


def plot_convergence(result: Any, path: str | Path) -> None:
    """Best cost so far (and each trial's cost) against the trial number, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [t.number + 1 for t in result.trials]
    fig, ax = plt.subplots(figsize=(7, 4))
    ok = [(t.number + 1, t.result.cost * 1e3) for t in result.trials if t.result.ok]
    if ok:
        ax.scatter(*zip(*ok), s=10, alpha=0.4, label="trial")
    failed = [t.number + 1 for t in result.trials if not t.result.ok]
    if failed:  # drawn along the top edge: they have no cost, but they spent a trial
        top = max((c for _, c in ok), default=1.0) * 1.5
        ax.scatter(failed, [top] * len(failed), marker="x", color="C1", s=14,
                   label=f"failed ({len(failed)})")  # fmt: skip
    best = [
        (x, t.best_cost * 1e3) for x, t in zip(xs, result.trials) if not math.isinf(t.best_cost)
    ]
    if best:
        ax.step(*zip(*best), where="post", color="C3", label="best so far")
    ax.set_xlabel("measured trial")
    ax.set_ylabel("cost (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{result.task.name}{result.task.args}")
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise ArgumentError(f"cannot write the plot to '{path}': {e}") from e
    finally:
        plt.close(fig)


def _records_table(records: list[Any], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for col in ("template", "args", "config", "cost", "error"):
        table.add_column(col, overflow="fold")
    for r in records:
        values = r.config.get("values", {})  # read_records checked it is a dict
        config = " ".join(f"{k}={v}".replace(" ", "") for k, v in values.items())
        table.add_row(r.template, _workload_args(r.workload_key), config, _cost_cell(r), _error(r))
    return table


def _workload_args(key: str) -> str:
    """The arguments of a workload key ``'["name", [args...]]'``, or ``?``."""
    try:
        data = json.loads(key)
    except ValueError:
        return "?"
    if isinstance(data, list) and len(data) > 1 and isinstance(data[1], list):
        return ",".join(map(str, data[1]))
    return "?"


def _cost_cell(r: Any) -> str:
    """The median cost, flagged when its repeats say the machine was busy."""
    if r.busy:
        return f"{_ms(r.cost)} (busy: {spread_text(r.costs)})"
    return _ms(r.cost)


def _error(r: Any) -> str:
    """``ok``, or the error kind with the first line of its message."""
    if r.error == "ok":
        return "ok"
    first = next((line.strip() for line in r.message.splitlines() if line.strip()), "")
    return f"{r.error}: {first[:MESSAGE_WIDTH]}" if first else r.error


MESSAGE_WIDTH = 120  # characters of an error message a table shows


def cmd_records_show(ns: argparse.Namespace) -> int:
    from rich.console import Console

    from ember.tuner import read_records

    recs = read_records(ns.files)
    Console().print(_records_table(recs[-ns.limit :], f"{len(recs)} records (last {ns.limit})"))
    return 0


def cmd_records_best(ns: argparse.Namespace) -> int:
    from rich.console import Console

    from ember.tuner import best_records, read_records

    best = best_records(read_records(ns.files))
    Console().print(_records_table(list(best.values()), f"best of {len(best)} task(s)"))
    return 0


def cmd_records_merge(ns: argparse.Namespace) -> int:
    from ember.tuner import RecordWriter, read_records

    recs = read_records(ns.files)
    seen: set[str] = set()
    with RecordWriter(ns.output) as writer:
        for rec in recs:
            line = rec.to_line()
            if line not in seen:
                seen.add(line)
                writer.write(rec)
    print(f"merged {len(seen)} record(s) into {ns.output}")
    return 0
