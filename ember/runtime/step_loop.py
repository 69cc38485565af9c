"""Bound CPU kernels called one after another by one native call: the step loop's tables.

A compiled model calls its kernels in a fixed order on fixed arrays (its workspace).
Called from Python, each call costs a ctypes transition and the status check, about
0.3-0.5 us, more than a small elementwise kernel runs. The *step loop* is a native
function (JIT-compiled once per process by the CPU backend,
:mod:`ember.codegen_llvm.step_loop`) that walks a table of ``{function, argument
count, arguments, thread-count cell, thread class}`` entries and calls each, stopping
at the first nonzero status. This module holds what the loop reads, in ctypes: the
entries of a run of consecutive steps (:class:`NativeRun`, made once per workspace,
since the arrays never move) and the thread counts a run publishes
(:class:`ThreadCounts`).

The loop's C view, with every field 64 bits wide::

    struct Entry { void *fn; int64 nargs; uint64 *args; int32 *cell; int64 cls; };
    struct Job   { Entry *table; int64 count; int32 *threads; int64 status;
                   int64 *stamps; };
    int64 ember_run_steps(Job *job);   /* count, or the index of the entry that failed,
                                          its status in job->status */

``stamps`` is null in a run. A profile (:meth:`NativeRun.timed`) points it at
``count + 1`` slots: the loop writes the monotonic clock's nanoseconds before the first
call and after each one.

A kernel is ``int32 f(void *, ..., int64, ...)`` (:func:`ember.runtime.cpu.native_prototype`)
and the loop calls it as ``int32 f(uint64, ...)``: every argument is one 64-bit integer
register or stack slot, as a pointer is, on the 64-bit ABIs LLVM targets here. Before a
call the loop stores into the kernel's module's ``__ember_num_threads`` cell the thread
count of its class (what :meth:`ember.runtime.cpu.CPUModule._before_call` stores when
Python calls it), so ``set_num_threads`` keeps working between runs.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ember.errors import EmberError, InternalError
from ember.runtime.cpu import CPUModule
from ember.runtime.module import BoundCall
from ember.runtime.threads import effective_num_threads, note_parallel_launch, parallel_launcher

_MASK = (1 << 64) - 1
BAD_ARITY = -3  # the loop met an entry with more arguments than it was compiled for


class Entry(ctypes.Structure):
    """One kernel call of a table (see the module notes)."""

    _fields_ = [
        ("fn", ctypes.c_void_p),
        ("nargs", ctypes.c_int64),
        ("args", ctypes.c_void_p),
        ("cell", ctypes.c_void_p),
        ("cls", ctypes.c_int64),
    ]


class Job(ctypes.Structure):
    """What one call of the loop runs: a table, its length, the thread counts, the status."""

    _fields_ = [
        ("table", ctypes.c_void_p),
        ("count", ctypes.c_int64),
        ("threads", ctypes.c_void_p),
        ("status", ctypes.c_int64),
        ("stamps", ctypes.c_void_p),
    ]


LOOP_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)


@dataclass(frozen=True)
class StepLoop:
    """The compiled loop: ``function(address of a Job) -> int``; calls of more than
    ``max_args`` arguments stay on the Python path. ``owner`` keeps its code alive;
    ``stamps``: the loop writes a job's stamps (its platform has the clock)."""

    function: Callable[[int], int]
    max_args: int
    owner: Any = field(repr=False, default=None)
    stamps: bool = False


def loop_kernel(call: Any, loop: StepLoop) -> BoundCall | None:
    """``call`` if the loop can run it: a bound call of a CPU module's function whose
    arguments fit; else None (a host step, a GPU kernel, a Python callable)."""
    if type(call) is not BoundCall or not isinstance(call.function.module, CPUModule):
        return None
    if len(call.pointers) > loop.max_args:
        return None
    if call.function.module.entry_address(call.function.name) is None:
        return None
    return call


class ThreadCounts:
    """The thread count of each class of module (its ``fixed_threads``: None for the
    process-wide count) in an array the loop reads; :meth:`publish` before each run."""

    def __init__(self, calls: Sequence[BoundCall]) -> None:
        modules = [c.function.module for c in calls]
        parallel = [m for m in modules if isinstance(m, CPUModule) and m.threads_cell_address()]
        self._modules = list({id(m): m for m in parallel}.values())
        self._fixed = list(dict.fromkeys(m.fixed_threads for m in parallel))
        self.array = (ctypes.c_int32 * max(len(self._fixed), 1))()
        self.address = ctypes.addressof(self.array)
        self._pointed: int | None = None  # the launcher the modules were last pointed at

    def class_of(self, module: CPUModule) -> int:
        """The class index of ``module``'s thread count."""
        return self._fixed.index(module.fixed_threads)

    def publish(self) -> None:
        """Store this moment's counts (``set_num_threads``, a fork) for the loop to hand on."""
        if not self._fixed:
            return
        top = 1
        for k, fixed in enumerate(self._fixed):
            n = effective_num_threads(fixed)
            self.array[k] = n
            top = max(top, n)
        note_parallel_launch(top)
        # The loop calls the kernels directly: point them at the thread pool, once per
        # launcher (a module's own calls point it at the same one). Done on every run, the
        # loop over a model's modules took 30 us of MobileNetV2's run, its caches cold.
        if top > 1 and self._pointed != (launcher := parallel_launcher()):
            for module in self._modules:
                module.point_launch()
            self._pointed = launcher


class StepFailed(Exception):
    """A kernel of a native run returned a failure status: ``step`` is its step index and
    ``error`` the EmberError its module gives that status (the executor adds the step's
    name). Never leaves the executor."""

    def __init__(self, step: int, error: EmberError) -> None:
        super().__init__(step, error)
        self.step = step
        self.error = error


class NativeRun:
    """Consecutive bound kernel calls (of steps ``steps``) run by one call of ``loop``.

    The tables are this object's own and the calls' pointers fixed (a workspace's arrays
    never move), so it is made once per workspace and used by one run at a time."""

    def __init__(
        self,
        loop: StepLoop,
        calls: Sequence[BoundCall],
        steps: Sequence[int],
        threads: ThreadCounts,
    ) -> None:
        if not calls or len(calls) != len(steps):
            raise InternalError("a native run needs one step index per call, and some calls")
        self.calls = tuple(calls)  # keep the arrays behind the pointers alive
        self.steps = tuple(steps)
        self._threads = threads  # the array the job points at
        self._function = loop.function
        self._loop = loop
        self._args = []
        self._table = (Entry * len(calls))()
        for entry, call in zip(self._table, calls):
            module = call.function.module
            if not isinstance(module, CPUModule) or loop_kernel(call, loop) is None:
                raise InternalError(f"the step loop cannot call {call.function.name}")
            args = (ctypes.c_uint64 * max(len(call.pointers), 1))(
                *[int(p) & _MASK for p in call.pointers]
            )
            self._args.append(args)
            entry.fn = module.entry_address(call.function.name)
            entry.nargs = len(call.pointers)
            entry.args = ctypes.addressof(args)
            entry.cell = module.threads_cell_address()
            entry.cls = threads.class_of(module) if entry.cell else 0
        self._job = Job(ctypes.addressof(self._table), len(calls), threads.address, 0, None)
        self._stamps: ctypes.Array[ctypes.c_int64] | None = None  # made by a first profile
        self._job_address = ctypes.addressof(self._job)
        self._count = len(calls)

    def __len__(self) -> int:
        return len(self.calls)

    def pointer_slots(self, step: int, address: int) -> list[tuple[ctypes.Array[Any], int]]:
        """Where step ``step``'s entry passes the array at ``address`` (its argument table
        and positions), so that a workspace can point the kernel at another array of the
        same shape: ``table[position] = new_address``."""
        i = self.steps.index(step)
        args = self._args[i]
        return [(args, j) for j, a in enumerate(self.calls[i].arrays) if a.ctypes.data == address]

    def __call__(self) -> None:
        k = self._function(self._job_address)
        if k != self._count:
            raise StepFailed(self.steps[k], self._error(k, int(self._job.status)))

    @property
    def timeable(self) -> bool:
        """Whether :meth:`timed` can time this run's kernels."""
        return self._loop.stamps

    @contextlib.contextmanager
    def stamped(self) -> Iterator[ctypes.Array[ctypes.c_int64]]:
        """While the block runs, every call of this run writes its stamps (the clock before
        the first kernel and after each) into the array given; the loop is handed back
        its null pointer after, so it never writes into a freed array."""
        if not self.timeable:
            raise InternalError("this step loop was compiled without a clock")
        if self._stamps is None:
            self._stamps = (ctypes.c_int64 * (self._count + 1))()
        self._job.stamps = ctypes.addressof(self._stamps)
        try:
            yield self._stamps
        finally:
            self._job.stamps = None

    def timed(self) -> list[float]:
        """Run as a call does, and return each kernel's seconds, read by the loop between
        consecutive calls (see the module notes)."""
        with self.stamped() as t:
            self()
        return [(t[k + 1] - t[k]) * 1e-9 for k in range(self._count)]

    def _error(self, k: int, status: int) -> EmberError:
        if status == BAD_ARITY:
            return InternalError(f"the step loop cannot call {self.calls[k].function.name}")
        fn = self.calls[k].function
        return fn.module.status_error(fn.signature, status)

    def __repr__(self) -> str:
        return f"<native run of steps {self.steps[0]}..{self.steps[-1]} ({len(self)} kernels)>"


__all__ = ["NativeRun", "StepFailed", "StepLoop", "ThreadCounts", "loop_kernel"]
