"""``apply_history_best``: build schedules with the best recorded config of each task.

Sits on top of the records (:mod:`ember.tuner.records`) and under every caller of a
template: inside ``with apply_history_best("tune.jsonl"):``, ``Task.instantiate()``
without a config and a template called directly (``matmul_llvm(64, 64, 64)``) use the
fastest valid record of their task, falling back to the template's defaults where
there is none. Blocks nest; the innermost with a record for the task wins.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ember.errors import ConfigError
from ember.target import Target
from ember.tuner.records import Record, best_records, host_device_name, read_records
from ember.tuner.space import ConfigEntity
from ember.tuner.template import DIRECT_CALL_RESOLVERS, lookup_template

_LOCAL = threading.local()


class HistoryBest:
    """The best record per task key, read once; configs are rebuilt per task on demand."""

    def __init__(self, records: Iterable[Record], device: str | None) -> None:
        records = list(records)
        self.best = best_records(records, device)
        self.by_workload: dict[tuple[str, str], Record] = {}
        self._configs: dict[str, ConfigEntity] = {}  # task key -> config, for direct calls
        for rec in self.best.values():
            key = (rec.workload_key, Target.parse(rec.target).kind)
            old = self.by_workload.get(key)
            if old is None or rec.cost < old.cost:
                self.by_workload[key] = rec
        # names the configs this block hands out, for caches of what was built with them: a
        # digest, not hash(), whose per-process salt on strings would make the disk kernel
        # cache miss in every new process
        chosen = sorted((k, r.config) for k, r in self.best.items())
        self.fingerprint = hashlib.sha256(
            json.dumps(chosen, sort_keys=True, default=repr).encode()
        ).hexdigest()

    def config_for_task(self, task: Any) -> ConfigEntity | None:
        rec = self.best.get(task.key)
        if rec is None:
            return None
        try:
            return ConfigEntity.from_json(rec.config, task.config_space)
        except ConfigError as e:
            e.add_context(f"while applying the best record of task '{task.name}'")
            raise

    def config_for_call(self, name: str, args: tuple[Any, ...]) -> ConfigEntity | None:
        from ember.tuner.task import create_task, workload_key

        kind = name.rpartition(".")[2]
        rec = self.by_workload.get((workload_key(name, args), kind))
        if rec is None:
            return None
        if rec.task_key not in self._configs:  # collect the space once per task
            cfg = self.config_for_task(create_task(name, args, rec.target))
            if cfg is None:
                return None
            self._configs[rec.task_key] = cfg
        return self._configs[rec.task_key]


def _stack() -> list[HistoryBest]:
    if not hasattr(_LOCAL, "stack"):
        _LOCAL.stack = []
    return _LOCAL.stack  # type: ignore[no-any-return]


def active_fingerprint() -> tuple[str, ...]:
    """What the enclosing ``apply_history_best`` blocks choose, as a cache-key part: a
    kernel built inside a block may differ from one built outside it or in another."""
    return tuple(h.fingerprint for h in _stack() if h.best)


def best_config_for(task: Any) -> ConfigEntity | None:
    """The config ``Task.instantiate()`` uses without one: the innermost block's record."""
    for history in reversed(_stack()):
        cfg = history.config_for_task(task)
        if cfg is not None:
            return cfg
    return None


def _direct_call(name: str, args: tuple[Any, ...]) -> ConfigEntity | None:
    for history in reversed(_stack()):
        cfg = history.config_for_call(name, args)
        if cfg is not None:
            return cfg
    return None


@contextmanager
def apply_history_best(
    records: str | Path | Iterable[str | Path],
    target: str | Target | None = None,
    device: str | None = "host",
) -> Iterator[HistoryBest]:
    """Use the best valid record of each task in the block.

    ``target``: only records for this exact target (default: any). ``device``: only
    records measured on this device; ``"host"`` (default) means this machine's CPU for
    CPU records, None any device. Records of older template versions are skipped.
    """
    recs = read_records(records, target, versions=_current_version)
    if device == "host":
        here = host_device_name()
        recs = [r for r in recs if not Target.parse(r.target).info.is_host or r.device == here]
        device = None
    history = HistoryBest(recs, device)
    stack = _stack()
    stack.append(history)
    if _direct_call not in DIRECT_CALL_RESOLVERS:
        DIRECT_CALL_RESOLVERS.append(_direct_call)
    try:
        yield history
    finally:
        stack.pop()


def _current_version(name: str) -> int | None:
    try:
        return lookup_template(name).version
    except ConfigError:
        return None
