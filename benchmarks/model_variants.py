"""Builds of one catalog model under code variants, profiled in one process by turns.

Run: ``python benchmarks/model_variants.py --model resnet18 '' 'import m; m.X = 1; undo =
lambda: setattr(m, "X", 0)'`` (each argument: Python run before that build, which may
define ``undo``, called after it; ``''``: the code as it is). Every build starts with the
in-process kernel cache emptied (``ember/graph/kernels.py`` keeps kernels by fused group,
not by schedule, so a second build of the same model would otherwise reuse the first's
kernels whatever a patched schedule or default says) and the disk cache off. The builds'
outputs are checked against the first's; then each round profiles every build (``--number``
runs) in turn, the order reversed every other round, and the medians are printed: the
total, and each step whose code differs from the first build's (its LLVM IR) or whose time
differs by more than ``--show`` (a fraction). Identical builds still read a few percent
apart (where each build's memory landed), so compare a variant against the code as it is
built twice (``'' ''``).
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

import numpy as np


def build_variants(model: Any, patches: list[str], target: str = "llvm") -> list[Any]:
    """``model`` compiled once per patch, each with the kernel cache emptied first."""
    import ember
    from ember.graph import kernels

    built = []
    for patch in patches:
        kernels.clear_cache()
        scope: dict[str, Any] = {}
        exec(patch, scope)
        try:
            built.append(ember.compile(model, target=target))
        finally:
            if callable(scope.get("undo")):
                scope["undo"]()
    kernels.clear_cache()
    return built


def step_code(lib: Any) -> list[str | None]:
    """Each step's LLVM IR (None for a step that is no compiled module)."""
    codes: list[str | None] = []
    for step in lib.steps:
        module = getattr(step.kernel, "module", None)
        codes.append(module.get_source("ll") if hasattr(module, "get_source") else None)
    return codes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("patches", nargs="+", help="Python run before each build ('': as it is)")
    ap.add_argument("--model", default="mobilenet_v2", help="a catalog model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--number", type=int, default=10, help="profiled runs per turn")
    ap.add_argument("--show", type=float, default=0.03, help="time difference shown")
    ap.add_argument("--target", default="llvm", help="e.g. 'llvm -mcpu=znver3' (AVX2 code)")
    a = ap.parse_args()
    os.environ["EMBER_DISK_CACHE"] = "0"

    from ember.frontend.testing.catalog import CATALOG
    from ember.graph.profiling import step_ops
    from ember.runtime.threads import set_num_threads

    model, inputs = CATALOG[a.model](np.random.default_rng(0), False)
    libs = build_variants(model, a.patches, a.target)
    first = libs[0].run(inputs)
    for k, lib in enumerate(libs[1:], 1):
        for x, y in zip(first, lib.run(inputs)):
            np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-4, err_msg=f"build {k}")
    codes = [step_code(lib) for lib in libs]
    set_num_threads(a.threads)
    totals: list[list[float]] = [[] for _ in libs]
    steps: list[list[list[float]]] = [[] for _ in libs]
    for r in range(a.rounds):
        order = range(len(libs)) if r % 2 == 0 else reversed(range(len(libs)))
        for k in order:
            prof = libs[k].profile(inputs, number=a.number)
            totals[k].append(prof.total * 1e3)
            steps[k].append([s.seconds * 1e3 for s in prof.steps])
    print(f"{a.model}, {a.threads} thread(s), {a.rounds} rounds by turns; ms, medians")
    print("total", " ".join(f"{statistics.median(t):.3f}" for t in totals))
    medians = [np.median(np.array(s), axis=0) for s in steps]
    for i, step in enumerate(libs[0].steps):
        differ = [k for k, c in enumerate(codes) if c[i] != codes[0][i]]
        times = [float(m[i]) for m in medians]
        spread = (max(times) - min(times)) / max(max(times), 1e-9)
        if differ or spread > a.show:
            mark = f"code differs in build {', '.join(map(str, differ))}" if differ else ""
            print(f"{i:3d} {step_ops(step)[:36]:36s}", " ".join(f"{t:.4f}" for t in times), mark)


if __name__ == "__main__":
    main()
