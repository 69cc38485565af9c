"""Pass ``unroll_loops``: loops marked ``unroll`` become straight-line copies of their body.

Expects: ``For`` loops of kind ``UNROLLED`` with constant extents (a symbolic
extent is left as a serial loop with an unroll hint for the backend).
Guarantees: each such loop is replaced by ``extent`` copies of its body with
the loop variable substituted by each value, outer copies first. Loops longer
than ``MAX_UNROLL`` stay loops, since unrolling them only grows code.

The context's ``tir.UnrollLoop`` (TVM's keys and rule, see
:class:`~ember.tir.transform.context.UnrollConfig`) also unrolls serial loops
automatically. Walking inner loops first, it counts for each loop body the
statements one run executes (stores, evaluations, barriers; an unrolled inner
loop multiplies its body's count), how deeply unrolled loops nest inside, and
whether any loop inside stays a loop. A serial loop with a constant extent and
no remaining loop inside unrolls when at most ``auto_max_depth`` unrolled loops
nest inside it and either ``extent * steps <= auto_max_step`` or ``extent <=
auto_max_extent``. With ``explicit_unroll=False`` a loop to unroll is left as an
``UNROLLED`` loop for the backend compiler (LLVM's unroll metadata, ``#pragma
unroll`` in CUDA) instead of being copied here — except that
``auto_max_extent=1`` still copies loops of extent 0 or 1, as TVM does.

Differs from TVM on purpose: an ``UNROLLED`` loop without constant bounds, or
longer than ``MAX_UNROLL``, stays a serial loop with an unroll hint instead of
failing the build.
"""

from __future__ import annotations

from typing import Any

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Mutator, substitute_each
from ember.tir.transform.context import PassContext, UnrollConfig

MAX_UNROLL = 512


class _Unroll(Mutator):
    """TVM's unroller: the three counters describe the statements visited so far in the
    current statement list (a ``SeqStmt`` counts each element afresh and merges)."""

    def __init__(self, cfg: UnrollConfig) -> None:
        self.cfg = cfg
        self.steps = 0  # statements one run executes
        self.unroll_depth = 0  # unrolled loops nested inside
        self.normal_depth = 0  # loops that stay loops, nested inside

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):  # only statements change: values are not walked
            return node
        return self._method(node)(self, node)

    def _count(self, s: S.Stmt) -> S.Stmt:
        self.steps += 1
        return self.generic_visit(s)

    visit_BufferStore = visit_Evaluate = visit_AsyncCopy = visit_Barrier = _count

    def visit_SeqStmt(self, s: S.SeqStmt) -> S.Stmt:
        out = []
        for child in s.stmts:
            saved = (self.steps, self.unroll_depth, self.normal_depth)
            self.steps = self.unroll_depth = self.normal_depth = 0
            out.append(self.visit(child))
            self.steps += saved[0]
            self.unroll_depth = max(self.unroll_depth, saved[1])
            self.normal_depth = max(self.normal_depth, saved[2])
        if all(a is b for a, b in zip(out, s.stmts)):
            return s
        return S.seq(*out)

    def visit_For(self, s: S.For) -> S.Stmt:
        body = self.visit(s.body)
        cfg = self.cfg
        extent = s.extent.value if isinstance(s.extent, E.IntImm) else -1
        auto = (
            s.kind is S.ForKind.SERIAL
            and extent >= 0
            and self.normal_depth == 0
            and self.unroll_depth <= cfg.auto_max_depth
            and (extent * self.steps <= cfg.auto_max_step or extent <= cfg.auto_max_extent)
        )
        unroll = auto or s.kind is S.ForKind.UNROLLED
        if unroll:
            self.steps *= max(extent, 0)
            self.unroll_depth += 1
        else:
            self.normal_depth += 1
        tiny = cfg.auto_max_extent == 1 and 0 <= extent <= 1
        if (unroll and cfg.explicit_unroll) or tiny:
            return _copies(s, body)
        kind = S.ForKind.UNROLLED if unroll else s.kind
        if kind is s.kind and body is s.body:
            return s
        return S.For(s.loop_var, s.min, s.extent, kind, body, s.thread_tag, s.annotations)


def _copies(s: S.For, body: S.Stmt) -> S.Stmt:
    """``extent`` copies of ``body``, one per value of the loop variable (a loop with a
    hint when its bounds are not constants or it is too long to copy)."""
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
    values = [E.const(s.min.value + k, s.loop_var.dtype) for k in range(s.extent.value)]
    copies = substitute_each(body, s.loop_var, values)
    return S.seq(*copies) if copies else S.no_op()


def unroll_loops(func: S.PrimFunc, ctx: PassContext | None = None) -> S.PrimFunc:
    """Runs the pass with the context's ``tir.UnrollLoop`` settings (defaults without a context)."""
    cfg = ctx.get("tir.UnrollLoop") if ctx is not None else UnrollConfig()
    return _Unroll(cfg).visit_func(func)
