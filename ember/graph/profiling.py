"""Per-kernel times of a compiled model: where a run's time goes, group by group.

:meth:`ember.graph.executor.CompiledModel.profile` runs the model ``number`` times as
``run`` does (input checks, the program of native runs and host steps, the outputs), on
one of its workspaces, and times every step. A kernel in a native run of the step loop
is timed by the loop itself, from the end of the kernel before it to its own end
(:meth:`ember.runtime.step_loop.NativeRun.timed`): between two kernels of a real run,
with the pool's threads spinning as a run leaves them. Clocks around Python calls of
each kernel, which this module used before, let the pool's threads go to sleep between
kernels, so a small parallel kernel could pay a wake-up it does not pay in a run. A host step (an
``If``, a gather's index check) is timed around its Python call. Where the loop has no
clock (it reads ``clock_gettime``, on Linux), every step is called from Python as before.

The result is a :class:`ModelProfile`: the median time of each step, the median time of
a whole ``run`` and the median of what a run spends outside its steps (input checks and
copies, Python between native runs, the outputs). On a busy machine the steps' medians
sum to less than the median run: a run of many steps is rarely spared a preemption that
a median of each step leaves out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.runtime.step_loop import NativeRun


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
    """Time each of ``model``'s steps over ``number`` runs (after one warm-up)."""
    model.run(inputs)
    per_step: list[list[float]] = [[] for _ in model.steps]
    totals, outside = [], []
    clock = time.perf_counter
    for _ in range(number):
        seconds = [0.0] * len(model.steps)
        start = clock()
        arrays = model._check_inputs(inputs)
        with model._workspace() as ws:
            if _loop_timed(ws.program):
                ws.load(arrays, borrow=True)
                fresh = ws.fresh_outputs()
                model._call_steps(ws, seconds)
                model._outputs(ws, fresh)
            else:  # each kernel called from Python, on the workspace's own buffers
                ws.load(arrays)
                for k, call in enumerate(ws.calls):
                    t0 = clock()
                    call()
                    seconds[k] = clock() - t0
                [np.array(ws.env[v], copy=True) for v in model.output_names]
        totals.append(clock() - start)
        for k, s in enumerate(seconds):
            per_step[k].append(s)
        outside.append(totals[-1] - sum(seconds))
    steps = tuple(
        StepTime(step_ops(st), st.where, float(np.median(ts)))
        for st, ts in zip(model.steps, per_step)
    )
    return ModelProfile(steps, float(np.median(totals)), max(float(np.median(outside)), 0.0))


def _loop_timed(program: Any) -> bool:
    """Whether the step loop can time every native run of ``program``."""
    return all(call.timeable for _, call in program if isinstance(call, NativeRun))


def timed_call(step: int, call: Callable[[], None], seconds: list[float]) -> None:
    """Call a program entry of step ``step`` and add its time to ``seconds``: a native
    run's per kernel, as the loop read them, a host step's around the call."""
    if isinstance(call, NativeRun):
        for k, s in zip(call.steps, call.timed()):
            seconds[k] += s
        return
    t0 = time.perf_counter()
    call()
    seconds[step] += time.perf_counter() - t0
