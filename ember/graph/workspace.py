"""A compiled model's memory: the static plan, the workspaces of its runs, shared params.

The executor (:mod:`ember.graph.executor`) hands over the graph and its steps (a kernel
and the values it reads and writes) and gets back the memory a run works in. The plan
(:mod:`ember.graph.memory_plan`) gives every intermediate value a view into a few
reusable byte buffers, and places a concat's operands in its result so that the concat
copies nothing (its step is left out of the run). Inputs and outputs get buffers of the
model's own too, so the arrays of every step are fixed when the memory is made: each
kernel checks its arrays once then (shape, dtype, contiguity, alignment, overlap) and is
later called without the per-call checks, which cost more than a small kernel runs.

That memory, with the kernels bound to it, is a :class:`Workspace` (whose bound kernels
run in native runs of the step loop, :mod:`ember.graph.step_program`), and a run owns one
for its duration: a :class:`WorkspacePool` hands an idle one to each run and makes
another when all are busy, so runs on several threads never share a buffer and still
run in parallel (native kernel calls release the GIL). A lock around ``run`` would be
simpler but would serialise the threads; onnxruntime's sessions too give each concurrent
run its own intermediate buffers. The params are read-only to kernels and kept once per
model, shared by its workspaces (and, through a :class:`ParamStore`, by the sizes of a
DynamicModel).

A large input or output is not copied (:data:`MOVABLE_BYTES`): when every step that
touches it is a kernel of a native run, the run points those kernels' table entries at
the caller's input array (C-contiguous and aligned, as most are) and at a new output
array that it hands to the caller as is (its memory reused once the caller drops it:
:mod:`ember.runtime.recycled`). A decode step with a KV cache reads and writes
tens of megabytes of past keys and values, which the copies in and out tripled. The
workspace keeps its own buffers for everything else (the Python path, a profile).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ember.errors import EmberError, InternalError
from ember.frontend.graph import Graph
from ember.frontend.narrow_dtypes import storage_dtype, to_storage
from ember.frontend.string_tensors import STRING_NUMPY, content_key
from ember.graph.index_guard import GuardedCall, guard_index_reads
from ember.graph.memory_plan import absorbed_concats, aliased_reshapes, plan_memory
from ember.graph.step import Step, empty_kernel
from ember.graph.step_program import Program, link_steps
from ember.runtime.aligned import aligned_array, aligned_copy, data_address
from ember.runtime.recycled import Recycler
from ember.runtime.step_loop import NativeRun, StepLoop, ThreadCounts

# Inputs and outputs this large are read and written where the caller has them when they
# can be (see the module notes): below it a copy costs less than repointing the kernels.
MOVABLE_BYTES = 1 << 16

Slots = list[tuple["ctypes.Array[ctypes.c_uint64]", int]]


def owned_params(graph: Graph) -> dict[str, np.ndarray]:
    """The graph's constants as kernels read them: C-contiguous, each on a cache line, a
    narrow type (float8, int4...) in its storage (``frontend/narrow_dtypes.py``); a string
    constant (only ever a graph output: ``frontend/string_tensors.py``) as it is."""
    return {
        n: p if p.dtype == STRING_NUMPY else aligned_copy(to_storage(p, str(p.dtype)))
        for n, p in graph.params.items()
    }


class Workspace:
    """The memory of one run: the planned intermediates and a buffer of the model's own for
    each input and each output, with every step's kernel bound to them.

    The params are not part of it: kernels only read them, so every workspace of a model
    shares one copy. Each array starts on a cache line.
    """

    def __init__(
        self,
        graph: Graph,
        steps: Sequence[Step],
        params: dict[str, np.ndarray],
        loop: StepLoop | None = None,
    ):
        slabs, absorbed = absorbed_concats(graph, steps)
        aliases = aliased_reshapes(graph, steps, slabs)
        views, self.nbytes = plan_memory(graph, steps, slabs, aliases)
        env: dict[str, np.ndarray] = {**params, **views}
        for v in graph.inputs:  # always this run's own: a run writes them
            env[v.name] = aligned_array(v.type.shape, storage_dtype(v.type.dtype))
        for out, src in aliases.values():  # a reshaped input: a view of the input's buffer
            env.setdefault(out, env[src].reshape(graph.values[out].type.dims))
        for v in graph.outputs:
            if v.name not in env:  # else an input or a param, copied out
                env[v.name] = aligned_array(v.type.shape, storage_dtype(v.type.dtype))
        self.env = env
        self.inputs = [env[n] for n in graph.input_names]
        # indices out of range are refused before a kernel would read a clamped row
        empty = absorbed | set(aliases)
        bound = [
            functools.partial(empty_kernel) if k in empty else _bind_step(st, env)
            for k, st in enumerate(steps)
        ]  # an absorbed concat's operands and a reshape's view are in place (memory_plan.py)
        self.calls = guard_index_reads(graph, steps, env, bound)
        self._loop = loop
        self._graph, self._steps, self._aliases = graph, steps, aliases
        self._recycler = Recycler()  # the outputs handed out, their memory back once dropped
        self.link()

    def link(self) -> None:
        """Make :attr:`program` from :attr:`calls`: the steps a run calls, runs of CPU
        kernels as one native call each (:mod:`ember.graph.step_program`); again after
        replacing a call."""
        self.program: Program
        self.threads: ThreadCounts | None
        self.program, self.threads = link_steps(self.calls, self._loop)
        g, steps, env, aliases = self._graph, self._steps, self.env, self._aliases
        self._in_slots = _movable(g, steps, g.input_names, env, self.calls, self.program, aliases)
        self._out_slots = _movable(g, steps, g.output_names, env, self.calls, self.program, aliases)
        # every slot with its own buffer's address, for own_memory (the buffers never move)
        self._own = [
            (table, position, env[name].ctypes.data)
            for slots in (self._in_slots, self._out_slots)
            for name, slot_list in slots.items()
            for table, position in slot_list
        ]

    def load(self, arrays: Sequence[np.ndarray], borrow: bool = False) -> None:
        """Copy checked input arrays into this workspace's input buffers; with ``borrow``,
        the program reads a large C-contiguous one where it is instead (see the module
        notes), until the next load. The calls of :attr:`calls` always read the copies."""
        for name, buf, arr in zip(self._graph.input_names, self.inputs, arrays):
            slots = self._in_slots.get(name)
            if slots and borrow and arr.flags.c_contiguous and arr.flags.aligned:
                _point(slots, data_address(arr))
                continue
            if slots:
                _point(slots, data_address(buf))
            np.copyto(buf, arr)

    def fresh_outputs(self) -> dict[str, np.ndarray]:
        """A new array for each large output that the program then writes in place of this
        workspace's buffer, to be handed to the caller without a copy."""
        out = {}
        for name, slots in self._out_slots.items():
            buf = self.env[name]
            out[name], address = self._recycler.array(buf.shape, buf.dtype)
            _point(slots, address)
        return out

    def own_memory(self) -> None:
        """Point every kernel back at this workspace's own buffers. After a run the tables
        name the caller's input arrays and the outputs handed out, memory this workspace
        does not own: the caller may free an input, and a dropped output's block is freed
        once the recycler keeps enough. An idle workspace names none of it, so a program
        run without :meth:`load` and :meth:`fresh_outputs` first reads and writes its own
        buffers, never freed memory."""
        for table, position, address in self._own:
            table[position] = address


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
        ws.own_memory()
        with self._lock:
            self._idle.append(ws)

    @contextlib.contextmanager
    def take(self) -> Iterator[Workspace]:
        ws = self.acquire()
        try:
            yield ws
        finally:
            self.release(ws)


def _movable(
    graph: Graph,
    steps: Sequence[Step],
    names: Sequence[str],
    env: dict[str, np.ndarray],
    calls: Sequence[Callable[[], None]],
    program: Program,
    aliases: dict[int, tuple[str, str]],
) -> dict[str, Slots]:
    """The table slots of each of ``names`` (inputs or outputs) that a run may repoint: one
    of :data:`MOVABLE_BYTES` or more, neither a param nor both an input and an output,
    every step touching it (or a reshape's view of it, ``aliases``) a kernel of a native run,
    none checking it from Python."""
    runs = {k: run for _, run in program if isinstance(run, NativeRun) for k in run.steps}
    fixed = set(graph.params) | (set(graph.input_names) & set(graph.output_names))
    checked = {id(a) for c in calls if isinstance(c, GuardedCall) for a, _ in c.checks}
    found: dict[str, Slots] = {}
    for name in dict.fromkeys(names):
        arr = env[name]
        named = {name} | {out for out, src in aliases.values() if src == name}
        if name in fixed or arr.nbytes < MOVABLE_BYTES or checked & {id(env[v]) for v in named}:
            continue
        users = [
            k
            for k, st in enumerate(steps)
            if k not in aliases and named & {*st.inputs, *st.outputs}
        ]  # the steps touching it or a reshaped view of it (at its address)
        slots: Slots = []
        for k in users:
            run = runs.get(k)
            here = run.pointer_slots(k, arr.ctypes.data) if run is not None else []
            if not here:
                break
            slots += here
        else:
            if users:
                found[name] = slots
    return found


def _point(slots: Slots, address: int) -> None:
    for table, position in slots:
        table[position] = address


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
        if array.dtype == STRING_NUMPY:  # no kernel reads it: shared by content, not bytes
            key = (array.dtype.str, array.shape, content_key(array))
            with self._lock:
                return self._arrays.setdefault(key, array)
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
