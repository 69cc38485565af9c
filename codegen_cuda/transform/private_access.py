"""Which shared-memory accesses each thread makes alone: the ones no barrier has to order.

An access ``buf[index]`` is *thread-private* when ``index`` is an injective
function of the thread index: a linear form ``rest + sum(c_d * threadIdx.d)``
whose ``rest`` does not depend on the thread and whose coefficients separate the
threads (mixed radix: each coefficient exceeds the reach of the smaller ones).
Two private accesses with the same index touch, in every thread, an element no
other thread touches, so a write followed by a read of them is the same thread's
business. Thread loop variables are replaced by one variable per tag first, so
the two loops a cooperative fetch and a compute stage bind to ``threadIdx.x``
name the same index.
"""

from __future__ import annotations

from collections.abc import Hashable

from ember.tir import expr as E
from ember.tir.arith import Analyzer
from ember.tir.arith.linear import to_linear
from ember.tir.arith.struct_key import KeyCache
from ember.tir.functor import substitute, uses_var

_TAG_VARS = {f"threadIdx.{a}": E.Var(f"threadIdx_{a}") for a in "xyz"}


def private_key(
    index: E.PrimExpr, thread_vars: dict[E.Var, str], block: dict[str, int]
) -> Hashable | None:
    """A key equal for two accesses to the same thread-private element, else None."""
    canon = substitute(index, {v: _TAG_VARS[tag] for v, tag in thread_vars.items()})
    canon = Analyzer().simplify(canon)
    tags = {var: tag for tag, var in _TAG_VARS.items()}
    keys = KeyCache()
    form = to_linear(canon, keys)
    coefs: list[tuple[int, int]] = []  # (|coefficient|, extent)
    for atom, coef in form.terms.values():
        if isinstance(atom, E.Var) and atom in tags:
            extent = block.get(tags[atom][-1], 1)
            if extent > 1:
                coefs.append((abs(coef), extent))
        elif uses_var(atom, lambda v: v in tags):
            return None  # the thread index hides inside a non-linear atom
    if len(coefs) != sum(1 for t, e in block.items() if e > 1):
        return None  # some threads share the element
    reach = 0
    for coef, extent in sorted(coefs):
        if coef <= reach:
            return None
        reach += coef * (extent - 1)
    return frozenset((key, c) for key, (_, c) in form.terms.items()), form.const
