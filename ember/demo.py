"""``ember demo``: build a matmul and a fused elementwise chain for this CPU and time them.

Both are checked against numpy before anything is timed; the GFLOP/s (or GB/s)
printed beside numpy's come from the same process run.
"""

from __future__ import annotations

import time

import numpy as np


def _best(fn, repeat: int = 5) -> float:  # noqa: ANN001
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(size: int = 1024, threads: int | None = None) -> int:
    import ember
    from ember.runtime import set_num_threads
    from ember.tir.topi.elementwise import elementwise_chain_numpy
    from ember.tuner import create_task

    if threads:
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
    t_ember = mod.time_evaluator(number=5, repeat=3)(a, b, c).median
    t_numpy = _best(lambda: a @ b)
    flops = 2.0 * M * N * K
    print(
        f"matmul {M}x{N}x{K} float32: ember {flops / t_ember / 1e9:7.1f} GFLOP/s, "
        f"numpy {flops / t_numpy / 1e9:7.1f} GFLOP/s, ratio {t_numpy / t_ember:.2f}  "
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
    t_e = emod.time_evaluator(number=5, repeat=3)(x, bias, y).median
    t_n = _best(lambda: elementwise_chain_numpy(x, bias))
    flops = 11.0 * rows * cols  # the multiply-adds, not counting tanh
    print(
        f"fused bias + GELU {rows}x{cols}: ember {flops / t_e / 1e9:7.1f} GFLOP/s, "
        f"numpy {flops / t_n / 1e9:7.1f} GFLOP/s, ratio {t_n / t_e:.2f}  (result checked)"
    )
    return 0
