"""Where a model's time goes: each fused group's kernel beside the whole run.

Run: ``python benchmarks/profile_model.py --model resnet18 --threads 1`` (models as in
``bench_models.py``; ``--top N`` for the N slowest groups). Prints the steps in run
order (or the slowest), the time summed per kind of group (``conv2d+add+relu``),
and what the kernels do not account for (Python between them, input and output
copies). A model with symbolic dims (the GPT-2 decode steps) is profiled at its inputs'
sizes.

``--threads 1,2`` profiles at each count by turns (``--rounds`` turns, each step's best
kept) and prints every step's time at each count and the speedup of the last count over
the first: a step at or below 1.00x gains nothing from the threads (on a quiet machine
it should run serially). Timings on a shared machine move with its load; the turns keep
a change of load from landing on one count only.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np


def compare(lib: Any, inputs: dict, counts: list[int], rounds: int, number: int) -> str:
    """Each step's best time over ``rounds`` turns at each thread count, as a table."""
    from ember.runtime.threads import set_num_threads

    best: dict[int, list[float]] = {}
    totals: dict[int, float] = {}
    for _ in range(rounds):
        for t in counts:
            set_num_threads(t)
            try:
                prof = lib.profile(inputs, number=number)
            finally:
                set_num_threads(None)
            seconds = [s.seconds for s in prof.steps]
            best[t] = [min(a, b) for a, b in zip(best.get(t, seconds), seconds)]
            totals[t] = min(totals.get(t, prof.total), prof.total)
            time.sleep(0.2)  # the idle pool's threads go to sleep between turns
    first, last = counts[0], counts[-1]
    ops = [s.ops for s in prof.steps]
    width = max(len(o) for o in ops + ["run"])
    head = "".join(f"{f'{t}t ms':>10s}" for t in counts)
    lines = [f"{'#':>3s}  {'ops':{width}s}{head}  {f'{last}t/{first}t':>8s}"]
    for k, name in enumerate(ops):
        cells = "".join(f"{best[t][k] * 1e3:10.4f}" for t in counts)
        gain = best[first][k] / best[last][k] if best[last][k] else 0.0
        lines.append(f"{k:3d}  {name:{width}s}{cells}  {gain:7.2f}x")
    cells = "".join(f"{totals[t] * 1e3:10.4f}" for t in counts)
    gain = totals[first] / totals[last] if totals[last] else 0.0
    lines.append(f"     {'run':{width}s}{cells}  {gain:7.2f}x")
    return "\n".join(lines)


def main() -> None:
    from bench_models import models

    import ember
    from ember.runtime.threads import set_num_threads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--quick", action="store_true", help="small inputs")
    ap.add_argument("--threads", default="1", help="a count, or several to compare: 1,2")
    ap.add_argument("--rounds", type=int, default=3, help="turns when comparing counts")
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--top", type=int, default=0, help="only the N slowest groups")
    args = ap.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    model, inputs = models(args.quick)[args.model](np.random.default_rng(0))
    lib = ember.compile(model, target="llvm")
    if hasattr(lib, "bind"):  # a DynamicModel: the model compiled for these inputs' sizes
        sizes, _ = lib.bind(inputs)
        lib = lib.specialize(dict(sizes))
    if len(counts) > 1:
        print(compare(lib, inputs, counts, args.rounds, args.number))
        return
    set_num_threads(counts[0])
    prof = lib.profile(inputs, number=args.number)
    print(prof.table(args.top))
    print("\nper kind of group (ms, % of a run):")
    for ops, sec in prof.by_ops().items():
        print(f"  {ops:40s} {sec * 1e3:8.3f} {100 * sec / prof.total:5.1f}")


if __name__ == "__main__":
    main()
