"""A tiny evaluator of scalar integer/boolean TIR expressions, for the arith tests.

Written independently of the reference interpreter so that the simplifier is
checked against plain Python semantics: floor division and modulo for ``//``
and ``%``, C truncation for ``truncdiv``/``truncmod``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ember.tir import expr as E

B, C = E.BinaryOp, E.CompareOp


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


OPS = {
    B.ADD: lambda a, b: a + b,
    B.SUB: lambda a, b: a - b,
    B.MUL: lambda a, b: a * b,
    B.FLOORDIV: lambda a, b: a // b,
    B.FLOORMOD: lambda a, b: a % b,
    B.TRUNCDIV: _tdiv,
    B.TRUNCMOD: lambda a, b: a - b * _tdiv(a, b),
    B.MIN: min,
    B.MAX: max,
    B.AND: lambda a, b: int(bool(a) and bool(b)),
    B.OR: lambda a, b: int(bool(a) or bool(b)),
}
CMPS = {
    C.LT: lambda a, b: a < b,
    C.LE: lambda a, b: a <= b,
    C.GT: lambda a, b: a > b,
    C.GE: lambda a, b: a >= b,
    C.EQ: lambda a, b: a == b,
    C.NE: lambda a, b: a != b,
}


Load = Callable[[Any, tuple[int, ...]], Any]


def evaluate(e: E.PrimExpr, env: Mapping[E.Var, int], load: Load | None = None) -> Any:
    """The value of ``e`` (booleans as 0/1) with variables from ``env``; ``load`` reads buffers."""
    if load is not None:
        return _Eval(env, load).run(e)
    if isinstance(e, (E.IntImm, E.FloatImm)):
        return e.value
    if isinstance(e, E.Var):
        return env[e]
    if isinstance(e, E.BinOp):
        return OPS[e.op](evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, E.Compare):
        return int(CMPS[e.op](evaluate(e.a, env), evaluate(e.b, env)))
    if isinstance(e, E.Not):
        return 1 - evaluate(e.a, env)
    if isinstance(e, E.Select):
        return evaluate(e.true_value if evaluate(e.cond, env) else e.false_value, env)
    if isinstance(e, E.Call) and e.op is E.Intrinsic.LIKELY:
        return evaluate(e.args[0], env)
    if isinstance(e, E.Let):
        return evaluate(e.body, {**env, e.var: evaluate(e.value, env)})
    if isinstance(e, E.Cast):
        return evaluate(e.value, env)
    raise TypeError(f"arith_eval cannot evaluate {type(e).__name__}")


class _Eval:
    """The same evaluation with buffer loads (for statement executors)."""

    def __init__(self, env: Mapping[E.Var, int], load: Load) -> None:
        self.env, self.load = env, load

    def run(self, e: E.PrimExpr) -> Any:
        if isinstance(e, E.BufferLoad):
            return self.load(e.buffer, tuple(int(self.run(i)) for i in e.indices))
        if isinstance(e, (E.IntImm, E.FloatImm)):
            return e.value
        if isinstance(e, E.Var):
            return self.env[e]
        if isinstance(e, E.BinOp):
            return OPS[e.op](self.run(e.a), self.run(e.b))
        if isinstance(e, E.Compare):
            return int(CMPS[e.op](self.run(e.a), self.run(e.b)))
        if isinstance(e, E.Not):
            return 1 - self.run(e.a)
        if isinstance(e, E.Select):
            return self.run(e.true_value if self.run(e.cond) else e.false_value)
        if isinstance(e, E.Call) and e.op is E.Intrinsic.LIKELY:
            return self.run(e.args[0])
        if isinstance(e, E.Cast):
            return self.run(e.value)
        if isinstance(e, E.Let):
            return _Eval({**self.env, e.var: self.run(e.value)}, self.load).run(e.body)
        raise TypeError(f"arith_eval cannot evaluate {type(e).__name__}")
