"""The ``apply_history_best`` blocks open in this thread, innermost last.

A task instantiated without a config asks them for its best record
(:mod:`ember.tuner.task`); :mod:`ember.tuner.dispatch` opens the blocks and, for a
template called directly, builds the task it looks up. Keeping the stack here, below
both, lets the task read it without importing the module that creates tasks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from ember.tuner.space import ConfigEntity

_LOCAL = threading.local()

# knob values a config must have, ``(("ic_bn", 16), ("oc_bn", 32))``: a question's
# ``where`` selects the fastest record among those measured with them
Where = tuple[tuple[str, Any], ...]


class RecordBlock(Protocol):
    """What one open block answers (``dispatch.HistoryBest``)."""

    best: dict[str, Any]
    fingerprint: str

    def record_for(self, question: tuple[Any, ...]) -> Any: ...

    def config_for_task(self, task: Any) -> ConfigEntity | None: ...

    def config_for_call(
        self, name: str, args: tuple[Any, ...], where: Where = ()
    ) -> ConfigEntity | None: ...


def open_blocks() -> list[RecordBlock]:
    """The open blocks of this thread, innermost last (the list itself: push and pop it)."""
    if not hasattr(_LOCAL, "stack"):
        _LOCAL.stack = []
    return _LOCAL.stack  # type: ignore[no-any-return]


def active_fingerprint() -> tuple[str, ...]:
    """What the enclosing ``apply_history_best`` blocks choose, as a cache-key part: a
    kernel built inside a block may differ from one built outside it or in another."""
    return tuple(h.fingerprint for h in open_blocks() if h.best)


# -- which records a build consulted ---------------------------------------------------
# A cache of things built under records (the graph's kernels) must not key them on every
# record in force: a model checked with one task's records left out would rebuild all its
# kernels. Instead a build runs inside ``tracking_consults()``, which notes each question
# asked of the open blocks and the record that answered it; the built thing is reused
# while ``answer()`` gives the same answers.


def answer(question: tuple[Any, ...]) -> Any:
    """Which record the open blocks answer ``question`` with, as a comparable value (None
    where none has one): ``("task", key)`` asks for a task's best record,
    ``("call", name, args)`` for a directly called template's, ``("call", name, args,
    where)`` for the best of those with the knob values ``where``, ``("fingerprint",)``
    for the whole set (what a build whose questions are unknown depends on)."""
    if question[0] == "fingerprint":
        return active_fingerprint()
    for block in reversed(open_blocks()):
        rec = block.record_for(question)
        if rec is not None:
            return (rec.task_key, repr(rec.config))
    return None


def _note(question: tuple[Any, ...]) -> None:
    stack = getattr(_LOCAL, "consults", None)
    if stack:
        stack[-1].append((question, answer(question)))


@contextmanager
def tracking_consults() -> Iterator[list[tuple[tuple[Any, ...], Any]]]:
    """The questions asked of the open record blocks in the block, with their answers;
    a tracked build nested in another counts for the outer one too."""
    stack = getattr(_LOCAL, "consults", None)
    if stack is None:
        stack = _LOCAL.consults = []
    found: list[tuple[tuple[Any, ...], Any]] = []
    stack.append(found)
    try:
        yield found
    finally:
        stack.pop()
        if stack:
            stack[-1].extend(found)


def answers_unchanged(consults: list[tuple[tuple[Any, ...], Any]]) -> bool:
    """Whether the open blocks still answer every noted question as they did."""
    return all(answer(q) == a for q, a in consults)


def note_task_question(key: str) -> Any:
    """Ask the open blocks for task ``key``'s best record without building the task, noting
    the question for :func:`tracking_consults`; the answer as :func:`answer` gives it."""
    question = ("task", key)
    _note(question)
    return answer(question)


def best_config_for(task: Any) -> ConfigEntity | None:
    """The config ``Task.instantiate()`` uses without one: the innermost block's record."""
    _note(("task", task.key))
    for block in reversed(open_blocks()):
        cfg = block.config_for_task(task)
        if cfg is not None:
            return cfg
    return None


def _call_question(name: str, args: tuple[Any, ...], where: Where) -> tuple[Any, ...]:
    return ("call", name, tuple(args), tuple(where)) if where else ("call", name, tuple(args))


def best_config_for_call(
    name: str, args: tuple[Any, ...], where: Where = ()
) -> ConfigEntity | None:
    """The config of template ``name`` called directly on ``args``: the innermost block's
    record for that workload, the fastest among those with the knob values ``where``
    when given (a resolver of ``template.DIRECT_CALL_RESOLVERS``)."""
    _note(_call_question(name, args, where))
    for block in reversed(open_blocks()):
        cfg = block.config_for_call(name, args, where)
        if cfg is not None:
            return cfg
    return None


def measured_for_call(
    name: str, args: tuple[Any, ...], where: Where = ()
) -> tuple[ConfigEntity, float] | None:
    """As :func:`best_config_for_call`, with the record's measured cost (median seconds):
    for a caller that weighs measured configs against each other (the CPU layout pass)."""
    question = _call_question(name, args, where)
    _note(question)
    for block in reversed(open_blocks()):
        rec = block.record_for(question)
        if rec is not None:
            cfg = block.config_for_call(name, args, where)
            if cfg is not None:
                return cfg, float(rec.cost)
    return None
