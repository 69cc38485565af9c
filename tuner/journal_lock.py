"""A journal-file lock that names its owner, so a run killed while it held the lock does
not stall the next one.

``tune``'s default Optuna storage is a journal file beside the records
(:func:`ember.tuner.tune.open_storage`). Optuna's own file lock is a bare symlink: after a
run is SIGKILLed inside a write, the next run (``--resume``) cannot tell a dead holder
from a slow one and waits out a 30 s grace period. This lock is the same path
(``<journal>.lock``, so it also excludes a runner using Optuna's lock) holding
``host:pid``; a holder on this host whose process is gone is removed at once. A holder
that cannot be checked (another host, Optuna's symlink, a file still being written) keeps
Optuna's rule: released after the lock has not changed for ``grace_period`` seconds.
Imported only where Optuna is.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

from optuna.storages.journal import JournalFileOpenLock

POLL_S = 0.002


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _dead(owner: str) -> bool:
    """Whether ``owner`` (``host:pid``) is a process of this host that no longer exists."""
    host, _, pid = owner.strip().rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, under another user
        return False
    return False


class OwnedJournalLock(JournalFileOpenLock):
    """Optuna's ``O_EXCL`` file lock for ``filepath``'s journal, with its holder written in
    it (see the module notes). A subclass of the public ``JournalFileOpenLock``: Optuna
    exports no base class for locks."""

    def __init__(self, filepath: str, grace_period: float = 30.0) -> None:
        self._lock_file = filepath + ".lock"
        self.grace_period = grace_period
        self._me = _owner()

    def acquire(self) -> bool:
        seen: tuple[str, float] | None = None  # (holder, lock mtime) when first seen
        since = time.monotonic()
        while True:
            try:
                fd = os.open(self._lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder, mtime = self._holder()
                if holder and _dead(holder):
                    self._remove_stale(holder)
                    continue
                if seen != (holder, mtime):  # the lock changed hands or was touched
                    seen, since = (holder, mtime), time.monotonic()
                elif time.monotonic() - since > self.grace_period:
                    self._remove_stale(holder)
                    continue
                time.sleep(POLL_S)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(self._me)
            return True

    def release(self) -> None:
        holder, _ = self._holder()
        if holder != self._me:
            raise RuntimeError(f"journal lock {self._lock_file} is not held by this process")
        self._remove_stale(holder)

    def _holder(self) -> tuple[str, float]:
        """The lock's ``host:pid`` ("" for Optuna's symlink or a file being written) and
        its mtime (0.0 when it just went away)."""
        try:
            mtime = os.lstat(self._lock_file).st_mtime
            if os.path.islink(self._lock_file):
                return "", mtime
            with open(self._lock_file, encoding="utf-8", errors="replace") as f:
                return f.read().strip(), mtime
        except OSError:
            return "", 0.0

    def _remove_stale(self, holder: str) -> None:
        """Remove the lock if it still names ``holder``: renamed aside first, so of two
        processes removing one dead holder's lock, the second cannot remove the lock the
        first has just taken; a lock that turns out to be another's is put back."""
        aside = f"{self._lock_file}.{uuid.uuid4().hex}.stale"
        try:
            os.rename(self._lock_file, aside)
        except OSError:
            return  # gone already
        taken, _ = self._read(aside)
        if taken == holder:
            os.unlink(aside)
            return
        try:
            os.link(aside, self._lock_file)  # someone else's live lock: restore it
        except OSError:
            pass
        os.unlink(aside)

    @staticmethod
    def _read(path: str) -> tuple[str, float]:
        try:
            if os.path.islink(path):
                return "", os.lstat(path).st_mtime
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read().strip(), 0.0
        except OSError:
            return "", 0.0
