"""``ember demo``: build a matmul and a fused elementwise chain for this CPU and time them.

Both are checked against numpy before anything is timed; the rates printed beside
numpy's come from the same process run. Each timed batch lasts at least
``_MIN_REPEAT_MS`` so a small size is timed over many calls rather than one call
that is shorter than the clock's resolution, and a rate is printed in the unit
(GFLOP/s, MFLOP/s, ...) that keeps its significant digits.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import ember
from ember.errors import ArgumentError
from ember.runtime import set_num_threads
from ember.tuner import create_task

_MIN_REPEAT_MS = 50.0


def add_parser(sub: Any) -> None:
    """Register ``ember demo``."""
    demo = sub.add_parser("demo", help="build a matmul and a fused elementwise chain for the CPU")
    demo.add_argument("--size", type=int, default=1024, help="matmul size M=N=K")
    demo.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    demo.set_defaults(fn=_cmd_demo)


def _cmd_demo(ns: argparse.Namespace) -> int:
    return main(size=ns.size, threads=ns.threads)


def _best(fn, repeat: int = 5) -> float:  # noqa: ANN001
    """Best seconds per call over ``repeat`` batches, each at least ``_MIN_REPEAT_MS`` long."""
    fn()
    times = []
    number = 1
    for _ in range(repeat):
        while True:
            start = time.perf_counter()
            for _ in range(number):
                fn()
            elapsed = time.perf_counter() - start
            if elapsed * 1e3 >= _MIN_REPEAT_MS or number >= 1 << 20:
                break
            number *= 2
        times.append(elapsed / number)
    return min(times)


def format_rate(flops: float, seconds: float) -> str:
    """``flops / seconds`` in the largest unit that shows it as at least 1 (``"12.3 MFLOP/s"``)."""
    rate = flops / seconds if seconds > 0 else float("inf")
    for scale, unit in ((1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"), (1e3, "kFLOP/s")):
        if rate >= scale:
            return f"{rate / scale:7.1f} {unit}"
    return f"{rate:7.1f} FLOP/s"


def main(size: int = 1024, threads: int | None = None) -> int:
    """Build, check and time the two demo kernels at ``size``; ``threads`` caps the CPU
    threads (default: all). Returns the exit status (0)."""
    # start-up cost: the TE compute library (~150 ms) loads only when the demo runs
    from ember.tir.topi.elementwise import elementwise_chain_numpy

    # a user error (the CLI prints it and exits 1): 0 threads would mean no thread at all
    if size < 1:
        raise ArgumentError(f"ember demo: --size must be a positive integer, got {size}")
    if threads is not None and threads < 1:
        raise ArgumentError(f"ember demo: --threads must be a positive integer, got {threads}")
    if threads is not None:
        set_num_threads(threads)
    rng = np.random.default_rng(0)
    M = N = K = size
    task = create_task("matmul.llvm", args=(M, N, K, "float32"), target="llvm")
    sch, args = task.instantiate()
    mod = ember.build(sch, args, target="llvm", name="matmul")
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.empty((M, N), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    t_ember = mod.time_evaluator(number=1, repeat=3, min_repeat_ms=_MIN_REPEAT_MS)(a, b, c).median
    t_numpy = _best(lambda: a @ b)
    flops = 2.0 * M * N * K
    print(
        f"matmul {M}x{N}x{K} float32: ember {format_rate(flops, t_ember)}, "
        f"numpy {format_rate(flops, t_numpy)}, ratio {t_numpy / t_ember:.2f}  "
        "(result checked)"
    )

    rows, cols = 2048, 4096
    etask = create_task("elementwise_chain.llvm", args=(rows, cols, "float32"), target="llvm")
    esch, eargs = etask.instantiate()
    emod = ember.build(esch, eargs, target="llvm", name="gelu_chain")
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    bias = rng.standard_normal((cols,), dtype=np.float32)
    y = np.empty_like(x)
    emod(x, bias, y)
    np.testing.assert_allclose(y, elementwise_chain_numpy(x, bias), rtol=1e-4, atol=1e-4)
    t_e = emod.time_evaluator(number=1, repeat=3, min_repeat_ms=_MIN_REPEAT_MS)(x, bias, y).median
    t_n = _best(lambda: elementwise_chain_numpy(x, bias))
    flops = 11.0 * rows * cols  # the multiply-adds, not counting tanh
    print(
        f"fused bias + GELU {rows}x{cols}: ember {format_rate(flops, t_e)}, "
        f"numpy {format_rate(flops, t_n)}, ratio {t_n / t_e:.2f}  (result checked)"
    )
    return 0
