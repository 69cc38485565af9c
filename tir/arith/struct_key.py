"""Structural keys: hashable summaries of expressions, for "same expression?" questions.

The arithmetic package compares expressions by structure (``x*4`` written twice
is one term of a sum), but IR nodes compare by identity. ``expr_key`` maps an
expression to a nested tuple that is equal for structurally equal expressions
and usable as a dict key. Variables and buffers are keyed by identity, the
way the IR defines them. :class:`KeyCache` memoises keys of nodes that are
kept alive by the cache itself, so ids cannot be reused while cached.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ember.tir import expr as E
from ember.tir.buffer import Buffer
from ember.tir.functor import fields_of


class KeyCache:
    """Keys of expressions seen before, by node identity (each node is kept alive)."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Any, Hashable]] = {}
        self._by_key: dict[str, dict[Hashable, Any]] = {}

    def key(self, e: Any) -> Hashable:
        hit = self._memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        k = self._compute(e)
        if len(self._memo) > 200_000:
            self._memo.clear()
            self._by_key.clear()  # their keys name variables by id, which the memo kept alive
        self._memo[id(e)] = (e, k)
        return k

    def results(self, name: str) -> dict[Hashable, Any]:
        """A memo of rewrite ``name``'s results by key, for a rewrite whose result depends on
        the expression's structure alone (not on bounds or facts); it lives as long as the
        keys it is indexed by."""
        return self._by_key.setdefault(name, {})

    def _compute(self, e: Any) -> Hashable:
        if isinstance(e, E.Var):
            return ("var", id(e))
        if isinstance(e, E.IntImm):
            return ("int", e.dtype, e.value)
        if isinstance(e, E.FloatImm):
            return ("float", e.dtype, e.value)
        if isinstance(e, E.BinOp):
            return ("bin", e.op, e.dtype, self.key(e.a), self.key(e.b))
        if isinstance(e, (Buffer, E.CommReducer, E.TupleReducer)) or not hasattr(
            type(e), "__dataclass_fields__"
        ):
            return ("obj", id(e))
        parts: list[Hashable] = [type(e).__name__]
        for name in fields_of(type(e)):
            parts.append(self._field(getattr(e, name)))
        return tuple(parts)

    def _field(self, v: Any) -> Hashable:
        if isinstance(v, (E.PrimExpr, Buffer)):
            return self.key(v)
        if isinstance(v, tuple):
            return tuple(self._field(x) for x in v)
        if v is None or isinstance(
            v, (str, int, float, bool, E.BinaryOp, E.CompareOp, E.Intrinsic)
        ):
            return v
        return ("obj", id(v))


def expr_key(e: E.PrimExpr) -> Hashable:
    """A hashable key equal for structurally equal expressions."""
    return KeyCache().key(e)


def same(a: E.PrimExpr, b: E.PrimExpr) -> bool:
    """Structural equality of two expressions (variables by identity)."""
    return a is b or expr_key(a) == expr_key(b)
