"""The lane offset of a vector split drops out of floor division and modulo."""

from __future__ import annotations

import itertools

from ember.tir import expr as E
from ember.tir.arith import Analyzer


def _analyzer(x: E.Var, f: E.Var) -> Analyzer:
    ana = Analyzer()
    ana.bind(x, E.Range(E.const(0), E.const(16)))
    ana.bind(f, E.Range(E.const(0), E.const(4)))
    return ana


def test_small_remainder_div_and_mod():
    x, f = E.Var("x"), E.Var("f")
    ana = _analyzer(x, f)
    assert repr(ana.simplify((x * 4 + f) // 8)) == "x // 2"
    assert repr(ana.simplify((x * 4 + f) % 8)) == "x % 2 * 4 + f"


def test_small_remainder_keeps_values():
    x, f = E.Var("x"), E.Var("f")
    ana = _analyzer(x, f)
    exprs = [(x * 4 + f) // 8, (x * 4 + f) % 8, (x * 12 + f + 2) // 24, (x * 6 + f) % 12]
    simplified = [ana.simplify(e) for e in exprs]
    from ember.tir.functor import substitute

    for xv, fv in itertools.product(range(16), range(4)):
        env = {x: E.const(xv), f: E.const(fv)}
        for e, s in zip(exprs, simplified):
            assert (
                Analyzer().simplify(substitute(e, env)).value
                == Analyzer().simplify(substitute(s, env)).value
            )
