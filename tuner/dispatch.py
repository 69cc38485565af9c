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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ember.errors import ConfigError
from ember.target import Target
from ember.tuner.active_records import (
    active_fingerprint,
    best_config_for,
    best_config_for_call,
    open_blocks,
)
from ember.tuner.records import Record, best_records, host_device_name, read_records
from ember.tuner.space import ConfigEntity
from ember.tuner.task import create_task, workload_key
from ember.tuner.template import DIRECT_CALL_RESOLVERS, lookup_template

__all__ = ["HistoryBest", "active_fingerprint", "apply_history_best", "best_config_for"]


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

    def record_for(self, question: tuple[Any, ...]) -> Record | None:
        """The record this block answers ``question`` with (see
        :func:`ember.tuner.active_records.answer`): ``("task", task key)`` or
        ``("call", template name, args)``."""
        if question[0] == "task":
            return self.best.get(question[1])
        name, args = question[1], question[2]
        return self.by_workload.get((workload_key(name, args), name.rpartition(".")[2]))

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
    stack = open_blocks()
    stack.append(history)
    if best_config_for_call not in DIRECT_CALL_RESOLVERS:
        DIRECT_CALL_RESOLVERS.append(best_config_for_call)
    try:
        yield history
    finally:
        stack.pop()


def _current_version(name: str) -> int | None:
    try:
        return lookup_template(name).version
    except ConfigError:
        return None
