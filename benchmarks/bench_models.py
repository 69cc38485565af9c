"""Whole models through ``ember.compile`` beside onnxruntime, at 1 and 2 threads, each
runtime timed alone.

Run: ``python benchmarks/bench_models.py`` (``--models resnet18,bert`` for a subset,
``--quick`` for small inputs, ``--graph-passes default,-alter_conv_layout`` to compile
without a pass). The models are the catalog's (``frontend/testing/catalog.py``: built
with onnx.helper from seeded random weights); Ember's output is checked against
onnxruntime's before anything is timed. Compile time is cold: the in-process kernel cache
is emptied first and the disk cache is off (``benchmarks/bench_compile_cache.py`` times a
warm compile).

The timing is ``ember bench``'s (``ember/perf/timing.py``): each runtime in its own
process (``--mode process``, the default; ``--mode blocks`` keeps both in this one), the
two taking turns for ``--rounds`` rounds with a pause after each turn so the other's
threads have gone idle; in a turn a runtime is timed as the best of ``--repeat`` batches
of ``--number`` runs. A latency is the median over the rounds, the ratio (onnxruntime
time / Ember time, so above 1 Ember is faster) the median of the rounds' ratios, printed
with their range: on a shared machine one round alone moves by 5-10% with its load.
Rerun on a quiet machine, or take single-thread figures with ``--threads 1 --cpu-time``
(each runtime process's CPU time).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from ember.frontend.testing.catalog import CATALOG
from ember.perf.host import calibrated_watch
from ember.perf.runners import EmberSettings
from ember.perf.timing import MODES, PAUSE_S, Bench


def models(quick: bool) -> dict[str, Callable[[np.random.Generator], tuple[object, dict]]]:
    """The catalog's builders at one input size (``profile_model.py`` uses them)."""
    return {name: (lambda rng, b=build: b(rng, quick)) for name, build in CATALOG.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated subset of the models")
    ap.add_argument("--quick", action="store_true", help="small inputs (64x64 images, 32 tokens)")
    ap.add_argument("--number", type=int, default=5, help="runs per batch (0: a ~50 ms batch)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="turns each runtime takes")
    ap.add_argument("--threads", default="1,2", help="thread counts to time")
    ap.add_argument("--mode", choices=MODES, default="process", help="see the docstring")
    ap.add_argument("--pause", type=float, default=PAUSE_S, help="seconds after each turn")
    ap.add_argument(
        "--host-check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="retake a round during which the host was slowing a CPU (ember/perf/host.py)",
    )
    ap.add_argument(
        "--graph-passes",
        default="",
        help="comma-separated graph pass names from ember.frontend.passes replacing the "
        "target's defaults; 'default' stands for those, '-name' drops one "
        "(e.g. default,-alter_conv_layout)",
    )
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with the process's CPU time rather than the wall clock: on a loaded "
        "machine it leaves out the time other processes hold the cores (1 thread only: "
        "at more, threads waiting for each other count too)",
    )
    args = ap.parse_args()
    clock = "cpu" if args.cpu_time else "wall"
    chosen = [m for m in args.models.split(",") if m] or list(CATALOG)
    unknown = [m for m in chosen if m not in CATALOG]
    if unknown:
        ap.error(f"unknown models {', '.join(unknown)}; choose from {', '.join(CATALOG)}")
    threads = [int(t) for t in args.threads.split(",")]
    head = "".join(
        f"{f'ember {t}t ms':>13s}{f'ort {t}t ms':>12s}{'ort/ember':>10s}{'range':>12s}"
        for t in threads
    )
    watch = calibrated_watch(args.host_check)
    print(f"{'model':14s}{'compile s':>10s}{head}", flush=True)
    with Bench(args.mode, EmberSettings(cold=True, passes=args.graph_passes)) as bench:
        for name in chosen:
            model, inputs = CATALOG[name](np.random.default_rng(0), args.quick)
            compile_s = bench.load(name, model, inputs)
            row = f"{name:14s}{compile_s:10.1f}"
            for t in threads:
                m = bench.time(
                    name, t, args.rounds, args.number, args.repeat, clock, args.pause, watch
                )
                spread = f"{min(m.ratios):.2f}-{max(m.ratios):.2f}"
                row += f"{m.ember_ms:13.2f}{m.ort_ms:12.2f}{m.ratio:10.2f}{spread:>12s}"
            print(row, flush=True)


if __name__ == "__main__":
    main()
