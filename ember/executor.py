"""The graph executor: compiled kernels called in order over a static memory plan.

``ember.graph_compile`` hands over a list of steps (a kernel and the values it
reads and writes). The plan gives every intermediate value a view into a few
reusable byte buffers: a buffer returns to the pool after the last step that
reads its value, and a step's outputs are placed before its inputs are released,
so a kernel never reads and writes the same memory. Graph outputs get fresh
arrays on every run (a caller keeps what ``run`` returned); params and inputs are
read where they are. A CPU kernel that reads and writes only params and planned
buffers is bound to them on the first run (``Kernel.bind``): its arguments are
checked once, not on every run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import ArgumentError, EmberError
from ember.frontend.graph import Graph, TensorType


@dataclass
class Step:
    kernel: Any
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    where: str


def plan_memory(graph: Graph, steps: Sequence[Step]) -> tuple[dict[str, np.ndarray], int]:
    """Views for the intermediates over reused buffers; also returns the bytes allocated."""
    keep = set(graph.params) | set(graph.input_names) | set(graph.output_names)
    last_use: dict[str, int] = {}
    for k, st in enumerate(steps):
        for v in st.inputs:
            last_use[v] = k
    free: list[np.ndarray] = []
    views: dict[str, np.ndarray] = {}
    owner: dict[str, np.ndarray] = {}
    total = 0
    for k, st in enumerate(steps):
        for v in st.outputs:
            if v in keep:
                continue
            t = graph.values[v].type
            need = max(t.size * np.dtype(t.dtype).itemsize, 1)
            fits = [b for b in free if b.nbytes >= need]
            buf = min(fits, key=lambda b: b.nbytes) if fits else None
            if buf is None:
                buf = np.empty(need, dtype=np.uint8)
                total += need
            else:
                free = [b for b in free if b is not buf]
            owner[v] = buf
            views[v] = buf[: t.size * np.dtype(t.dtype).itemsize].view(t.dtype).reshape(t.shape)
        for v in set(st.inputs) | set(st.outputs):
            if v in owner and last_use.get(v, -1) <= k:
                free.append(owner.pop(v))
    return views, total


class CompiledModel:
    """A compiled graph: ``run(inputs) -> outputs`` (numpy arrays).

    Inputs may be numpy arrays or anything ``np.asarray`` reads (``ember.nd`` arrays).
    One run at a time per model: the intermediates live in buffers the model owns,
    so threads running the same model concurrently need a model each.
    """

    def __init__(self, graph: Graph, steps: list[Step], target: str) -> None:
        self.graph = graph
        self.steps = steps
        self.target = target
        self.input_names = graph.input_names
        self.output_names = graph.output_names
        self.input_types: list[TensorType] = [v.type for v in graph.inputs]
        self.output_types: list[TensorType] = [v.type for v in graph.outputs]
        self._views, self.workspace_bytes = plan_memory(graph, steps)
        self._base: dict[str, np.ndarray] = {**graph.params, **self._views}
        self._bound: list[Any] | None = None

    @property
    def input_shapes(self) -> list[tuple[Any, ...]]:
        return [t.shape for t in self.input_types]

    @property
    def output_shapes(self) -> list[tuple[Any, ...]]:
        return [t.shape for t in self.output_types]

    @property
    def input_dtypes(self) -> list[str]:
        return [t.dtype for t in self.input_types]

    @property
    def output_dtypes(self) -> list[str]:
        return [t.dtype for t in self.output_types]

    def _bind_inputs(self, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - set(self.input_names))
            if unknown:
                raise ArgumentError(
                    f"unknown input name(s) {unknown}; the model takes {self.input_names}"
                )
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise ArgumentError(
                    f"missing input(s) {missing}; the model takes {self.input_names}"
                )
            given = [inputs[n] for n in self.input_names]
        else:
            given = list(inputs)
            if len(given) != len(self.input_names):
                raise ArgumentError(
                    f"the model takes {len(self.input_names)} inputs {self.input_names}, "
                    f"got {len(given)}"
                )
        bound = {}
        for name, t, value in zip(self.input_names, self.input_types, given):
            arr = np.asarray(value)
            if str(arr.dtype) != t.dtype:
                raise ArgumentError(f"input '{name}' must be {t.dtype}, got {arr.dtype}")
            if arr.shape != t.shape:
                raise ArgumentError(
                    f"input '{name}' must have shape {list(t.shape)}, got {list(arr.shape)}"
                )
            bound[name] = np.require(arr, requirements="C")
        return bound

    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """Run the model on ``inputs`` (a dict by name, or a list in ``input_names`` order)."""
        env = dict(self._base)
        env.update(self._bind_inputs(inputs))
        fresh = {}
        for v, t in zip(self.output_names, self.output_types):
            if v not in env:
                fresh[v] = np.empty(t.shape, dtype=t.dtype)
        env.update(fresh)
        for st, bound in zip(self.steps, self._bound_calls()):
            try:
                if bound is not None:
                    bound()
                else:
                    st.kernel(*[env[v] for v in st.inputs], *[env[v] for v in st.outputs])
            except EmberError as e:
                raise e.add_context(f"while running {st.where}") from None
        return [fresh[v] if v in fresh else np.array(env[v], copy=True) for v in self.output_names]

    __call__ = run

    def _bound_calls(self) -> list[Any]:
        """Per step, its kernel bound to its arrays (see ``Kernel.bind``) where it reads
        and writes only params and planned buffers, which never move; else None (its
        arguments include an input or output of the run). Made on the first run."""
        if self._bound is None:
            bound = []
            for st in self.steps:
                names = (*st.inputs, *st.outputs)
                bind = getattr(st.kernel, "bind", None)
                fixed = bind is not None and all(v in self._base for v in names)
                bound.append(bind(*[self._base[v] for v in names]) if fixed else None)
            self._bound = bound
        return self._bound

    def export(self, path: Any, archs: Sequence[str] | None = None, ptx: bool = True) -> None:
        """Write this model to one ``.ember`` file that :func:`ember.load` reads in any
        process (see :mod:`ember.artifact`); for CUDA, ``archs`` picks the cubins stored
        and ``ptx=False`` leaves out the PTX (:mod:`ember.artifact_cuda`)."""
        from ember.artifact import export_model

        export_model(self, path, archs, ptx)

    def benchmark(
        self,
        inputs: Mapping[str, Any] | Sequence[Any] | None = None,
        number: int = 10,
        repeat: int = 3,
    ) -> dict[str, float]:
        """Seconds per run: median, mean, min over ``repeat`` batches of ``number`` runs."""
        if inputs is None:
            rng = np.random.default_rng(0)
            inputs = [rng.standard_normal(t.shape).astype(t.dtype) for t in self.input_types]
        self.run(inputs)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                self.run(inputs)
            times.append((time.perf_counter() - start) / number)
        return {
            "median": float(np.median(times)),
            "mean": float(np.mean(times)),
            "min": float(min(times)),
        }

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {t}" for n, t in zip(self.input_names, self.input_types))
        n_out, n_k = len(self.output_names), len(self.steps)
        return f"CompiledModel({sig}) -> {n_out} output(s), {n_k} kernels, {self.target}"
