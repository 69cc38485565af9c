"""How much slower Ember and onnxruntime run with one busy process beside them.

Run: ``python benchmarks/bench_contention.py`` (``--models mobilenet_v2,mlp``,
``--threads 2``, ``--rounds 3``; ``--models catalog/NAME`` for any model of ``ember
bench``'s catalog, ``--models all`` for every one, at full size). Each (model, runtime)
pair is timed in its own process, so one runtime's thread pool never competes with the
other's. In that process the model is compiled (Ember: disk cache allowed) and then
timed by turns: a *quiet* block, then a *busy* block with one ``while True`` Python
process started beside it (pinned nowhere, so on a two-core machine it takes half the
cores), then a pause. The slowdown factor of a round is busy / quiet, of the blocks'
**mean** run times, and also of their medians. The table prints both runtimes' mean
times, the mean factor's median and range over the rounds, the median factor, and the
busy block's 95th percentile over its quiet median. The last column is Ember's slowdown
(means) when each of its runs follows an onnxruntime run in the same process (another
runtime's spinning pool beside it).

Why the mean leads: a pool whose idle thread keeps spinning on the busy core runs most
calls at its quiet speed and a few 10-20x slower, stalled on a preempted thread for the
rest of a scheduler time slice (about 4 ms here). The median sees only the fast calls;
the mean, which is what a stream of requests costs, sees both. On 2026-11-30 (2 cores,
one busy process) onnxruntime's small CNN, MLP and log-mel front end ran at 0.9-1.1x
their quiet medians but 2.0-2.5x their quiet means, with 95th percentiles of 4.3-5.0 ms;
Ember's pool, which stops offering work to a preempted thread for 10 ms after a stall,
ran them at a steady one-thread speed: 1.5-1.9x by either measure, 95th percentiles of
0.34-0.96 ms. An Ember pool changed to spin like onnxruntime's (no ``sched_yield``, long
spins, no back-off) matched onnxruntime's medians and its 2.2-2.4x means and 4 ms tails.

"Quiet" means no busy process of ours: on a shared machine others' load comes and goes,
so repeat the script and read the ranges, not one figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from ember.frontend.testing import zoo
from ember.frontend.testing.catalog import CATALOG
from ember.frontend.testing.models import mlp, small_cnn, speech_lstm

BUSY = "while True:\n    pass\n"


def models() -> dict[str, Callable[[np.random.Generator], tuple[object, dict]]]:
    """The models timed: small ones that compile in seconds, then three of the benchmark
    catalog at full size (``frontend/testing/catalog.py``: ResNet-18 at 224, the BERT-style
    encoder, the DS-CNN keyword spotter, the wake-word kind of model of issue 25)."""
    return {
        "mobilenet_v2": lambda rng: zoo.mobilenet_v2(rng, 1, 96),
        "cnn": lambda rng: small_cnn(rng, 2, 32, 32),
        "mlp": lambda rng: mlp(rng, 16, (256, 512, 128)),
        "speech": lambda rng: speech_lstm(),  # tiny kernels: per-region overhead
        **{name: partial(_catalog, name) for name in ("resnet18", "bert", "kws_dscnn")},
    }


def _catalog(name: str, rng: np.random.Generator) -> tuple[object, dict]:
    return CATALOG[name](rng, False)


def builder(name: str) -> Callable[[np.random.Generator], tuple[object, dict]]:
    """The model called ``name``: one of :func:`models`, or ``catalog/NAME`` for any model of
    ``ember bench``'s catalog at full size (``--models all`` times the whole catalog so)."""
    catalog = name.removeprefix("catalog/")
    if catalog != name and catalog in CATALOG:
        return partial(_catalog, catalog)
    if name in models():
        return models()[name]
    raise SystemExit(
        f"unknown model {name!r}: {sorted(models())} or catalog/NAME, NAME one of {list(CATALOG)}"
    )


def _runner(runtime: str, name: str, threads: int) -> Callable[[], object]:
    model, inputs = builder(name)(np.random.default_rng(0))
    if runtime == "ember":
        import ember
        from ember.runtime.threads import set_num_threads

        set_num_threads(threads)
        lib = ember.compile(model, target="llvm")
        return lambda: lib.run(inputs)
    # optional dependency: onnxruntime
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(
        model.SerializeToString(),  # type: ignore[attr-defined]
        opts,
        providers=["CPUExecutionProvider"],
    )
    return lambda: sess.run(None, inputs)


def _block(
    fn: Callable[[], object], seconds: float, before: Callable[[], object] | None = None
) -> dict[str, float]:
    """Mean, median and 95th percentile of one run's time over about ``seconds`` of runs
    (``before`` untimed before each)."""
    times: list[float] = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop or len(times) < 5:
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {
        "mean": statistics.fmean(times),
        "median": statistics.median(times),
        "p95": float(np.percentile(times, 95)),
    }


def child(runtime: str, name: str, threads: int, rounds: int, seconds: float) -> None:
    """Time one runtime on one model, quiet and busy by turns; print JSON.

    For Ember also *beside*: each run right after an onnxruntime run of the same model in
    the same process (only Ember's run timed), while onnxruntime's threads still spin.
    """
    fn = _runner(runtime, name, threads)
    other = _runner("ort", name, threads) if runtime == "ember" else None
    _block(fn, 0.3)  # warm up
    quiet, busy, beside = [], [], []
    for _ in range(rounds):
        quiet.append(_block(fn, seconds))
        if other is not None:
            beside.append(_block(fn, seconds, before=other))
            time.sleep(0.3)
        hog = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            time.sleep(0.2)
            busy.append(_block(fn, seconds))
        finally:
            hog.kill()
            hog.wait()
        time.sleep(0.3)
    print(json.dumps({"quiet": quiet, "busy": busy, "beside": beside}))


def _measure(runtime: str, name: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", runtime, "--models", name]
    cmd += ["--threads", str(args.threads), "--rounds", str(args.rounds)]
    cmd += ["--seconds", str(args.seconds)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    """Parse the command line; as parent, run a child per (model, runtime) and tabulate."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated names, or all (the catalog)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.5, help="length of one timed block")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    chosen = [m for m in args.models.split(",") if m] or list(models())
    if chosen == ["all"]:
        chosen = [f"catalog/{name}" for name in CATALOG]
    if args.child:
        child(args.child, chosen[0], args.threads, args.rounds, args.seconds)
        return
    print(f"{args.threads} threads, {args.rounds} rounds; factor = busy / quiet")
    head = f"{'quiet/busy mean ms':>20s}{'mean factor':>17s}{'median f.':>10s}{'p95':>6s}  "
    print(f"{'':18s}{'--- Ember ---':^55s}{'--- onnxruntime ---':^55s}")
    print(f"{'model':18s}{head}{head}{'Ember beside ort':>16s}")
    worse: dict[str, list[str]] = {"mean": [], "median": []}
    for name in chosen:
        shown = name.removeprefix("catalog/")
        row, tail, factor = f"{shown:18s}", "", {}
        for runtime in ("ember", "ort"):
            r = _measure(runtime, name, args)
            factor[runtime] = summary(r)
            f = factor[runtime]
            times = f"{f['quiet_ms']:.3f} / {f['busy_ms']:.3f}"
            spread = f"[{f['low']:.1f}-{f['high']:.1f}]"
            row += f"{times:>20s}{f['mean']:7.1f} {spread:>9s}{f['median']:10.1f}{f['p95']:6.1f}  "
            if r["beside"]:
                beside = [s["mean"] / q["mean"] for q, s in zip(r["quiet"], r["beside"])]
                tail = f"{statistics.median(beside):7.1f} [{min(beside):.1f}-{max(beside):.1f}]"
        for stat, names in worse.items():
            if factor["ember"][stat] > factor["ort"][stat]:
                names.append(
                    f"{shown} ({factor['ember'][stat]:.2f} against {factor['ort'][stat]:.2f})"
                )
        print(row + f"{tail:>16s}", flush=True)
    for stat, names in worse.items():
        no_worse = len(chosen) - len(names)
        print(f"Ember's {stat} factor at most onnxruntime's on {no_worse} of {len(chosen)} models")
        if names:
            print(f"  above it: {', '.join(names)}")


def summary(r: dict[str, list[dict[str, float]]]) -> dict[str, float]:
    """One runtime's row from a child's blocks: mean quiet and busy times (ms), the median
    over rounds of the mean factor and its range, the median factor, and the busy blocks'
    95th percentile over the quiet median (both medians over rounds)."""
    means = [b["mean"] / q["mean"] for q, b in zip(r["quiet"], r["busy"])]
    medians = [b["median"] / q["median"] for q, b in zip(r["quiet"], r["busy"])]
    tails = [b["p95"] / q["median"] for q, b in zip(r["quiet"], r["busy"])]
    return {
        "quiet_ms": statistics.median(q["mean"] for q in r["quiet"]) * 1e3,
        "busy_ms": statistics.median(b["mean"] for b in r["busy"]) * 1e3,
        "mean": statistics.median(means),
        "low": min(means),
        "high": max(means),
        "median": statistics.median(medians),
        "p95": statistics.median(tails),
    }


if __name__ == "__main__":
    main()
