"""Per-kernel times of a compiled model: where a run's time goes, group by group.

:meth:`ember.graph.executor.CompiledModel.profile` runs the model ``number`` times with a
clock around each step (a fused group's kernel, or a host step such as an ``If``),
in order and on one of the model's workspaces, so each kernel sees the caches a real run
leaves it. It gives a :class:`ModelProfile`: the median time of each step, the
median time of a whole ``run`` (input copy, every step, output copy) and the median
of what a run spends outside its steps (Python between kernels, copies). On a busy
machine the steps' medians sum to less than the median run: a run of many steps is
rarely spared a preemption that a median of each step leaves out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StepTime:
    """One step: its kernel's ops (``conv2d+add+relu``), where it comes from, seconds."""

    ops: str
    where: str
    seconds: float


@dataclass(frozen=True)
class ModelProfile:
    """Per-step and whole-run timings of a compiled model, as ``profile`` returns them, to show
    where a run's time goes."""

    steps: tuple[StepTime, ...]
    total: float  # median seconds of a whole run
    overhead: float  # median over runs of a run's seconds outside its steps

    def by_ops(self) -> dict[str, float]:
        """Seconds summed over steps with the same ops, largest first."""
        sums: dict[str, float] = {}
        for s in self.steps:
            sums[s.ops] = sums.get(s.ops, 0.0) + s.seconds
        return dict(sorted(sums.items(), key=lambda kv: -kv[1]))

    def table(self, top: int = 0) -> str:
        """Steps in run order (or the ``top`` slowest), with their share of a run."""
        rows = sorted(self.steps, key=lambda s: -s.seconds)[:top] if top else self.steps
        width = max([len(s.ops) for s in rows] + [3])
        lines = [f"{'#':>3s}  {'ops':{width}s}  {'ms':>8s}  {'%':>5s}"]
        index = {id(s): k for k, s in enumerate(self.steps)}
        for s in rows:
            share = 100 * s.seconds / self.total if self.total else 0.0
            k = index[id(s)]
            lines.append(f"{k:3d}  {s.ops:{width}s}  {s.seconds * 1e3:8.3f}  {share:5.1f}")
        lines.append(f"     {'outside kernels':{width}s}  {self.overhead * 1e3:8.3f}")
        lines.append(f"     {'run':{width}s}  {self.total * 1e3:8.3f}  100.0")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def step_ops(step: Any) -> str:
    """The ops a step's kernel runs (``Kernel.op``), else the type of host step."""
    op = getattr(step.kernel, "op", None)
    if isinstance(op, str):
        return op
    return type(step.kernel).__name__.strip("_")


def profile_calls(model: Any, inputs: Any, number: int) -> ModelProfile:
    """Time each of ``model``'s bound steps over ``number`` runs (after one warm-up)."""
    model.run(inputs)
    per_step: list[list[float]] = [[] for _ in model.steps]
    totals, outside = [], []
    clock = time.perf_counter
    for _ in range(number):
        start = clock()
        arrays = model._check_inputs(inputs)
        with model._workspace() as ws:
            ws.load(arrays)
            for k, call in enumerate(ws.calls):
                t0 = clock()
                call()
                per_step[k].append(clock() - t0)
            [np.array(ws.env[v], copy=True) for v in model.output_names]
        totals.append(clock() - start)
        outside.append(totals[-1] - sum(ts[-1] for ts in per_step))
    steps = tuple(
        StepTime(step_ops(st), st.where, float(np.median(ts)))
        for st, ts in zip(model.steps, per_step)
    )
    return ModelProfile(steps, float(np.median(totals)), max(float(np.median(outside)), 0.0))
