"""The graph executor: compiled kernels called in order over a static memory plan.

``ember.graph.compile`` hands over the graph and a list of steps (a kernel and the values
it reads and writes); :class:`CompiledModel` gives ``run(inputs) -> outputs``. The memory
a run works in (the plan, the workspaces handed one per run, the shared params) is
:mod:`ember.graph.workspace`; this module checks the user's inputs, takes a workspace,
runs its steps in order (each run of consecutive CPU kernels as one call of the
backend's native step loop, :mod:`ember.graph.step_program`) and copies the outputs out.
It also times a model (``benchmark``, ``profile``) and writes it to a ``.ember`` file
(``export``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ember.backend import get_backend
from ember.errors import ArgumentError, EmberError
from ember.frontend.graph import Graph, TensorType
from ember.frontend.narrow_dtypes import from_storage, numpy_dtype, to_storage
from ember.frontend.string_tensors import STRING, string_input
from ember.graph.artifact import export_model
from ember.graph.profiling import profile_calls, timed_call
from ember.graph.step import Step
from ember.graph.workspace import (  # noqa: F401 - re-exported: the executor's public names
    ParamStore,
    Workspace,
    WorkspacePool,
    owned_params,
    plan_memory,
)
from ember.runtime.step_loop import StepFailed
from ember.target import Target


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
    list of floats is float64 and is refused by a float32 input. A string input takes an
    array of ``str`` (``frontend/string_tensors.py``)."""
    if isinstance(dtype, str) and dtype == STRING:  # (a numpy dtype: the hot path, no compare)
        return string_input(name, value)
    try:
        arr = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - a ragged list, an object whose __array__ fails
        raise ArgumentError(f"input '{name}' is not an array: {type(e).__name__}: {e}") from e
    want = dtype if isinstance(dtype, np.dtype) else numpy_dtype(dtype)
    if arr.dtype != want:
        hint = ""
        if not isinstance(value, np.ndarray) and arr.dtype != object:
            hint = f" (convert it first: np.asarray(value, dtype='{want}'))"
        got = type(value).__name__ if arr.dtype == object else str(arr.dtype)
        raise ArgumentError(f"input '{name}' must be {want}, got {got}{hint}")
    return arr


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
    checks (consecutive CPU kernels in one native call: :mod:`ember.graph.step_program`)
    and returns copies of the outputs (arrays of the caller's own). Large inputs and
    outputs are read and written where the caller has them instead, when only native
    kernels touch them (:data:`ember.graph.workspace.MOVABLE_BYTES`); the outputs are
    the caller's own either way.

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
        self._loop = get_backend(target).step_loop()  # kernels in one native call, or None
        self._shared_with: Any = None  # the ParamStore the params came from, if any
        self._pool = WorkspacePool(self._new_workspace)
        self.workspace_bytes = self._pool.first.nbytes  # of each workspace
        self._input_dtypes = [numpy_dtype(t.dtype) for t in self.input_types]

    def _new_workspace(self) -> Workspace:
        return Workspace(self.graph, self.steps, self._params, self._loop)

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
        """Every input as an array of the model's dtype and shape, checked before any runs,
        in the storage its kernels read (a float8 array's bits: ``narrow_dtypes.py``)."""
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
            arrays.append(to_storage(arr, t.dtype))
        return arrays

    def _workspace(self) -> contextlib.AbstractContextManager[Workspace]:
        """A workspace of the caller's own while the block runs (see :class:`WorkspacePool`)."""
        return self._pool.take()

    def _call_steps(self, ws: Workspace, seconds: list[float] | None = None) -> None:
        """Run ``ws``'s program: native runs of kernels and the host steps between them;
        with ``seconds`` (a slot per step, for a profile), add each step's time to its slot."""
        if ws.threads is not None:
            ws.threads.publish()
        k = 0
        try:
            for k, call in ws.program:  # noqa: B007 - k names a failing step
                if seconds is None:
                    call()
                else:
                    timed_call(k, call, seconds)
        except StepFailed as f:
            raise f.error.add_context(f"while running {self.steps[f.step].where}") from None
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
            ws.load(arrays, borrow=True)
            fresh = ws.fresh_outputs()
            self._call_steps(ws)
            return self._outputs(ws, fresh)
        finally:
            self._pool.release(ws)

    __call__ = run

    def _outputs(self, ws: Workspace, fresh: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The caller's outputs: the new arrays the run wrote, else copies of ``ws``'s (an
        output listed twice is two arrays, as onnxruntime gives)."""
        out: list[np.ndarray] = []
        for v in self.output_names:
            if v in fresh:
                given = fresh[v]
                out.append(given if all(a is not given for a in out) else given.copy())
            else:
                out.append(np.array(ws.env[v], copy=True))
        return [from_storage(a, t.dtype) for a, t in zip(out, self.output_types)]

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
