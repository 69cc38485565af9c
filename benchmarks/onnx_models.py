"""Whole small models through ``ember.compile`` (generic per-node schedules) beside onnxruntime.

Run: ``python benchmarks/onnx_models.py``. Each model is built with onnx.helper from
seeded random weights; Ember's output is checked against onnxruntime's before both
are timed (best of ``--repeat`` batches). Ratios are onnxruntime time / Ember time,
so > 1 means Ember is faster. The machine's other load skews both; rerun on a quiet one.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

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


MODELS: dict[str, Callable[[np.random.Generator], tuple[object, dict]]] = {
    "cnn 8x3x64x64": lambda rng: small_cnn(rng, 8, 64, 64),
    "mlp 64x512-1024-256": lambda rng: mlp(rng, 64, (512, 1024, 256)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    import onnxruntime as ort

    import ember

    print(f"{'model':24s}{'compile s':>10s}{'ember ms':>10s}{'ort ms':>10s}{'ort/ember':>10s}")
    for name, build in MODELS.items():
        model, inputs = build(np.random.default_rng(0))
        start = time.perf_counter()
        lib = ember.compile(model, target="llvm")
        compile_s = time.perf_counter() - start
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, inputs)
        for got, ref in zip(lib.run(inputs), want):
            np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)
        t_ember = _best(lambda: lib.run(inputs), args.number, args.repeat)  # noqa: B023
        t_ort = _best(lambda: sess.run(None, inputs), args.number, args.repeat)  # noqa: B023
        times = f"{t_ember * 1e3:10.3f}{t_ort * 1e3:10.3f}{t_ort / t_ember:10.2f}"
        print(f"{name:24s}{compile_s:10.2f}{times}")


if __name__ == "__main__":
    main()
