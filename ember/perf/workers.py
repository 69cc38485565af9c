"""A runtime in a process of its own: :class:`WorkerRunner` has a runner's methods and
forwards each call to a spawned process that owns the real runner
(:mod:`ember.perf.runners`).

Why a process per runtime: two thread pools in one process are not independent; with
onnxruntime's spinning pool in the same process Ember ran 3-20x slower on a two-core
machine (issue 25). In its own process each
runtime keeps its allocator, its pool and its caches to itself, as it would for a user;
only one of the two processes runs at a time (the timing loop asks them by turns), and
the idle one's threads have gone to sleep by the time the other starts.

The processes are started with ``spawn``, not ``fork``: libgomp's pool does not survive a
fork (see :mod:`ember.runtime.threads`), and a fresh interpreter carries no state over.
They ignore Ctrl-C, which the parent handles; a worker that dies or hangs is reported
as an :class:`~ember.errors.InternalError` naming the runtime and the call.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
from multiprocessing.connection import Connection
from typing import Any

from ember.errors import EmberError, InternalError
from ember.perf.runners import EmberSettings, Loaded, make_runner

CALL_TIMEOUT_S = 1800.0  # a cold ResNet-50 compile on a loaded machine stays well inside


def _serve(conn: Connection, name: str, settings: EmberSettings | None) -> None:
    """The worker's loop: run each ``(method, args)`` the parent sends on the runner, send
    back ``("ok", value)`` or ``("error", exception)``, until ``("stop", ())``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    runner = make_runner(name, settings)
    while True:
        try:
            method, args = conn.recv()
        except EOFError:  # the parent went away without a word: nothing left to serve
            break
        if method == "stop":
            break
        try:
            conn.send(("ok", getattr(runner, method)(*args)))
        except Exception as e:  # every failure goes back to the parent, which raises it
            conn.send(("error", _portable(e)))
    conn.close()


def _portable(e: Exception) -> Exception:
    """``e`` itself when it survives pickling, else an InternalError with its text."""
    try:
        pickle.loads(pickle.dumps(e))
    except Exception:
        return InternalError(f"{type(e).__name__}: {e}")
    return e


class WorkerRunner:
    """A runner (``"ember"`` or ``"onnxruntime"``) living in a spawned process."""

    def __init__(self, name: str, settings: EmberSettings | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.name = name
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_serve, args=(child, name, settings), daemon=True, name=f"bench-{name}"
        )
        self._proc.start()
        child.close()

    def _call(self, method: str, *args: Any) -> Any:
        try:
            self._conn.send((method, args))
            if not self._conn.poll(CALL_TIMEOUT_S):
                self._proc.terminate()
                raise InternalError(
                    f"the {self.name} worker process gave no answer to {method!r} within "
                    f"{CALL_TIMEOUT_S:.0f} s; it was stopped"
                )
            status, value = self._conn.recv()
        except (EOFError, OSError) as e:
            self._proc.join(1.0)
            raise InternalError(
                f"the {self.name} worker process died (exit code {self._proc.exitcode}) "
                f"during {method!r}"
            ) from e
        if status == "error":
            if isinstance(value, EmberError):
                value.add_context(f"in the {self.name} worker process")
            raise value
        return value

    def load(self, key: str, model: bytes, inputs: dict[str, Any]) -> Loaded:
        """The owned runner's ``load``, in its process."""
        return self._call("load", key, model, inputs)  # type: ignore[no-any-return]

    def time(
        self, key: str, threads: int, number: int, repeat: int, clock: str
    ) -> tuple[float, int]:
        """The owned runner's ``time``, in its process."""
        return self._call("time", key, threads, number, repeat, clock)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the process (politely, then for sure)."""
        if self._proc.is_alive():
            try:
                self._conn.send(("stop", ()))
            except OSError:
                pass
            self._proc.join(5.0)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(1.0)
        self._conn.close()
