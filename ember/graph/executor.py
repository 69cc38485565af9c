"""The graph executor: compiled kernels called in order over a static memory plan.

``ember.graph.compile`` hands over a list of steps (a kernel and the values it
reads and writes). The plan gives every intermediate value a view into a few
reusable byte buffers: a buffer returns to the pool after the last step that
reads its value, and a step's outputs are placed before its inputs are released,
so a kernel never reads and writes the same memory. Inputs and outputs get
buffers of the model's own too (inputs are copied in, outputs copied out), so the
arrays of every step are fixed when the memory is made: each kernel checks its
arrays once then (shape, dtype, contiguity, alignment, overlap) and ``run`` calls
it without the per-call checks, which cost more than a small kernel runs.

That memory, with the kernels bound to it, is a :class:`Workspace`, and a run owns
one for its duration: a :class:`WorkspacePool` hands an idle one to each ``run`` and
makes another when all are busy, so runs on several threads never share a buffer
and still run in parallel (native kernel calls release the GIL). A lock around
``run`` would be simpler but would serialise the threads; onnxruntime's sessions
too give each concurrent run its own intermediate buffers. The params are read-only
to kernels and kept once per model, shared by its workspaces (and, through a
:class:`ParamStore`, by the sizes of a DynamicModel).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ember.errors import ArgumentError, EmberError, InternalError
from ember.frontend.graph import Graph, TensorType
from ember.graph.artifact import export_model
from ember.graph.index_guard import guard_index_reads
from ember.graph.profiling import profile_calls
from ember.graph.step import Step
from ember.runtime.aligned import CACHE_LINE, aligned_array, aligned_copy, aligned_empty
from ember.target import Target


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


def owned_params(graph: Graph) -> dict[str, np.ndarray]:
    """The graph's constants as kernels read them: C-contiguous, each on a cache line."""
    return {n: aligned_copy(p) for n, p in graph.params.items()}


class Workspace:
    """The memory of one run: the planned intermediates and a buffer of the model's own for
    each input and each output, with every step's kernel bound to them.

    The params are not part of it: kernels only read them, so every workspace of a model
    shares one copy. Each array starts on a cache line.
    """

    def __init__(self, graph: Graph, steps: Sequence[Step], params: dict[str, np.ndarray]):
        views, self.nbytes = plan_memory(graph, steps)
        env: dict[str, np.ndarray] = {**params, **views}
        for v in graph.inputs:  # always this run's own: a run writes them
            env[v.name] = aligned_array(v.type.shape, v.type.dtype)
        for v in graph.outputs:
            if v.name not in env:  # else an input or a param, copied out
                env[v.name] = aligned_array(v.type.shape, v.type.dtype)
        self.env = env
        self.inputs = [env[n] for n in graph.input_names]
        # indices out of range are refused before a kernel would read a clamped row
        self.calls = guard_index_reads(graph, steps, env, [_bind_step(st, env) for st in steps])

    def load(self, arrays: Sequence[np.ndarray]) -> None:
        """Copy checked input arrays into this workspace's input buffers."""
        for buf, arr in zip(self.inputs, arrays):
            np.copyto(buf, arr)


class WorkspacePool:
    """Workspaces handed out one per run and taken back after it, so runs on several
    threads never share a buffer and still run in parallel (a kernel call releases the GIL).

    A run takes an idle workspace or, when every one is busy, makes a new one (allocating
    and binding, about as costly as one run); so the pool grows to the largest number of
    runs that were ever in flight at once, and then allocates nothing more.
    """

    def __init__(self, make: Callable[[], Workspace]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self.first = make()  # made now: a plan a kernel refuses raises when the model is built
        self._idle: list[Workspace] = [self.first]
        self.size = 1

    def acquire(self) -> Workspace:
        """An idle workspace, or a new one; give it back with :meth:`release`."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self.size += 1
        return self._make()  # outside the lock: other runs need not wait for the binding

    def release(self, ws: Workspace) -> None:
        with self._lock:
            self._idle.append(ws)

    @contextlib.contextmanager
    def take(self) -> Iterator[Workspace]:
        ws = self.acquire()
        try:
            yield ws
        finally:
            self.release(ws)


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


def inputs_in_order(
    names: list[str], inputs: Any, defaults: Mapping[str, Any] | None = None
) -> list[Any]:
    """``inputs`` (a dict by name, or a list or tuple in ``names`` order) as a list in
    ``names`` order; anything else, or a wrong, missing or extra name, raises. A dict may
    leave out a name with a default (an overridable ONNX initializer)."""
    defaults = defaults or {}
    if type(inputs) is dict and len(inputs) == len(names):  # the common case, quickly
        try:
            return [inputs[n] for n in names]
        except KeyError:
            pass  # a wrong name: said below
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - set(names), key=repr)  # keys may be of any type
        if unknown:
            raise ArgumentError(f"unknown input name(s) {unknown}; the model takes {names}")
        missing = [n for n in names if n not in inputs and n not in defaults]
        if missing:
            raise ArgumentError(f"missing input(s) {missing}; the model takes {names}")
        return [inputs[n] if n in inputs else defaults[n] for n in names]
    if not isinstance(inputs, Sequence) or isinstance(inputs, (str, bytes, bytearray)):
        hint = ""
        if isinstance(inputs, np.ndarray) or hasattr(inputs, "__array__"):
            hint = (
                f"; for a single array write run([x]) or run({{{names[0]!r}: x}})" if names else ""
            )
        raise ArgumentError(
            f"run takes a dict {{input name: array}} or a list of arrays in the order "
            f"{names}, got {type(inputs).__name__}{hint}"
        )
    given = list(inputs)
    if len(given) != len(names):
        raise ArgumentError(f"the model takes {len(names)} inputs {names}, got {len(given)}")
    return given


def input_array(name: str, value: Any, dtype: np.dtype | str) -> np.ndarray:
    """``value`` as a numpy array (without a copy where it is one) of ``dtype``, or an
    ArgumentError naming input ``name``. Like onnxruntime, no dtype is converted: a Python
    list of floats is float64 and is refused by a float32 input."""
    try:
        arr = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - a ragged list, an object whose __array__ fails
        raise ArgumentError(f"input '{name}' is not an array: {type(e).__name__}: {e}") from e
    want = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    if arr.dtype != want:
        hint = ""
        if not isinstance(value, np.ndarray) and arr.dtype != object:
            hint = f" (convert it first: np.asarray(value, dtype='{want}'))"
        got = type(value).__name__ if arr.dtype == object else str(arr.dtype)
        raise ArgumentError(f"input '{name}' must be {want}, got {got}{hint}")
    return arr


class ParamStore:
    """Constant arrays shared between compiled models: :meth:`intern` hands every caller
    the same array for the same bytes (dtype, shape and content, compared bit for bit), so
    the sizes a DynamicModel compiles keep one copy of each weight between them. A param
    that differs between sizes (a folded shape, a layout chosen per size) is simply kept
    once per distinct content."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrays: dict[tuple[str, tuple[int, ...], bytes], np.ndarray] = {}

    @staticmethod
    def _bytes(a: np.ndarray) -> np.ndarray:
        return a.reshape(-1).view(np.uint8)

    def intern(self, array: np.ndarray) -> np.ndarray:
        a = aligned_copy(np.asarray(array))
        key = (a.dtype.str, a.shape, hashlib.blake2b(self._bytes(a), digest_size=20).digest())
        with self._lock:
            kept = self._arrays.get(key)
            if kept is not None and np.array_equal(self._bytes(kept), self._bytes(a)):
                return kept
            self._arrays.setdefault(key, a)
            return a

    def __len__(self) -> int:
        return len(self._arrays)


class CompiledModel:
    """A compiled graph: ``run(inputs) -> outputs`` (numpy arrays).

    Inputs may be numpy arrays or anything ``np.asarray`` reads (``ember.nd`` arrays);
    every input is checked (name, dtype, shape) before anything runs, and a wrong one
    raises :class:`~ember.errors.ArgumentError` naming it.

    Every array a kernel touches is owned by the model: the params (one copy), and per
    :class:`Workspace` the planned intermediates and one buffer per input and per output.
    Each kernel's arguments are checked once, when a workspace is made, and bound
    (:meth:`ember.runtime.module.Function.bind`); ``run`` validates the user's inputs,
    takes a workspace, copies the inputs in, calls the bound kernels without further
    checks and returns copies of the outputs (arrays of the caller's own).

    ``run`` is thread-safe: each call takes a workspace of its own from a pool
    (:class:`WorkspacePool`), so concurrent runs of one model on several threads give
    the same results as runs one after another, and run in parallel. The pool grows to
    the largest number of runs in flight at once; each workspace costs
    ``workspace_bytes`` plus the inputs and outputs, while the params are shared.
    """

    def __init__(self, graph: Graph, steps: list[Step], target: Target) -> None:
        self.graph = graph
        self.steps = steps
        self.target = target
        self.input_names = graph.input_names
        self.output_names = graph.output_names
        self.input_types: list[TensorType] = [v.type for v in graph.inputs]
        self.output_types: list[TensorType] = [v.type for v in graph.outputs]
        self._params = owned_params(graph)
        self._shared_with: Any = None  # the ParamStore the params came from, if any
        self._pool = WorkspacePool(self._new_workspace)
        self.workspace_bytes = self._pool.first.nbytes  # of each workspace
        self._input_dtypes = [b.dtype for b in self._pool.first.inputs]

    def _new_workspace(self) -> Workspace:
        return Workspace(self.graph, self.steps, self._params)

    def share_params(self, store: ParamStore) -> None:
        """Take this model's params from ``store``, which hands the same array to every
        model that has a param of the same bytes (a DynamicModel's sizes share their
        weights this way). Call it before the model runs on other threads: it rebinds
        every kernel to the shared arrays."""
        if self._shared_with is store:
            return
        self._params = {n: store.intern(p) for n, p in self._params.items()}
        # the graph's own arrays (an import's copy) are dropped for the shared ones
        self.graph = replace(self.graph, params=dict(self._params))
        self._pool = WorkspacePool(self._new_workspace)
        self._shared_with = store

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

    def _check_inputs(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """Every input as an array of the model's dtype and shape, checked before any runs."""
        arrays = []
        given = inputs_in_order(self.input_names, inputs, self.graph.defaults)
        for name, t, dtype, value in zip(
            self.input_names, self.input_types, self._input_dtypes, given
        ):
            arr = input_array(name, value, dtype)
            if arr.shape != t.shape:
                raise ArgumentError(
                    f"input '{name}' must have shape {list(t.shape)}, got {list(arr.shape)}"
                )
            arrays.append(arr)
        return arrays

    def _workspace(self) -> contextlib.AbstractContextManager[Workspace]:
        """A workspace of the caller's own while the block runs (see :class:`WorkspacePool`)."""
        return self._pool.take()

    def _call_steps(self, ws: Workspace) -> None:
        k = 0
        try:
            for k, call in enumerate(ws.calls):  # noqa: B007 - k names a failing step
                call()
        except EmberError as e:
            raise e.add_context(f"while running {self.steps[k].where}") from None

    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """Run the model on ``inputs`` (a dict by name, or a list in ``input_names`` order);
        safe to call from several threads at once (see the class docstring). A dict may leave
        out an input with a default (``graph.defaults``: an ONNX initializer also listed as a
        graph input); an index out of range raises ArgumentError."""
        arrays = self._check_inputs(inputs)
        ws = self._pool.acquire()  # not `with`: a run of a small model is a few microseconds
        try:
            ws.load(arrays)
            self._call_steps(ws)
            return [np.array(ws.env[v], copy=True) for v in self.output_names]
        finally:
            self._pool.release(ws)

    __call__ = run

    def export(self, path: Any, archs: Sequence[str] | None = None, ptx: bool = True) -> None:
        """Write this model to one ``.ember`` file that :func:`ember.load` reads in any
        process (see :mod:`ember.graph.artifact`); for CUDA, ``archs`` picks the cubins stored
        and ``ptx=False`` leaves out the PTX (:mod:`ember.codegen_cuda.artifact`)."""
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
        whole run, over ``number`` runs: an :class:`ember.graph.profiling.ModelProfile`
        (``print(model.profile())`` shows a table)."""
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
