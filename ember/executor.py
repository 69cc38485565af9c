"""The graph executor: compiled kernels called in order over a static memory plan.

``ember.graph_compile`` hands over a list of steps (a kernel and the values it
reads and writes). The plan gives every intermediate value a view into a few
reusable byte buffers: a buffer returns to the pool after the last step that
reads its value, and a step's outputs are placed before its inputs are released,
so a kernel never reads and writes the same memory. Inputs and outputs get
buffers of the model's own too (inputs are copied in, outputs copied out), so the
arrays of every step are fixed when the model is built: each kernel checks its
arrays once then (shape, dtype, contiguity, alignment, overlap) and ``run`` calls
it without the per-call checks, which cost more than a small kernel runs.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import ArgumentError, EmberError, InternalError
from ember.frontend.graph import Graph, TensorType
from ember.index_guard import guard_index_reads
from ember.runtime.aligned import CACHE_LINE, aligned_array, aligned_copy, aligned_empty


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
                buf = aligned_empty(-(-need // CACHE_LINE) * CACHE_LINE)
                total += need
            else:
                free = [b for b in free if b is not buf]
            owner[v] = buf
            views[v] = buf[: t.size * np.dtype(t.dtype).itemsize].view(t.dtype).reshape(t.shape)
        for v in set(st.inputs) | set(st.outputs):
            if v in owner and last_use.get(v, -1) <= k:
                free.append(owner.pop(v))
    return views, total


def _owned_arrays(graph: Graph, views: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every array a kernel reads or writes: params (C-contiguous), the planned
    intermediates, and a buffer of the model's own for each input and each output, each
    starting on a cache line."""
    env: dict[str, np.ndarray] = {n: aligned_copy(p) for n, p in graph.params.items()}
    env.update(views)
    for v in (*graph.inputs, *graph.outputs):
        if v.name not in env:
            env[v.name] = aligned_array(v.type.shape, v.type.dtype)
    return env


def _bind_step(st: Step, env: dict[str, np.ndarray]) -> Callable[[], None]:
    """``st`` with its arrays fixed: a kernel that can bind (a CPU kernel) checks them now
    and is then called unchecked; any other step (host control flow, a GPU kernel,
    nothing to do) is called with them and checks what it needs each time."""
    arrays = [env[v] for v in (*st.inputs, *st.outputs)]
    bind = getattr(st.kernel, "bind", None)
    if bind is None:
        return functools.partial(st.kernel, *arrays)
    try:
        return bind(arrays)
    except EmberError as e:
        raise InternalError(
            f"the memory plan gives {st.where} arrays its kernel refuses: {e}"
        ) from e


class CompiledModel:
    """A compiled graph: ``run(inputs) -> outputs`` (numpy arrays).

    Inputs may be numpy arrays or anything ``np.asarray`` reads (``ember.nd`` arrays).
    Every array a kernel touches is owned by the model: params, the planned
    intermediates, and one buffer per input and per output. So each kernel's arguments
    are checked once, here, and bound (:meth:`ember.runtime.module.Function.bind`);
    ``run`` validates the user's inputs, copies them into the input buffers, calls the
    bound kernels without further checks and returns copies of the outputs.
    One run at a time per model: threads running the same model concurrently need a
    model each.
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
        self._env = _owned_arrays(graph, self._views)
        self._inputs = [self._env[n] for n in self.input_names]
        calls = [_bind_step(st, self._env) for st in steps]
        # indices out of range are refused before a kernel would read a clamped row
        self._calls = guard_index_reads(graph, steps, self._env, calls)

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

    def _given(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[Any]:
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - set(self.input_names))
            if unknown:
                raise ArgumentError(
                    f"unknown input name(s) {unknown}; the model takes {self.input_names}"
                )
            defaults = self.graph.defaults  # overridable ONNX initializers
            missing = [n for n in self.input_names if n not in inputs and n not in defaults]
            if missing:
                raise ArgumentError(
                    f"missing input(s) {missing}; the model takes {self.input_names}"
                )
            return [inputs[n] if n in inputs else defaults[n] for n in self.input_names]
        given = list(inputs)
        if len(given) != len(self.input_names):
            raise ArgumentError(
                f"the model takes {len(self.input_names)} inputs {self.input_names}, "
                f"got {len(given)}"
            )
        return given

    def _load_inputs(self, inputs: Mapping[str, Any] | Sequence[Any]) -> None:
        """Validate every input first, then copy them into the model's input buffers."""
        arrays = []
        given = self._given(inputs)
        for name, t, buf, value in zip(self.input_names, self.input_types, self._inputs, given):
            arr = np.asarray(value)
            if arr.dtype != buf.dtype:
                raise ArgumentError(f"input '{name}' must be {t.dtype}, got {arr.dtype}")
            if arr.shape != t.shape:
                raise ArgumentError(
                    f"input '{name}' must have shape {list(t.shape)}, got {list(arr.shape)}"
                )
            arrays.append(arr)
        for buf, arr in zip(self._inputs, arrays):
            np.copyto(buf, arr)

    def _call_steps(self) -> None:
        k = 0
        try:
            for k, call in enumerate(self._calls):  # noqa: B007 - k names a failing step
                call()
        except EmberError as e:
            raise e.add_context(f"while running {self.steps[k].where}") from None

    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """Run the model on ``inputs`` (a dict by name, or a list in ``input_names`` order).
        A dict may leave out an input with a default (``graph.defaults``: an ONNX initializer
        also listed as a graph input); an index out of range raises ArgumentError."""
        self._load_inputs(inputs)
        self._call_steps()
        return [np.array(self._env[v], copy=True) for v in self.output_names]

    __call__ = run

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
        inputs = self._example(inputs)
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

    def profile(
        self, inputs: Mapping[str, Any] | Sequence[Any] | None = None, number: int = 10
    ) -> Any:
        """Median seconds of each step (a fused group's kernel or a host step) and of a
        whole run, over ``number`` runs: an :class:`ember.profiling.ModelProfile`
        (``print(model.profile())`` shows a table)."""
        from ember.profiling import profile_calls

        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ArgumentError(f"profile: number must be a positive integer, got {number!r}")
        return profile_calls(self, self._example(inputs), number)

    def _example(self, inputs: Mapping[str, Any] | Sequence[Any] | None) -> Any:
        if inputs is not None:
            return inputs
        rng = np.random.default_rng(0)
        return [rng.standard_normal(t.shape).astype(t.dtype) for t in self.input_types]

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {t}" for n, t in zip(self.input_names, self.input_types))
        n_out, n_k = len(self.output_names), len(self.steps)
        return f"CompiledModel({sig}) -> {n_out} output(s), {n_k} kernels, {self.target}"
