"""The base class of TIR's expression and statement nodes, and how a node reads as text.

:class:`IRNode` sits below ``expr.py`` and ``stmt.py``. The functor's generic walk only
has to tell a node from any other field value, so it needs this class and neither node
module; the nodes' own methods (a reducer's combine, a function's size variables) can
then use the functor without an import cycle.

The printer (:mod:`ember.tir.printer`) knows every node kind, so it sits above the node
modules and they cannot import it. Instead it registers itself here when it is imported,
and ``repr`` of any node goes through :func:`to_text`. ``ember.tir`` imports the printer,
so every node that can exist can print.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

_printer: Callable[[Any], str] | None = None


def set_printer(fn: Callable[[Any], str]) -> None:
    """Make ``fn`` the text of nodes (called once, by :mod:`ember.tir.printer`)."""
    global _printer
    _printer = fn


def to_text(node: Any) -> str:
    """``node`` as the printer writes it (its class name while ``ember.tir`` is loading)."""
    return _printer(node) if _printer is not None else f"<{type(node).__name__}>"


class IRNode:
    """Base of every expression and statement: what the functor walks into."""

    __slots__ = ()

    def __repr__(self) -> str:
        return to_text(self)


class IREnum(enum.Enum):
    """An enumeration held in IR nodes (operators, loop kinds), hashed by identity.

    ``Enum`` hashes a member by its name in a Python-level ``__hash__``, and the
    simplifier hashes structural keys (nested tuples holding operators) millions of times
    per model: that call was 0.7% of a ResNet-18 compile's profile samples and 2% of the
    ONNX node suite's traced time. Members are singletons, so hashing by identity agrees
    with their equality, at C speed."""

    __hash__ = object.__hash__
