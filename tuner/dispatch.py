"""``apply_history_best``: build schedules with the best recorded config of each task.

Sits on top of the records (:mod:`ember.tuner.records`) and under every caller of a
template: inside ``with apply_history_best("tune.jsonl"):``, ``Task.instantiate()``
without a config and a template called directly (``matmul_llvm(64, 64, 64)``) use the
fastest valid record of their task, falling back to the template's defaults where
there is none. Blocks nest; the innermost with a record for the task wins.

A caller that can run only some configs of a task asks with ``where`` (knob values the
config must have): the fastest record among those with them. The graph's blocked
convolutions do (``conv2d_NCHWc.llvm`` whose ``ic_bn`` the producer fixed): a kernel is
built with a config measured as a whole, never the best record's knobs under other blocks.
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
    Where,
    active_fingerprint,
    best_config_for,
    best_config_for_call,
    open_blocks,
)
from ember.tuner.records import (
    Record,
    best_records,
    config_records,
    host_device_name,
    read_records,
)
from ember.tuner.space import ConfigEntity
from ember.tuner.task import create_task, workload_key
from ember.tuner.template import DIRECT_CALL_RESOLVERS, lookup_template

__all__ = ["HistoryBest", "active_fingerprint", "apply_history_best", "best_config_for"]


class HistoryBest:
    """The records of a block, read once: the best per task key, and every valid one per
    workload, fastest first (for questions with ``where``); configs are rebuilt per task
    on demand."""

    def __init__(self, records: Iterable[Record], device: str | None) -> None:
        records = list(records)
        self.best = best_records(records, device)
        self.by_workload: dict[tuple[str, str], Record] = {}
        for rec in self.best.values():
            key = (rec.workload_key, Target.parse(rec.target).kind)
            old = self.by_workload.get(key)
            if old is None or rec.cost < old.cost:
                self.by_workload[key] = rec
        self.ranked: dict[tuple[str, str], list[Record]] = {}  # fastest first
        for rec in config_records(records, device):
            key = (rec.workload_key, Target.parse(rec.target).kind)
            self.ranked.setdefault(key, []).append(rec)
        for ranked in self.ranked.values():
            ranked.sort(key=lambda r: r.cost)
        self._tasks: dict[str, Any] = {}  # task key -> task, for direct calls
        self._configs: dict[tuple[str, str], ConfigEntity] = {}  # (task key, config) -> entity
        # names the configs this block hands out, for caches of what was built with them: a
        # digest, not hash(), whose per-process salt on strings would make the disk kernel
        # cache miss in every new process. Every valid record in its rank counts, since a
        # question with ``where`` may be answered by any of them.
        chosen = sorted((k, [r.config for r in v]) for k, v in self.ranked.items())
        self.fingerprint = hashlib.sha256(
            json.dumps(chosen, sort_keys=True, default=repr).encode()
        ).hexdigest()

    def record_for(self, question: tuple[Any, ...]) -> Record | None:
        """The record this block answers ``question`` with (see
        :func:`ember.tuner.active_records.answer`): ``("task", task key)`` or
        ``("call", template name, args[, where])``."""
        if question[0] == "task":
            return self.best.get(question[1])
        name, args = question[1], question[2]
        key = (workload_key(name, args), name.rpartition(".")[2])
        where = question[3] if len(question) > 3 else ()
        if not where:
            return self.by_workload.get(key)
        return next((r for r in self.ranked.get(key, ()) if _has(r, where)), None)

    def config_for_task(self, task: Any) -> ConfigEntity | None:
        rec = self.best.get(task.key)
        return None if rec is None else self._entity(rec, task)

    def config_for_call(
        self, name: str, args: tuple[Any, ...], where: Where = ()
    ) -> ConfigEntity | None:
        question = ("call", name, tuple(args), tuple(where)) if where else ("call", name, args)
        rec = self.record_for(question)
        if rec is None:
            return None
        if rec.task_key not in self._tasks:  # collect the space once per task
            self._tasks[rec.task_key] = create_task(name, args, rec.target)
        return self._entity(rec, self._tasks[rec.task_key])

    def _entity(self, rec: Record, task: Any) -> ConfigEntity:
        key = (rec.task_key, json.dumps(rec.config, sort_keys=True, default=repr))
        if key not in self._configs:
            try:
                self._configs[key] = ConfigEntity.from_json(rec.config, task.config_space)
            except ConfigError as e:
                e.add_context(f"while applying the best record of task '{task.name}'")
                raise
        return self._configs[key]


def _has(rec: Record, where: Where) -> bool:
    """Whether ``rec``'s config has every knob value of ``where`` (as its record writes them)."""
    values = rec.config.get("values")
    return isinstance(values, dict) and all(values.get(k, _MISSING) == v for k, v in where)


_MISSING = object()


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
