"""``ember bench [models...]``: Ember beside onnxruntime on whole models, and the
performance gate.

Models are names from the catalog (:mod:`ember.frontend.testing.catalog`; all of them by
default) or ``.onnx`` files. Each is checked against onnxruntime, then timed with each
runtime alone, by turns over ``--rounds`` rounds (:mod:`ember.perf.timing`); a table of
latencies and ratios (onnxruntime time / Ember time: above 1 Ember is faster) with
their range over rounds is printed, ``--report`` writes the JSON report and ``--chart``
its PNG bar chart. ``--records FILE`` compiles Ember's side with tuning records (``ember
tune``'s log), so a tuned model is timed against onnxruntime the same way; the report
names the file.

With ``--baseline FILE`` each model's ratio is compared with the baseline's by the rule in
:mod:`ember.perf.gate`; a model below it by more than the measured noise makes the
command exit with status 3 (a user error, such as an unknown model or a malformed
baseline, is status 1, as for every verb). ``--update-baseline`` writes this run's report
to FILE instead of failing. The report and chart are written either way, so CI can
upload them from a failed run.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ember.errors import ArgumentError
from ember.perf import gate, report
from ember.perf.timing import PAUSE_S

REGRESSION_STATUS = 3


def add_parser(sub: Any) -> None:
    """Register ``ember bench``."""
    b = sub.add_parser(
        "bench",
        help="time models against onnxruntime; gate on a baseline",
        description="Time models in Ember and onnxruntime, each alone and by turns, and "
        "compare their ratio with a baseline (exit status 3 on a regression).",
    )
    b.add_argument(
        "models", nargs="*", help="catalog names or .onnx files (default: the whole catalog)"
    )
    b.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="threads for both runtimes (default: the cores this process may use)",
    )
    b.add_argument("--rounds", type=int, default=5, help="turns each runtime takes (default 5)")
    b.add_argument(
        "--number", type=int, default=0, help="runs per batch (default 0: a ~50 ms batch)"
    )
    b.add_argument("--repeat", type=int, default=3, help="batches per turn; the best counts")
    b.add_argument(
        "--pause",
        type=float,
        default=PAUSE_S,
        metavar="S",
        help=f"seconds between turns, for the idle runtime's threads to sleep (default {PAUSE_S})",
    )
    b.add_argument(
        "--mode",
        choices=("process", "blocks"),
        default="process",
        help="process: each runtime in its own process (default); blocks: both in this one",
    )
    b.add_argument("--quick", action="store_true", help="small inputs (seconds per model)")
    b.add_argument(
        "--host-check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="probe each CPU between rounds and take a round again when the host was "
        "slowing one (default: on)",
    )
    b.add_argument("--baseline", metavar="FILE", help="fail when a ratio falls below this")
    b.add_argument(
        "--update-baseline", action="store_true", help="write this run to --baseline's FILE"
    )
    b.add_argument(
        "--noise-floor",
        type=float,
        default=gate.FLOOR,
        metavar="F",
        help=f"least allowed drop, a fraction of the baseline ratio (default {gate.FLOOR})",
    )
    b.add_argument(
        "--records",
        metavar="FILE",
        help="compile Ember's side with these tuning records (ember tune's --log)",
    )
    b.add_argument("--report", metavar="OUT.json", help="write the JSON report here")
    b.add_argument("--chart", metavar="OUT.png", help="write the bar chart here")
    b.set_defaults(fn=_cmd_bench)


def _threads(ns: argparse.Namespace) -> int:
    if ns.threads is not None:
        return int(ns.threads)  # checked by the CLI's use_threads
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _check(ns: argparse.Namespace) -> None:
    for flag, value, least in (("--rounds", ns.rounds, 1), ("--repeat", ns.repeat, 1)):
        if value < least:
            raise ArgumentError(f"{flag} must be at least {least}, got {value}")
    for flag, value in (("--number", ns.number), ("--pause", ns.pause)):
        if value < 0:
            raise ArgumentError(f"{flag} must be 0 or more, got {value}")
    if not 0 <= ns.noise_floor < 1:
        raise ArgumentError(f"--noise-floor is a fraction in [0, 1), got {ns.noise_floor}")
    if ns.update_baseline and not ns.baseline:
        raise ArgumentError("--update-baseline needs --baseline FILE to write")
    if ns.records and not os.path.isfile(ns.records):
        raise ArgumentError(f"--records: no file {ns.records!r}")


def _baseline(ns: argparse.Namespace, threads: int) -> dict[str, Any] | None:
    """The baseline to compare with, checked before anything runs; with
    ``--update-baseline`` a missing, unreadable or incomparable one is only replaced."""
    if not ns.baseline:
        return None
    try:
        baseline = gate.load_baseline(ns.baseline)
        gate.check_settings(baseline, threads, ns.quick)
    except gate.BaselineError as e:
        if not ns.update_baseline:
            raise
        print(f"ember bench: {e.message}; it will be replaced")
        return None
    return baseline


def _cmd_bench(ns: argparse.Namespace) -> int:
    _check(ns)
    # start-up cost: the compiler, onnx and onnxruntime load only when a benchmark runs
    from ember.frontend.testing.catalog import CATALOG
    from ember.perf import chart, host, models, runners, timing

    threads = _threads(ns)
    baseline = _baseline(ns, threads)
    chosen = [models.resolve(spec, ns.quick) for spec in ns.models or list(CATALOG)]
    watch = host.calibrated_watch(ns.host_check)
    print(report.header(threads), flush=True)
    timings = []
    settings = runners.EmberSettings(records=ns.records or "")
    with timing.Bench(ns.mode, settings) as bench:
        for name, model, inputs in chosen:
            bench.load(name, model, inputs)
            t = bench.time(
                name, threads, ns.rounds, ns.number, ns.repeat, pause=ns.pause, host=watch
            )
            timings.append(t)
            print(report.row(name, t.as_dict()), flush=True)
    run_settings = {
        "threads": threads,
        "quick": ns.quick,
        "rounds": ns.rounds,
        "mode": ns.mode,
        "pause_s": ns.pause,
        "host_check": ns.host_check,
        "records": ns.records,
    }
    result = report.build(timings, run_settings)
    print(f"geometric mean ratio {result['geomean_ratio']:.2f}")
    if ns.report:
        report.write(result, ns.report)
    if ns.chart:
        chart.draw(result, ns.chart, baseline)
    return _gate(ns, result, baseline)


def _gate(ns: argparse.Namespace, result: dict[str, Any], baseline: dict | None) -> int:
    """Compare with the baseline (if any), print the verdicts, rewrite it if asked."""
    failed = []
    if baseline is not None:
        for verdict in gate.compare(result, baseline, ns.noise_floor):
            print(verdict.text())
            if not verdict.passed:
                failed.append(verdict)
    if ns.update_baseline:
        report.write(result, ns.baseline)
        print(f"baseline written to {ns.baseline}")
        return 0
    if failed:
        names = ", ".join(v.model for v in failed)
        print(f"ember bench: {len(failed)} model(s) slower than the baseline allows: {names}")
        return REGRESSION_STATUS
    return 0
