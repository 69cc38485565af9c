"""``ember tune``: the tuner from the command line, for one template or a whole model.

``ember tune model.onnx`` tunes a model's tasks (:mod:`ember.cli.tune_model`);
``ember tune --op matmul --shape 1024,1024,1024`` makes the task of template
``<op>.<target kind>`` on the shape (and ``--dtype`` when the template takes one),
tunes it (:func:`ember.tuner.tune`) with a live ``rich`` display of the trial, the
best cost so far, errors by kind and the time left, prints a summary table and can
draw the convergence plot (``--plot``, matplotlib's Agg backend). The candidates are
measured here, on an ``ember rpc-server`` host (``--rpc``), or only built and checked
(``--dry-run``). User errors raise ``EmberError``; :func:`ember.cli.main` prints them.
"""

from __future__ import annotations

import argparse
import inspect
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ember.backend import get_backend
from ember.cli.common import (
    add_threads_argument,
    best_result,
    console,
    error_examples,
    measured_text,
    ms_text,
    table,
)
from ember.cli.rpc_server import TOKEN_ENV, rpc_token
from ember.cli.tune_model import cmd_tune_model
from ember.errors import ArgumentError, DeviceError
from ember.target import Target
from ember.tuner import LocalMeasurer, MeasureOption, create_task, lookup_template
from ember.tuner import tune as tune_task  # the parser below is named `tune`
from ember.tuner.dryrun import dry_run
from ember.tuner.rpc import RemoteMeasurer


def add_parser(sub: Any) -> None:
    """Register ``ember tune``."""
    tune = sub.add_parser("tune", help="tune a schedule template for one shape, or a model")
    tune.add_argument("model", nargs="?", default=None,
                      help="an .onnx model: tune every task of its kernels")  # fmt: skip
    tune.add_argument("--op", default=None, help="template op, e.g. matmul, dense, conv2d_nchw")
    tune.add_argument("--shape", action="append", default=[],
                      help="with --op: comma-separated ints, e.g. 1024,1024,1024; with a "
                      "model: NAME=D0,D1,... fixing an input's shape (repeatable)")  # fmt: skip
    tune.add_argument("--dtype", default="float32")
    tune.add_argument(
        "--search",
        default="both",
        choices=["templates", "auto", "both"],
        help="MODEL: template tasks, every fused group auto-scheduled, or both",
    )
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
    tune.add_argument(
        "--flush-cache",
        action=argparse.BooleanOptionalAction,
        default=None,
        dest="flush_cache",
        help="flush the CPU caches before each timed call, as a model's kernels find them "
        "(default for a model: on, only each core's own caches where the weights fit in "
        "half the last-level cache; off for --op)",
    )
    tune.add_argument(
        "--model-check",
        action=argparse.BooleanOptionalAction,
        default=True,
        dest="model_check",
        help="with a model and --log: time it with and "
        "without the records and drop those that slow it (default: on)",
    )
    tune.add_argument(
        "--retime-rounds",
        type=int,
        default=3,
        dest="retime_rounds",
        help="time each task's pick against its fallback again, by turns, this many rounds "
        "after the search, and keep the fallback where the pick is no faster (0: off; default 3)",
    )
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--early-stopping", type=int, default=None, dest="early_stopping")
    tune.add_argument("--transfer", nargs="*", default=None, help="records of other shapes")
    tune.add_argument("--plot", default=None, help="write a convergence plot (PNG)")
    tune.add_argument("--cost-model", action="store_true", dest="cost_model",
                      help="measure only the learned cost model's top candidates and a few "
                      "explorers (warm-started from --log's records)")  # fmt: skip
    tune.add_argument("--rpc", default=None, metavar="HOST:PORT",
                      help="measure on the host running `ember rpc-server`")  # fmt: skip
    tune.add_argument("--token", default=None,
                      help="the rpc-server's token (default: $EMBER_RPC_TOKEN)")  # fmt: skip
    tune.add_argument("--dry-run", action="store_true", dest="dry_run",
                      help="build and check configs, no timing (CUDA: emulated)")  # fmt: skip
    add_threads_argument(tune)  # measuring workers inherit it (EMBER_NUM_THREADS)
    tune.set_defaults(fn=cmd_tune)


def parse_shape(text: str) -> tuple[int, ...]:
    """``--op``'s ``--shape 1024,1024,1024`` as positive ints."""
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
    flush = getattr(ns, "flush_cache", None)
    if flush is None:  # a model's kernels find their weights cold: measure them so
        flush = ns.model is not None
    return MeasureOption(
        number=ns.number, repeat=ns.repeat, min_repeat_ms=ns.min_repeat_ms,
        timeout=ns.run_timeout, jobs=ns.jobs, flush_cache=flush,
    )  # fmt: skip


def cmd_tune(ns: argparse.Namespace) -> int:
    """Tune the model ``ns.model``, or the one task ``--op`` and ``--shape`` name."""
    _check_counts(ns)
    if ns.model is not None:
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
    display = LiveDisplay(task, ns.trials)
    with display:
        return tune_task(
            task, n_trials=ns.trials, records=ns.log, sampler=ns.sampler, seed=ns.seed,
            timeout=ns.timeout, storage=ns.storage, measure=measure,
            early_stopping=ns.early_stopping, resume=ns.resume, transfer=ns.transfer,
            on_trial=display.update, cost_model=getattr(ns, "cost_model", False) or None,
            retime_rounds=max(getattr(ns, "retime_rounds", 3), 0),
        )  # fmt: skip


class LiveDisplay:
    """A ``rich`` progress line: task, trial, best so far, errors by kind, time left."""

    def __init__(self, task: Any, n_trials: int) -> None:
        # optional dependency: rich (the `tune` extra)
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
        """Show the state after ``trial`` (the tuner's ``on_trial`` callback)."""
        errors = ", ".join(f"{k.value} {n}" for k, n in state.errors.items() if n)
        self.progress.update(
            self.bar, completed=state.measured, best=ms_text(state.best_cost),
            errors=f"errors: {errors}" if errors else "",
        )  # fmt: skip


def print_summary(result: Any, log: str | None) -> None:
    """The tuned task, its trial and error counts, the fallback's and the best cost and
    config, why the run stopped and where the records went, as a two-column table."""
    out = table("tuning summary", show_header=False)
    first = result.trials[0].result if result.trials else None
    rows = [
        ("task", f"{result.task.name}{result.task.args} on {result.task.target}"),
        ("measured trials", str(len(result.trials))),
        ("turned down before build", str(result.rejected)),
        ("repeats not re-measured", str(result.duplicates)),
        ("errors", ", ".join(f"{k} {n}" for k, n in result.errors.items()) or "none"),
        *(("  " + kind, message) for kind, message in error_examples(result.trials).items()),
        ("first trial (fallback)", measured_text(first)),
        ("search's best", measured_text(best_result(result.trials))),
        *_retimed_rows(result),
        ("best config", str(result.best_config)),
        ("stopped by", result.stopped),
        ("records", log or "(not written)"),
    ]
    for key, value in rows:
        out.add_row(key, value)
    console().print(out)


def _retimed_rows(result: Any) -> list[tuple[str, str]]:
    """The pick timed again against the fallback by turns, and what came of it."""
    again = result.retimed
    if again is None:
        return []
    verdict = "the fallback stands" if result.kept_fallback else "kept"
    return [(
        f"re-timed by turns ({again.rounds} rounds)",
        f"fallback {again.fallback_s * 1e3:.4f} ms, best {again.best_s * 1e3:.4f} ms: "
        f"{again.speedup:.2f}x, {verdict}",
    )]  # fmt: skip


def plot_convergence(result: Any, path: str | Path) -> None:
    """Best cost so far (and each trial's cost) against the trial number, as a PNG."""
    # optional dependency: matplotlib (the `tune` extra), drawn off-screen (Agg)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [t.number + 1 for t in result.trials]
    fig, ax = plt.subplots(figsize=(7, 4))
    ok = [(t.number + 1, t.result.cost * 1e3) for t in result.trials if t.result.ok]
    if ok:
        trial_x, trial_ms = zip(*ok)
        ax.scatter(trial_x, trial_ms, s=10, alpha=0.4, label="trial")
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


def measurer_for(ns: argparse.Namespace, task: Any, option: Any) -> tuple[Any, bool]:
    """The measurer ``ember tune`` uses, and whether the caller must close it: remote with
    ``--rpc``, otherwise local; a CUDA target on a machine without a GPU is refused unless
    ``--dry-run`` asks only for builds and emulator checks."""
    if ns.dry_run:
        option = replace(option, dry_run=True)
    if ns.rpc:
        token = rpc_token(ns)
        if token is None:
            raise ArgumentError(f"--rpc needs the server's token: pass --token or set {TOKEN_ENV}")
        return RemoteMeasurer(ns.rpc, token, option), True
    backend = get_backend(task.target)
    if backend.gpu and not ns.dry_run and not backend.device_available():
        raise DeviceError(
            "no CUDA device on this machine: run `ember rpc-server --token T` on a GPU host and "
            "pass --rpc HOST:PORT --token T to measure there, or pass --dry-run to build, "
            "NVRTC-compile and check every candidate on the emulator without timing"
        )
    return LocalMeasurer(option), True


def cmd_dry_run(ns: argparse.Namespace, task: Any, measure: Any) -> int:
    """Check ``--trials`` configs; exit 1 when any failed."""
    result = dry_run(task, ns.trials, seed=ns.seed, measure=measure)
    title = f"dry run of {task.name}{task.args} on {task.target} (no timing)"
    out = table(title, ("config", "result", "message"), overflow="ellipsis")
    for cfg, r in zip(result.configs, result.results):
        message = r.message.strip().splitlines()[-1][:100] if r.message else ""
        out.add_row(str(cfg), r.error.value, message)
    console().print(out)
    counts = ", ".join(f"{k} {n}" for k, n in sorted(result.counts.items()))
    print(f"checked {len(result.configs)} config(s): {counts}")
    return 1 if result.failures else 0
