"""A workspace's steps as a short program: runs of native kernel calls between host steps.

A :class:`~ember.graph.workspace.Workspace` binds each step to its arrays (``calls``,
one per step). Called one by one from Python, each costs a ctypes transition and its
status check, 0.3-0.5 us: as much as a small kernel runs, so a model of many small
kernels (an LSTM unrolled over time, a chain of 1x1 convolutions) spent most of its
time between kernels. :func:`link_steps` turns the calls into a program where each
maximal run of consecutive CPU kernel calls is one :class:`~ember.runtime.step_loop.
NativeRun` (one call of the backend's compiled step loop walking a table made here,
once), and everything else stays a Python call between them: host steps (If, Loop,
Scan over compiled subgraphs), GPU kernels, a kernel with 0-d outputs, one with more
arguments than the loop takes, and the index checks of a gather (run from Python just
before its kernel, which itself stays in the run that follows). Steps whose outputs
are empty (``empty_kernel``) are left out.

The program is ``[(step index, call), ...]``: a Python call raises an EmberError of
step ``k``; a native run raises :class:`~ember.runtime.step_loop.StepFailed` naming
the step whose kernel failed. Without a loop (a backend without one) every call stays
as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from ember.graph.index_guard import GuardedCall
from ember.graph.step import empty_kernel
from ember.runtime.module import BoundCall
from ember.runtime.step_loop import NativeRun, StepLoop, ThreadCounts, loop_kernel

Program = list[tuple[int, Callable[[], None]]]


def _is_empty(call: Callable[[], None]) -> bool:
    return isinstance(call, functools.partial) and call.func is empty_kernel


def _split(
    call: Callable[[], None], loop: StepLoop
) -> tuple[Callable[[], None] | None, BoundCall | None]:
    """What of ``call`` runs in Python first (or None), and its kernel for the loop (or None)."""
    if isinstance(call, GuardedCall):
        native = loop_kernel(call.call, loop)
        return (call.check, native) if native is not None else (call, None)
    native = loop_kernel(call, loop)
    return (None, native) if native is not None else (call, None)


def link_steps(
    calls: Sequence[Callable[[], None]], loop: StepLoop | None
) -> tuple[Program, ThreadCounts | None]:
    """The program of ``calls`` (see the module notes) and the thread counts its native
    runs read, which the caller publishes before each run."""
    if loop is None:
        return [(k, c) for k, c in enumerate(calls) if not _is_empty(c)], None
    parts = [(k, *_split(c, loop)) for k, c in enumerate(calls) if not _is_empty(c)]
    threads = ThreadCounts([n for _, _, n in parts if n is not None])
    program: Program = []
    pending: list[tuple[int, BoundCall]] = []

    def flush() -> None:
        if pending:
            steps, natives = zip(*pending)
            program.append((steps[0], NativeRun(loop, natives, steps, threads)))
            pending.clear()

    for k, host, native in parts:
        if host is not None:
            flush()
            program.append((k, host))
        if native is not None:
            pending.append((k, native))
    flush()
    return program, threads
