"""A cold compile on every core: a model's kernels missing from the disk cache are built by
forked processes, which store them there, while the compiling process builds its share.

Lowering and the TIR passes are Python, so threads would take turns on one core under the
GIL; processes do not. The kernels travel through the disk cache (``kernel_cache.py``):
once the children are done, ``ember.compile`` goes through the groups in order as before
and loads each child's kernel from its entry (a warm compile loads ResNet-50's 29 kernels
in under 2 s, where building them takes 14 s), so what runs is exactly what a warm
compile from the cache runs. Nothing else crosses the
fork: a child's kernel that failed to build or to store is simply missing, and the parent
builds it itself, raising its error with the usual context.

``fork`` rather than fresh interpreters: a child starts in microseconds with the graph,
the records in force and the ``PassContext`` already in memory, where spawning one costs
1-2 s of imports and a pickled graph. Forking a process that runs other threads is safe
only for what the child then touches: it builds kernels (Python, LLVM) and writes files,
with the kernel cache's linker thread replaced (:func:`kernel_cache.after_fork_in_child`,
which is idle when the parent forks: :func:`kernel_cache.flush` first); no kernel runs in
a child, so the thread pools of Ember, OpenBLAS or another runtime are never entered
there. It runs only in the main thread, on Linux, with the disk cache on and two or more
kernels missing; ``EMBER_COMPILE_JOBS=N`` caps the processes (1: none forked).

The children take jobs from one pipe of job numbers, a few bytes each (a read of up to
``PIPE_BUF`` bytes is atomic), so a child that draws a slow Winograd kernel does not hold
up the others' share.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence

from ember import config
from ember.backend import Backend
from ember.graph import kernel_cache
from ember.graph.groups import GroupIO
from ember.graph.kernels import get_group_kernel, group_keys
from ember.runtime.threads import available_cpus

JOB_BYTES = 4  # one job number in the pipe, little-endian
MAX_JOBS = 4096 // JOB_BYTES  # PIPE_BUF on Linux: the queue is written whole, at once


def missing(jobs: Sequence[GroupIO], backend: Backend) -> list[GroupIO]:
    """The jobs whose kernel is not on disk, one per entry (repeated layers share one)."""
    todo: dict[str, GroupIO] = {}
    for g in jobs:
        _, disk = group_keys(g.nodes, g.inputs, g.outputs, g.types, backend)
        if disk is not None and disk not in todo and not kernel_cache.present(disk):
            todo[disk] = g
    return list(todo.values())


def processes(count: int) -> int:
    """How many processes build ``count`` kernels: 1 where forking is not an option."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return 1
    if threading.current_thread() is not threading.main_thread():
        return 1
    return max(1, min(count, config.compile_jobs() or available_cpus()))


def prebuild(jobs: Sequence[GroupIO], backend: Backend) -> int:
    """Build the kernels of ``jobs`` missing from the disk cache, in this process and
    forked ones, into the cache; returns the number of processes that took part (1: none
    was forked). Whatever is still missing afterwards the caller builds as it goes."""
    if not kernel_cache.enabled(backend):
        return 1
    todo = missing(jobs, backend)[:MAX_JOBS]  # any others: built as the compile goes
    n = processes(len(todo))
    if n < 2:
        return 1
    kernel_cache.flush()  # the linker thread idle, so no child inherits a half-held lock
    try:
        read, write = os.pipe()
    except OSError:  # out of file descriptors: one process, as the compile goes
        return 1
    try:  # at most PIPE_BUF bytes: written whole at once, before any child reads
        os.write(write, b"".join(k.to_bytes(JOB_BYTES, "little") for k in range(len(todo))))
    finally:
        os.close(write)  # the queue is complete: a read past it finds the end
    children: list[int] = []
    try:
        for _ in range(n - 1):
            with warnings.catch_warnings():  # Python 3.12's note on forking with threads
                warnings.simplefilter("ignore", DeprecationWarning)
                try:
                    pid = os.fork()
                except OSError:  # a process limit: the ones started share the queue
                    break
            if pid == 0:
                _child(read, todo, backend)  # never returns
            children.append(pid)
        _build(read, todo, backend)
    except BaseException:  # an interrupt: the children's work is not wanted any more
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        raise
    finally:
        os.close(read)
        for pid in children:
            with contextlib.suppress(ChildProcessError):  # reaped already (SIGCHLD ignored)
                os.waitpid(pid, 0)
    return 1 + len(children)


def _build(read: int, todo: Sequence[GroupIO], backend: Backend) -> bool:
    """Build the jobs taken from the pipe until it is empty; whether all of them built (a
    kernel that fails is built again by the caller's compile, which reports the error
    with the node it comes from)."""
    ok = True
    while len(data := os.read(read, JOB_BYTES)) == JOB_BYTES:
        g = todo[int.from_bytes(data, "little")]
        try:
            get_group_kernel(g.nodes, g.inputs, g.outputs, g.types, backend)
        except Exception:  # noqa: BLE001 - reported when the compile builds it again
            ok = False
    return ok


def _child(read: int, todo: Sequence[GroupIO], backend: Backend) -> None:
    """A forked builder: take jobs until none is left, store each kernel, exit without
    running the parent's exit handlers or unwinding into its stack."""
    code = 1
    try:
        kernel_cache.after_fork_in_child()
        ok = _build(read, todo, backend)
        kernel_cache.flush()
        code = 0 if ok else 1
    except BaseException:  # noqa: BLE001, S110 - a child must end here, whatever happened
        pass
    finally:
        os._exit(code)
