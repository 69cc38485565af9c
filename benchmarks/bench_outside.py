"""What a model's run spends outside its kernels: Python before the first and after the last.

Run: ``python benchmarks/bench_outside.py --models mobilenet_v2,bert,mlp --threads 2``
(models as in ``bench_models.py``; ``--runs N`` runs each, the median kept). Each model's
native step loop is given a stamps array for every run (as a profile does), so a plain
``lib.run`` leaves the monotonic clock's reading before its first kernel and after its
last; the run's own time, read around ``lib.run``, minus the kernels' span is what the
run spent outside them: checking the inputs, taking a workspace, pointing the loop at
the input and output arrays, the native call's entry and return, handing the outputs
back. Timed in a warm loop each of those is a microsecond or two; right after a run
that streamed megabytes through the caches they cost several times that, which is what
this measures. A step run from Python between native runs (an index check before a
gather, control flow) counts as outside.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any

import numpy as np


def outside(lib: Any, inputs: dict, runs: int) -> tuple[float, float, float, float]:
    """Median microseconds of a run, its kernels' span, and the time before the first and
    after the last kernel, over ``runs`` runs."""
    with lib._workspace() as ws:
        loops = [call for _, call in ws.program if hasattr(call, "stamped")]
        if not loops or not all(c.timeable for c in loops):
            raise SystemExit("no native run of this model can be timed")
    rows = []
    with contextlib.ExitStack() as stack:
        stamps = [(stack.enter_context(loop.stamped()), len(loop)) for loop in loops]
        lib.run(inputs)
        for _ in range(runs):
            start = time.monotonic_ns()
            lib.run(inputs)
            end = time.monotonic_ns()
            span = sum(t[n] - t[0] for t, n in stamps)
            (first, _), (last, n) = stamps[0], stamps[-1]
            rows.append((end - start, span, first[0] - start, end - last[n]))
    run, span, before, after = np.median(np.array(rows, dtype=np.float64), axis=0) / 1e3
    return run, span, before, after


def main() -> None:
    from bench_models import models

    import ember
    from ember.runtime.threads import set_num_threads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mobilenet_v2,bert,mlp")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    set_num_threads(args.threads)
    catalog = models(False)
    head = ("run us", "kernels us", "outside", "before", "after")
    print(f"{'model':14s}" + "".join(f"{h:>11s}" for h in head))
    for name in args.models.split(","):
        model, inputs = catalog[name](np.random.default_rng(0))
        lib = ember.compile(model, target="llvm")
        run, span, before, after = outside(lib, inputs, args.runs)
        cells = (run, span, run - span, before, after)
        print(f"{name:14s}" + "".join(f"{c:11.1f}" for c in cells))


if __name__ == "__main__":
    main()
