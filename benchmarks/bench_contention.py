"""How much slower Ember and onnxruntime run with one busy process beside them.

Run: ``python benchmarks/bench_contention.py`` (``--models mobilenet_v2,mlp``,
``--threads 2``, ``--rounds 3``; ``--models catalog/NAME`` for any model of ``ember
bench``'s catalog, ``--models all`` for every one, at full size). Each (model, runtime)
pair is timed in its own process, so one runtime's thread pool never competes with the
other's. In that process the model is compiled (Ember: disk cache allowed) and then
timed by turns: a *quiet* block, then a *busy* block with one ``while True`` Python
process started beside it (pinned nowhere, so on a two-core machine it takes half the
cores), then a pause. A block's time is the median of its runs; the slowdown factor of a
round is busy / quiet. The table prints both runtimes' medians and the range of the
factor over the rounds. The last column is Ember's slowdown when each of its runs
follows an onnxruntime run in the same process (another runtime's spinning pool beside
it), over its quiet time.

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
) -> float:
    """Median time of one run over about ``seconds`` of runs (``before`` untimed before each)."""
    times: list[float] = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop or len(times) < 5:
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
    print(f"{args.threads} threads; factor = busy / quiet, median [range], {args.rounds} rounds")
    print(f"{'model':20s}{'ember quiet/busy ms':>22s}{'factor':>17s}", end="")
    print(f"{'ort quiet/busy ms':>22s}{'factor':>17s}{'ember beside ort':>20s}")
    worse: list[str] = []
    for name in chosen:
        shown = name.removeprefix("catalog/")
        row, tail, medians = f"{shown:20s}", "", {}
        for runtime in ("ember", "ort"):
            r = _measure(runtime, name, args)
            factors = [b / q for q, b in zip(r["quiet"], r["busy"])]
            medians[runtime] = statistics.median(factors)
            q, b = statistics.median(r["quiet"]) * 1e3, statistics.median(r["busy"]) * 1e3
            spread = f"[{min(factors):.1f}-{max(factors):.1f}]"
            row += f"{f'{q:.3f} / {b:.3f}':>22s}{medians[runtime]:7.1f} {spread:>9s}"
            if r["beside"]:
                beside = [s / q for q, s in zip(r["quiet"], r["beside"])]
                spread_b = f"[{min(beside):.1f}-{max(beside):.1f}]"
                tail = f"{statistics.median(beside):7.1f} {spread_b:>9s}"
        if medians["ember"] > medians["ort"]:
            worse.append(f"{shown} ({medians['ember']:.2f} against {medians['ort']:.2f})")
        print(row + f"{tail:>20s}", flush=True)
    no_worse = len(chosen) - len(worse)
    print(f"Ember's median factor at most onnxruntime's on {no_worse} of {len(chosen)} models")
    if worse:
        print(f"above it: {', '.join(worse)}")


if __name__ == "__main__":
    main()
