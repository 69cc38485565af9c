"""Issue 24's reach on groups with only a generic schedule: generic vs auto vs onnxruntime.

For each workload of :mod:`autosched_group_workloads` (softmax, layer norm, BERT's
scale+mask+softmax, depthwise conv + ReLU6, global average pooling, GELU + residual) this
takes the model's fused groups as auto tasks, searches each with ``--trials`` random
configs of its sketches (seeded; each built and timed once in this process, checked
against the generic schedule's output), re-times the three fastest by turns with the
generic kernel and keeps the fastest (the generic one if none beats it, as ``tune``
keeps its fallback), then times by turns, in blocks with pauses, the
generic schedule of every group, the best auto kernel of every group, and onnxruntime
running the same model at the same thread count. A workload of several groups (BERT's
scale and mask are a group apart from the softmax) adds its groups' times. ``--extra``
adds what-if rows (:data:`autosched_group_workloads.EXTRA`: another compute for the same op),
left out of the medians.

    python benchmarks/bench_autosched_groups.py --trials 32 --seed 0 --rounds 7
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from autosched_group_workloads import EXTRA, WORKLOADS  # noqa: E402

import ember  # noqa: E402
from ember.tuner.space import FallbackConfig  # noqa: E402


def _arrays(tensors: list[Any], rng: np.random.Generator, n_out: int) -> list[np.ndarray]:
    out = []
    for k, t in enumerate(tensors):
        shape = tuple(int(d.value) for d in t.shape)
        if k < len(tensors) - n_out:
            out.append(rng.standard_normal(shape).astype(str(t.dtype)))
        else:
            out.append(np.zeros(shape, str(t.dtype)))
    return out


KEEP = 3  # candidates per group re-timed by turns against the generic kernel


def _block_s(fn: Any, min_s: float) -> float:
    """Seconds per call of ``fn`` over a block of at least ``min_s``."""
    fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        took = time.perf_counter() - start
        if took >= min_s:
            return took / n


class Group:
    """One fused group: its generic kernel and the best auto kernel a search found."""

    def __init__(self, task: Any, seed: int) -> None:
        self.task = task
        rng = np.random.default_rng(seed)
        s, tensors = task.instantiate(FallbackConfig())
        self.n_out = 1
        self.args = _arrays(tensors, rng, self.n_out)
        self.generic = ember.build(s, tensors, target="llvm")
        self.generic(*self.args)
        self.want = [a.copy() for a in self.args[-self.n_out :]]
        self.best: Any = None
        self.best_cfg: Any = None
        self.top: list[tuple[float, int, Any, Any]] = []  # (seconds, order, module, config)
        self.failed = 0

    def search(self, trials: int, seed: int) -> None:
        """Random configs of the sketches; each checked against the generic output, timed."""
        rng = random.Random(seed)
        space = self.task.config_space
        for _ in range(trials):
            cfg = space.sample(rng)
            try:
                s, tensors = self.task.instantiate(cfg)
                mod = ember.build(s, tensors, target="llvm")
            except ember.EmberError:
                self.failed += 1
                continue
            outs = [np.zeros_like(w) for w in self.want]
            mod(*self.args[: -self.n_out], *outs)
            for got, want in zip(outs, self.want):
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
            t = _block_s(lambda m=mod: m(*self.args), 0.02)
            self.top = sorted([*self.top, (t, len(self.top), mod, cfg)], key=lambda x: x[:2])
            self.top = self.top[:KEEP]

    def settle(self, rounds: int) -> None:
        """Time the search's ``KEEP`` fastest candidates by turns with the generic kernel
        and keep the fastest by median (the generic one if none beats it): a pick made
        on one timing each read slower than the generic kernel by turns."""
        entries = [(self.generic, None), *((mod, cfg) for _, _, mod, cfg in self.top)]
        times: list[list[float]] = [[] for _ in entries]
        order = list(range(len(entries)))
        for r in range(rounds):
            random.Random(r).shuffle(order)
            for i in order:
                times[i].append(_block_s(lambda m=entries[i][0]: m(*self.args), 0.02))
        best = min(range(len(entries)), key=lambda i: statistics.median(times[i]))
        self.best, self.best_cfg = (None, None) if best == 0 else entries[best]

    def sketch(self) -> str:
        return "generic" if self.best_cfg is None else str(self.best_cfg["sketch"].val)


def _ort(model: Any, feed: dict[str, np.ndarray], threads: int) -> Any:
    # optional dependency: onnxruntime
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feed)


def run(name: str, trials: int, seed: int, rounds: int, threads: int) -> dict[str, Any]:
    """Search and time one workload; its times (median over rounds, ms) and ratios."""
    if name in EXTRA:
        make, task = EXTRA[name]
        model, feed = make(np.random.default_rng(seed))
        groups = [Group(task(), seed)]
    else:
        model, feed = WORKLOADS[name](np.random.default_rng(seed))
        tasks = ember.extract_tasks(model, "llvm", search="auto")
        groups = [Group(mt.task, seed) for mt in tasks]
    for k, g in enumerate(groups):
        g.search(trials, seed + k)
        g.settle(rounds)
    ort_fn = _ort(model, feed, threads)
    kinds: dict[str, list[Any]] = {
        "generic": [lambda g=g: g.generic(*g.args) for g in groups],
        "auto": [lambda g=g: (g.best or g.generic)(*g.args) for g in groups],
        "ort": [ort_fn],
    }
    times: dict[str, list[float]] = {k: [] for k in kinds}
    order = list(kinds)
    for r in range(rounds):
        random.Random(seed + r).shuffle(order)
        for kind in order:
            times[kind].append(sum(_block_s(f, 0.05) for f in kinds[kind]))
            time.sleep(0.05)
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    return {
        "name": name,
        **ms,
        "vs_generic": ms["generic"] / ms["auto"],
        "vs_ort": ms["ort"] / ms["auto"],
        "sketches": ",".join(g.sketch() for g in groups),
        "failed": sum(g.failed for g in groups),
    }


def main() -> int:
    """Print the table (and the median speedup over the generic schedule)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--only", default="", help="run the workloads whose name contains this")
    p.add_argument(
        "--extra", action="store_true", help="add what-if rows (another compute for an op)"
    )
    args = p.parse_args()
    threads = int(os.environ.get("EMBER_NUM_THREADS") or os.cpu_count() or 1)
    print(
        f"trials={args.trials} seed={args.seed} rounds={args.rounds} threads={threads} "
        f"load={os.getloadavg()[0]:.1f}"
    )
    head = f"{'workload':32} {'generic ms':>10} {'auto ms':>9} {'ort ms':>9} {'gen/auto':>8}"
    print(head + f" {'ort/auto':>8}  best sketch (failed candidates)")
    rows = []
    for name in [*WORKLOADS, *(EXTRA if args.extra else ())]:
        if args.only not in name:
            continue
        r = run(name, args.trials, args.seed, args.rounds, threads)
        rows.append(r)
        print(
            f"{name:32} {r['generic']:10.3f} {r['auto']:9.3f} {r['ort']:9.3f} "
            f"{r['vs_generic']:8.2f} {r['vs_ort']:8.2f}  {r['sketches']} ({r['failed']})",
            flush=True,
        )
    rows = [r for r in rows if r["name"] in WORKLOADS]
    if rows:
        print(
            f"median gen/auto {statistics.median(r['vs_generic'] for r in rows):.2f}  "
            f"median ort/auto {statistics.median(r['vs_ort'] for r in rows):.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
