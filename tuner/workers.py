"""Worker processes for measuring: one request at a time over a pipe, with a deadline.

Used by :mod:`ember.tuner.measure`. A :class:`WorkerProcess` is a ``spawn``-started
process running the worker entry point that the package root registers as the global
function ``"tuner.worker"`` (``ember/tune_worker.py``: it builds and runs candidates,
which the tuner itself may not import). A request that overruns its deadline gets the
process killed; a process that dies (a segfault, ``os.abort``) is noticed by the
closed pipe. Either way the next request starts a fresh process, so a bad candidate
never takes the tuner down.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ember.errors import InternalError
from ember.runtime.registry import get_global_func

STARTUP_TIMEOUT_S = 120.0  # importing Ember and LLVM in a fresh process; not a candidate's time
STARTUP_POLL_S = 0.05  # how often a starting worker's wait looks for retire()
# A spawned process normally re-imports the parent's main script, which re-runs a script
# without an ``if __name__ == "__main__"`` guard (and its tuning) in every worker. Workers
# start with a bare ``__main__`` instead, as TVM's popen workers do; so templates must be
# defined in importable modules, not in the script itself.
_MAIN_LOCK = threading.Lock()


@dataclass(frozen=True)
class Reply:
    """``status``: "ok" (``value`` is the worker's answer), "timeout" or "crash"."""

    status: str
    value: Any = None
    seconds: float = 0.0


class WorkerProcess:
    """One isolated worker; restarted on demand after a kill or a crash."""

    def __init__(self, role: str) -> None:
        self.role = role
        self._ctx = multiprocessing.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self.hello: dict[str, Any] = {}
        self.restarts = 0
        self._retired = False  # interrupted: answer at once, start nothing (see retire)
        self._restart_lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def start(self) -> None:
        entry = get_global_func("tuner.worker")
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=entry, args=(child, self.role), daemon=True)
        _spawner().submit(_start, proc).result()
        child.close()
        self._proc, self._conn = proc, parent
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not parent.poll(STARTUP_POLL_S):
            if self._retired:  # Ctrl-C: retire() is waiting for this start to give up
                self.kill()
                return
            if time.monotonic() > deadline:
                self.kill()
                raise InternalError(
                    f"the {self.role} worker did not start in {STARTUP_TIMEOUT_S} s"
                )
        try:
            self.hello = parent.recv()
        except EOFError as e:
            code = proc.exitcode
            self.kill()
            raise InternalError(f"the {self.role} worker died while starting (exit {code})") from e

    def call(self, request: tuple[Any, ...], timeout: float) -> Reply:
        """Send ``request`` and wait up to ``timeout`` seconds for the answer."""
        with self._restart_lock:
            if self._retired:
                return Reply("crash", "the tuner was interrupted")
            if not self.alive:
                self.kill()
                self.start()
            if self._retired:  # retired while it started
                return Reply("crash", "the tuner was interrupted")
            conn = self._conn  # retire() may clear the attribute while this thread waits
        start = time.perf_counter()
        try:
            conn.send(request)
            ready = conn.poll(timeout)
            value = conn.recv() if ready else None
        except (EOFError, OSError):
            code = None
            if self._proc is not None:
                self._proc.join(2)
                code = self._proc.exitcode
            self.kill()
            self.restarts += 1
            return Reply("crash", _exit_text(code), time.perf_counter() - start)
        if not ready:
            self.kill()
            self.restarts += 1
            return Reply("timeout", f"no answer in {timeout:g} s", time.perf_counter() - start)
        return Reply("ok", value, time.perf_counter() - start)

    def kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is not None:  # first: its closed end wakes a thread waiting for its answer
            if proc.is_alive():
                proc.kill()
            proc.join(5)
        if conn is not None:
            conn.close()

    def retire(self) -> None:
        """Kill the worker and answer every call, those waiting now included, at once
        without starting another, until :meth:`revive`. Used on Ctrl-C: a build thread
        that took one more queued candidate would otherwise start a fresh worker and
        wait up to ``build_timeout`` for it, and the interpreter waits for that thread
        before it exits (a CI run once saw Ctrl-C take 60 s). The flag is set before the
        lock is taken: a thread holding the lock while a fresh worker starts (an import of
        Ember and LLVM, seconds on a busy machine) sees it and gives up within
        ``STARTUP_POLL_S`` instead of keeping Ctrl-C waiting for the worker's hello."""
        self._retired = True
        with self._restart_lock:
            self.kill()

    def revive(self) -> None:
        """Allow calls to start a worker again (a new measuring round after Ctrl-C)."""
        self._retired = False

    def close(self) -> None:
        """Ask the worker to exit, then make sure it did."""
        if self.alive:
            try:
                self._conn.send(None)
                self._proc.join(2)
            except OSError:
                pass
        self.kill()


@functools.cache
def _spawner() -> ThreadPoolExecutor:
    """The one long-lived thread that starts every worker. A worker asks Linux to kill it
    when its parent dies (``PR_SET_PDEATHSIG``, ember/tune_worker.py), and Linux means the
    parent *thread*: a worker started from a measuring round's build thread was killed
    when that round ended, and the next round's build found it alive or dying, so a good
    candidate could be recorded as a crash and every round paid for fresh workers."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="ember-worker-start")


def _start(proc: Any) -> None:
    with _MAIN_LOCK, _sigint_blocked():  # no re-run of the user's script (see _MAIN_LOCK)
        saved = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            proc.start()
        finally:
            sys.modules["__main__"] = saved


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Start workers with SIGINT blocked. Ctrl-C signals the terminal's whole process group:
    without this each worker died of its own ``KeyboardInterrupt`` and printed a traceback
    (about 70 lines for three workers) before the tuner's one "interrupted" line. The
    tuner alone handles Ctrl-C and then closes its workers; a blocked mask is inherited
    through fork and exec, and blocking is per thread, so it works in the tuner's build
    threads too, and a Ctrl-C meanwhile reaches the tuner once this block ends."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no process groups to worry about
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "the worker process died"
    if code < 0:
        try:
            return f"the worker process was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"the worker process was killed by signal {-code}"
    return f"the worker process exited with status {code}"
