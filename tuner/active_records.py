"""The ``apply_history_best`` blocks open in this thread, innermost last.

A task instantiated without a config asks them for its best record
(:mod:`ember.tuner.task`); :mod:`ember.tuner.dispatch` opens the blocks and, for a
template called directly, builds the task it looks up. Keeping the stack here, below
both, lets the task read it without importing the module that creates tasks.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from ember.tuner.space import ConfigEntity

_LOCAL = threading.local()


class RecordBlock(Protocol):
    """What one open block answers (``dispatch.HistoryBest``)."""

    best: dict[str, Any]
    fingerprint: str

    def config_for_task(self, task: Any) -> ConfigEntity | None: ...

    def config_for_call(self, name: str, args: tuple[Any, ...]) -> ConfigEntity | None: ...


def open_blocks() -> list[RecordBlock]:
    """The open blocks of this thread, innermost last (the list itself: push and pop it)."""
    if not hasattr(_LOCAL, "stack"):
        _LOCAL.stack = []
    return _LOCAL.stack  # type: ignore[no-any-return]


def active_fingerprint() -> tuple[str, ...]:
    """What the enclosing ``apply_history_best`` blocks choose, as a cache-key part: a
    kernel built inside a block may differ from one built outside it or in another."""
    return tuple(h.fingerprint for h in open_blocks() if h.best)


def best_config_for(task: Any) -> ConfigEntity | None:
    """The config ``Task.instantiate()`` uses without one: the innermost block's record."""
    for block in reversed(open_blocks()):
        cfg = block.config_for_task(task)
        if cfg is not None:
            return cfg
    return None


def best_config_for_call(name: str, args: tuple[Any, ...]) -> ConfigEntity | None:
    """The config of template ``name`` called directly on ``args``: the innermost block's
    record for that workload (a resolver of ``template.DIRECT_CALL_RESOLVERS``)."""
    for block in reversed(open_blocks()):
        cfg = block.config_for_call(name, args)
        if cfg is not None:
            return cfg
    return None
