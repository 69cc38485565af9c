"""Whole models through ``ember.compile`` beside onnxruntime, at 1 and 2 threads.

Run: ``python benchmarks/bench_models.py`` (``--models resnet18,bert`` for a subset,
``--quick`` for small inputs). Each model is built with onnx.helper from seeded
random weights (``frontend/testing/zoo.py``, ``models.py``); Ember's output is
checked against onnxruntime's before anything is timed. Compile time is cold: the
in-process kernel cache is emptied first and the disk cache is off
(``benchmarks/bench_compile_cache.py`` times a warm compile). Latency is the best of
``--repeat`` batches of ``--number`` runs; the ratio is onnxruntime time / Ember time,
so above 1 Ember is faster. Timings on a shared machine move with its load: rerun on a quiet one.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

from ember.frontend.testing import zoo
from ember.frontend.testing.models import mlp, small_cnn


def _best(fn: Callable[[], object], number: int, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return min(times)


def _cold_compile(model: object) -> object:
    """``ember.compile`` with the disk kernel cache off, so no earlier run's kernels count."""
    import ember

    saved = os.environ.get("EMBER_DISK_CACHE")
    os.environ["EMBER_DISK_CACHE"] = "0"
    try:
        return ember.compile(model, target="llvm")
    finally:
        if saved is None:
            del os.environ["EMBER_DISK_CACHE"]
        else:
            os.environ["EMBER_DISK_CACHE"] = saved


def models(quick: bool) -> dict[str, Callable[[np.random.Generator], tuple[object, dict]]]:
    size, seq = (64, 32) if quick else (224, 128)
    return {
        "resnet18": lambda rng: zoo.resnet18(rng, 1, size),
        "mobilenet_v2": lambda rng: zoo.mobilenet_v2(rng, 1, size),
        "bert": lambda rng: zoo.bert_encoder(rng, 1, seq, layers=4, hidden=256, heads=4),
        "cnn": lambda rng: small_cnn(rng, 8, 64, 64),
        "mlp": lambda rng: mlp(rng, 64, (512, 1024, 256)),
    }


def _session(model: object, threads: int) -> object:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    data = model.SerializeToString()  # type: ignore[attr-defined]
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated subset of the models")
    ap.add_argument("--quick", action="store_true", help="small inputs (64x64 images, 32 tokens)")
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,2", help="thread counts to time")
    args = ap.parse_args()

    from ember.kernels import clear_cache
    from ember.runtime.threads import set_num_threads

    table = models(args.quick)
    chosen = [m for m in args.models.split(",") if m] or list(table)
    threads = [int(t) for t in args.threads.split(",")]
    head = "".join(
        f"{f'ember {t}t ms':>13s}{f'ort {t}t ms':>12s}{'ort/ember':>10s}" for t in threads
    )
    print(f"{'model':14s}{'compile s':>10s}{head}")
    for name in chosen:
        model, inputs = table[name](np.random.default_rng(0))
        clear_cache()
        start = time.perf_counter()
        lib = _cold_compile(model)
        compile_s = time.perf_counter() - start
        want = _session(model, max(threads)).run(None, inputs)
        for got, ref in zip(lib.run(inputs), want):
            np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)
        row = f"{name:14s}{compile_s:10.1f}"
        for t in threads:
            set_num_threads(t)
            sess = _session(model, t)
            t_ember = _best(lambda: lib.run(inputs), args.number, args.repeat)  # noqa: B023
            time.sleep(0.2)  # let the other runtime's threads go idle
            t_ort = _best(lambda: sess.run(None, inputs), args.number, args.repeat)  # noqa: B023
            row += f"{t_ember * 1e3:13.2f}{t_ort * 1e3:12.2f}{t_ort / t_ember:10.2f}"
            time.sleep(0.2)
        set_num_threads(None)
        print(row, flush=True)


if __name__ == "__main__":
    main()
