"""Fused attention against the unfused graph: memory at growing sequence, and time beside
onnxruntime.

Run: ``python benchmarks/bench_attention.py`` (``--seqs 1024,2048,4096`` by default, 12
heads of 64, batch 1; ``--quick`` for small sizes). The model is the BERT-style attention
block of ``frontend/testing/attention_block.py`` without projections (so the kernels timed
are the attention's: reshapes, transposes, the padding mask, MatMul, Softmax, MatMul).
"fused" is Ember's default compile for ``llvm``, where ``fuse_attention`` makes it one
kernel with an online softmax; "unfused" the same compile with that pass left out of
``graph_passes``. Both outputs are checked against onnxruntime (its graph optimizations
off) before anything is timed.

Memory, per sequence length and variant, each measured in a fresh child process: the
memory plan's ``workspace_bytes``, tracemalloc's peak over compile and one run, and the
growth of the process's peak RSS (``ru_maxrss``) over them. The fused plan grows with S
(the Q/K/V copies), the unfused one with S² (the [B, H, S, S] scores).

Time: the three (fused, unfused, onnxruntime with all its optimizations) take turns for
``--rounds`` rounds, pausing between, each the best of ``--repeat`` runs; medians are
printed with the ratio onnxruntime / Ember (above 1: Ember faster). On a shared machine
the figures move with its load: rerun alone before quoting them.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.frontend.testing.attention_block import attention_block


def block(seq: int, heads: int, head_dim: int, batch: int) -> tuple[Any, dict[str, np.ndarray]]:
    """The benchmark's model and inputs (seeded)."""
    rng = np.random.default_rng(0)
    return attention_block(rng, batch, seq, heads, head_dim, projections=False)


def compile_variant(model: Any, fused: bool) -> Any:
    """Ember's default ``llvm`` compile, or the same without ``fuse_attention``."""
    import ember
    from ember.frontend.passes import DEFAULT_PASSES

    passes = ember.get_backend("llvm").graph_passes(DEFAULT_PASSES)
    if not fused:
        passes = tuple(p for p in passes if p.name != "fuse_attention")
    return ember.compile(model, target="llvm", graph_passes=passes)


def session(model: Any, threads: int, optimized: bool = True) -> Any:
    """An onnxruntime CPU session (``optimized``: all graph optimizations, else none)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def measure_memory(seq: int, heads: int, head_dim: int, batch: int, fused: bool) -> dict:
    """Workspace, tracemalloc peak and peak-RSS growth of compiling and running one variant
    (meant to run alone in a child process: peak RSS never goes down)."""
    model, inputs = block(seq, heads, head_dim, batch)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tracemalloc.start()
    lib = compile_variant(model, fused)
    lib.run(inputs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    return {"workspace": lib.workspace_bytes, "tracemalloc": peak, "rss": rss}


def _child_memory(args: argparse.Namespace, seq: int, fused: bool) -> dict:
    cmd = [sys.executable, __file__, "--memory-child", f"{seq},{int(fused)}"]
    cmd += ["--heads", str(args.heads), "--head-dim", str(args.head_dim)]
    cmd += ["--batch", str(args.batch)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def _best(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _mib(n: float) -> str:
    return f"{n / 2**20:10.2f}"


def memory_table(args: argparse.Namespace, seqs: list[int]) -> None:
    print(f"memory (MiB), batch {args.batch}, {args.heads} heads of {args.head_dim}:")
    print(f"{'seq':>6s}{'variant':>9s}{'workspace':>11s}{'tracemalloc':>12s}{'peak RSS+':>11s}")
    for seq in seqs:
        for fused in (True, False):
            m = _child_memory(args, seq, fused)
            name = "fused" if fused else "unfused"
            row = f"{seq:6d}{name:>9s}{_mib(m['workspace']):>11s}{_mib(m['tracemalloc']):>12s}"
            print(row + f"{_mib(m['rss']):>11s}", flush=True)


def time_table(args: argparse.Namespace, seqs: list[int]) -> None:
    from ember.runtime.threads import set_num_threads

    set_num_threads(args.threads)
    print(f"time (ms), {args.threads} threads, best of {args.repeat}, median of {args.rounds}:")
    print(f"{'seq':>6s}{'fused':>10s}{'unfused':>10s}{'ort':>10s}{'ort/fused':>10s}{'range':>12s}")
    for seq in seqs:
        model, inputs = block(seq, args.heads, args.head_dim, args.batch)
        want = session(model, args.threads, optimized=False).run(None, inputs)[0]
        libs = [compile_variant(model, fused) for fused in (True, False)]
        for lib in libs:
            np.testing.assert_allclose(lib.run(inputs)[0], want, rtol=1e-4, atol=1e-5)
        sess = session(model, args.threads)
        runs = [lambda lib=lib, x=inputs: lib.run(x) for lib in libs]
        runs.append(lambda sess=sess, x=inputs: sess.run(None, x))
        times: list[list[float]] = [[], [], []]
        for _ in range(args.rounds):
            for k, fn in enumerate(runs):
                times[k].append(_best(fn, args.repeat))
                time.sleep(0.3)  # let the other runtime's threads go idle
        ratios = [o / f for o, f in zip(times[2], times[0])]
        med = [statistics.median(t) * 1e3 for t in times]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(
            f"{seq:6d}{med[0]:10.1f}{med[1]:10.1f}{med[2]:10.1f}"
            f"{statistics.median(ratios):10.2f}{spread:>12s}",
            flush=True,
        )
    set_num_threads(None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", default="1024,2048,4096", help="comma-separated sequence lengths")
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="sequences 64,128, 2 heads of 16")
    ap.add_argument("--no-time", action="store_true", help="the memory table only")
    ap.add_argument("--memory-child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        seq, fused = (int(x) for x in args.memory_child.split(","))
        m = measure_memory(seq, args.heads, args.head_dim, args.batch, bool(fused))
        print(json.dumps(m))
        return
    if args.quick:
        args.seqs, args.heads, args.head_dim, args.rounds = "64,128", 2, 16, 1
    seqs = [int(s) for s in args.seqs.split(",")]
    memory_table(args, seqs)
    if not args.no_time:
        time_table(args, seqs)


if __name__ == "__main__":
    main()
