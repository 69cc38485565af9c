"""C's syntax as the C-family printers see it: operator precedence, keywords, stable names.

The base printer (:mod:`ember.codegen_cuda.printer_c`) and its CUDA subclass and helpers
print an expression as :data:`Text`, the C text with the precedence of its outermost
operator, and parenthesise a child only when it binds more loosely than its context;
the precedences and the spelling of each binary and comparison operator are the tables
here. :class:`NameTable` gives every variable and buffer of one function a C name that
keeps its TIR name (``i_outer``), avoids C's keywords, and adds a numeric suffix on a
clash, so the printed source is the same from run to run.
"""

from __future__ import annotations

import re
from typing import Any

from ember.tir import expr as E

# Precedence of C operators (higher binds tighter); PRIMARY never needs parentheses.
PRIMARY, UNARY, MUL, ADD, REL, EQ, LAND, LOR, COND = 16, 15, 13, 12, 10, 9, 5, 4, 3
BINARY_SYNTAX: dict[E.BinaryOp, tuple[str, int]] = {
    E.BinaryOp.ADD: ("+", ADD),
    E.BinaryOp.SUB: ("-", ADD),
    E.BinaryOp.MUL: ("*", MUL),
    E.BinaryOp.DIV: ("/", MUL),
    E.BinaryOp.AND: ("&&", LAND),
    E.BinaryOp.OR: ("||", LOR),
}
COMPARE_SYNTAX: dict[E.CompareOp, tuple[str, int]] = {
    E.CompareOp.EQ: ("==", EQ),
    E.CompareOp.NE: ("!=", EQ),
    E.CompareOp.LT: ("<", REL),
    E.CompareOp.LE: ("<=", REL),
    E.CompareOp.GT: (">", REL),
    E.CompareOp.GE: (">=", REL),
}
C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto "
    "if inline int long register restrict return short signed sizeof static struct switch "
    "typedef union unsigned void volatile while bool true false class new delete this "
    "template typename namespace operator private public protected virtual".split()
)

Text = tuple[str, int]  # printed expression and its precedence


class NameTable:
    """Deterministic C names for variables and buffers, unique within one function."""

    def __init__(self, reserved: frozenset[str] = frozenset()) -> None:
        self._used: set[str] = set(reserved)
        self._names: dict[Any, str] = {}

    def fresh(self, hint: str) -> str:
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = "v_" + base
        name, n = base, 0
        while name in self._used:
            n += 1
            name = f"{base}_{n}"
        self._used.add(name)
        return name

    def bind(self, key: Any, hint: str) -> str:
        """A new name for ``key`` (a second binding of one Var gets a second name)."""
        name = self.fresh(hint)
        self._names[key] = name
        return name

    def get(self, key: Any) -> str | None:
        return self._names.get(key)
