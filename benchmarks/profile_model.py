"""Where a model's time goes: each fused group's kernel beside the whole run.

Run: ``python benchmarks/profile_model.py --model resnet18 --threads 1`` (models as in
``bench_models.py``; ``--top N`` for the N slowest groups). Prints the steps in run
order (or the slowest), the time summed per kind of group (``conv2d+add+relu``),
and what the kernels do not account for (Python between them, input and output
copies). Timings on a shared machine move with its load.
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    from bench_models import models

    import ember
    from ember.runtime.threads import set_num_threads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--quick", action="store_true", help="small inputs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--top", type=int, default=0, help="only the N slowest groups")
    args = ap.parse_args()
    model, inputs = models(args.quick)[args.model](np.random.default_rng(0))
    lib = ember.compile(model, target="llvm")
    set_num_threads(args.threads)
    prof = lib.profile(inputs, number=args.number)
    print(prof.table(args.top))
    print("\nper kind of group (ms, % of a run):")
    for ops, sec in prof.by_ops().items():
        print(f"  {ops:40s} {sec * 1e3:8.3f} {100 * sec / prof.total:5.1f}")


if __name__ == "__main__":
    main()
