"""Which process is measuring which trial: owner names and heartbeats.

Several processes (on one host or many, sharing a study's database) may tune one study.
The search loop (:mod:`ember.tuner.search`) writes :data:`OWNER` on every trial it asks
for; when it takes in the study's trials it asks :func:`abandoned` whether the process
that owns a RUNNING trial is gone, and on storages that keep heartbeats a
:class:`Heartbeat` beats for the trials this process is measuring, so that those of a
worker killed on another host are failed and retried once the grace period ends.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

_log = logging.getLogger("ember.tuner")
OWNER = f"{socket.gethostname()}:{os.getpid()}"  # who runs a trial, for resume


def abandoned(owner: Any) -> bool:
    """Whether the process that asked for a trial is gone (unknown owners count as gone;
    an owner on another host cannot be checked and does not)."""
    if not isinstance(owner, str) or ":" not in owner:
        return True
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Heartbeat:
    """Records a heartbeat for every trial this process is measuring, on storages that
    keep them (``RDBStorage(heartbeat_interval=...)``), so that a worker killed on any
    host leaves trials that the other workers fail and retry once the grace period ends.
    Optuna beats only inside ``study.optimize``; the search asks and tells itself."""

    def __init__(self, storage: Any, interval: float) -> None:
        self.storage, self.interval = storage, interval
        self.trial_ids: set[int] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        threading.Thread(target=self._beat, name="ember-heartbeat", daemon=True).start()

    @classmethod
    def start(cls, study: Any) -> Heartbeat | None:
        # optional dependency: optuna
        from optuna.storages._heartbeat import is_heartbeat_enabled

        storage = getattr(study, "_storage", None)
        if storage is None or not is_heartbeat_enabled(storage):
            return None
        return cls(storage, float(storage.get_heartbeat_interval()))

    def watch(self, trial: Any) -> None:
        with self.lock:
            self.trial_ids.add(trial._trial_id)
        self.storage.record_heartbeat(trial._trial_id)

    def forget(self, trial: Any) -> None:
        with self.lock:
            self.trial_ids.discard(trial._trial_id)

    def stop(self) -> None:
        self.stopped.set()

    def _beat(self) -> None:
        while not self.stopped.wait(self.interval):
            with self.lock:
                ids = list(self.trial_ids)
            for trial_id in ids:
                try:
                    self.storage.record_heartbeat(trial_id)
                except Exception:  # the trial finished meanwhile, or the database blinked
                    _log.debug("heartbeat for trial %s failed", trial_id, exc_info=True)
