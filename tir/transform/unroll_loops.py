"""Pass ``unroll_loops``: loops marked ``unroll`` become straight-line copies of their body.

Expects: ``For`` loops of kind ``UNROLLED`` with constant extents (a symbolic
extent is left as a serial loop with an unroll hint for the backend).
Guarantees: each such loop is replaced by ``extent`` copies of its body with
the loop variable substituted by each value, outer copies first. Loops longer
than ``MAX_UNROLL`` stay loops, since unrolling them only grows code.
"""

from __future__ import annotations

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Mutator, substitute

MAX_UNROLL = 512


class _Unroll(Mutator):
    def visit_For(self, s: S.For) -> S.Stmt:
        body = self.visit(s.body)
        if s.kind is not S.ForKind.UNROLLED:
            return (
                s
                if body is s.body
                else S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)
            )
        if (
            not (isinstance(s.extent, E.IntImm) and isinstance(s.min, E.IntImm))
            or s.extent.value > MAX_UNROLL
        ):
            return S.For(
                s.loop_var,
                s.min,
                s.extent,
                S.ForKind.SERIAL,
                body,
                s.thread_tag,
                s.annotations + (("unroll_hint", True),),
            )
        copies = [
            substitute(body, {s.loop_var: E.const(s.min.value + k, s.loop_var.dtype)})
            for k in range(s.extent.value)
        ]
        return S.seq(*copies) if copies else S.no_op()


def unroll_loops(func: S.PrimFunc) -> S.PrimFunc:
    return _Unroll().visit_func(func)
