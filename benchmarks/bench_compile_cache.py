"""Compile time of a model cold and warm from the disk caches, each in a fresh process.

Run: ``python benchmarks/bench_compile_cache.py`` (``--model resnet50``, or any other name of
the benchmark catalog, ``frontend/testing/catalog.py``; ``--model cnn`` for a quick run). The
model (seeded weights) is saved as ONNX; three fresh processes then compile it with
``EMBER_CACHE_DIR`` pointing at one empty temporary folder: the first builds and stores
every kernel and the whole model; the second loads the model (``ember/graph/
model_cache.py``); the third, after the stored models are deleted, imports and compiles
the model again but loads every kernel (``ember/graph/kernel_cache.py``), which is what a
compile under other tuning records or PassContext options finds. Each process prints its
compile seconds, the cache counters and a hash of its outputs, which must match. The first
process also pays for importing LLVM and writing the libraries, as a user's first compile
does. The cold compile builds its kernels on every core the process may use (forked
processes store theirs in the cache and the compiling process loads them, so the counters
show those as hits); ``--jobs 1`` builds them all in the compiling process
(``EMBER_COMPILE_JOBS=1``), as every compile did before 2026-11-30.

Python's bytecode cache matters here: with ``PYTHONDONTWRITEBYTECODE`` set and no
``__pycache__`` (a development checkout on a machine that sets it), every process compiles
Ember's source again, about 0.5 s of each figure; an installed wheel ships its bytecode.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = """
import hashlib, json, sys, time, numpy as np, ember
from ember.graph import kernel_cache, model_cache
start = time.perf_counter()
model = ember.compile(sys.argv[1])
took = time.perf_counter() - start
feeds = dict(np.load(sys.argv[2]))
out = model.run(feeds)[0]
digest = hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()[:16]
stats = {"kernels": kernel_cache.STATS, "models": model_cache.STATS}
print(json.dumps({"seconds": took, "stats": stats, "outputs": digest}))
"""


def _child(folder: Path, cache: Path, jobs: int | None) -> dict:
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache)}
    env.pop("EMBER_DISK_CACHE", None)
    if jobs is not None:
        env["EMBER_COMPILE_JOBS"] = str(jobs)
    args = [sys.executable, "-c", CHILD, str(folder / "m.onnx"), str(folder / "feeds.npz")]
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the compile process failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    import onnx

    from ember.frontend.testing.catalog import CATALOG
    from ember.runtime.threads import available_cpus

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18", choices=sorted(CATALOG))
    ap.add_argument("--quick", action="store_true", help="the catalog's small variant")
    ap.add_argument("--jobs", type=int, help="compile processes (default: every CPU)")
    args = ap.parse_args()
    model, feeds = CATALOG[args.model](np.random.default_rng(0), args.quick)
    with tempfile.TemporaryDirectory(prefix="ember-bench-cache-") as tmp:
        folder = Path(tmp)
        onnx.save(model, str(folder / "m.onnx"))
        np.savez(folder / "feeds.npz", **feeds)
        cold = _child(folder, folder / "cache", args.jobs)
        warm = _child(folder, folder / "cache", args.jobs)
        shutil.rmtree(folder / "cache" / "models")  # the kernels alone
        kernels = _child(folder, folder / "cache", args.jobs)
    jobs = args.jobs or f"every CPU ({available_cpus()})"
    print(f"{args.model}, compile processes: {jobs}")
    print(f"{'run':8s}{'compile s':>10s}  cache counters")
    for name, r in (("cold", cold), ("warm", warm), ("kernels", kernels)):
        print(f"{name:8s}{r['seconds']:10.2f}  {r['stats']}")
    same = cold["outputs"] == warm["outputs"] == kernels["outputs"]
    print(f"speedup {cold['seconds'] / warm['seconds']:.1f}x; identical outputs: {same}")
    if not same:
        raise SystemExit("warm outputs differ from cold outputs")


if __name__ == "__main__":
    main()
