"""Pass ``unroll_loops``: loops marked ``unroll`` become straight-line copies of their body.

Expects: ``For`` loops of kind ``UNROLLED`` with constant extents (a symbolic
extent is left as a serial loop with an unroll hint for the backend).
Guarantees: each such loop is replaced by ``extent`` copies of its body with
the loop variable substituted by each value, outer copies first. Loops longer
than ``MAX_UNROLL`` stay loops, since unrolling them only grows code.

The context's ``tir.UnrollLoop`` (TVM's keys, see
:class:`~ember.tir.transform.context.UnrollConfig`) adds automatic unrolling of
small serial loops with constant bounds — at most ``auto_max_step`` statements
run by the loop and at most ``auto_max_depth`` nested loops, or an extent of at
most ``auto_max_extent`` — and with ``explicit_unroll=False`` leaves every
loop to unroll as an ``UNROLLED`` loop for the backend compiler (LLVM's unroll
metadata, ``#pragma unroll`` in CUDA) instead of copying it here.
"""

from __future__ import annotations

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Mutator, children, substitute
from ember.tir.transform.context import PassContext, UnrollConfig

MAX_UNROLL = 512


def _steps_and_depth(s: S.Stmt) -> tuple[int | None, int]:
    """Statements a run of ``s`` executes (None: not a constant) and its loop-nest depth."""
    if isinstance(s, (S.BufferStore, S.Evaluate, S.AsyncCopy, S.Barrier)):
        return 1, 0
    if isinstance(s, S.For):
        steps, depth = _steps_and_depth(s.body)
        if steps is None or not isinstance(s.extent, E.IntImm):
            return None, depth + 1
        return s.extent.value * steps, depth + 1
    total: int | None = 0
    depth = 0
    for child in children(s):
        if isinstance(child, S.Stmt):
            steps, d = _steps_and_depth(child)
            total = None if total is None or steps is None else total + steps
            depth = max(depth, d)
    return total, depth


class _Unroll(Mutator):
    def __init__(self, cfg: UnrollConfig) -> None:
        self.cfg = cfg

    def _auto(self, s: S.For, body: S.Stmt) -> bool:
        """Whether TVM's automatic rule unrolls this serial loop."""
        cfg = self.cfg
        if s.kind is not S.ForKind.SERIAL or not isinstance(s.extent, E.IntImm):
            return False
        if not isinstance(s.min, E.IntImm):
            return False
        steps, depth = _steps_and_depth(body)
        if steps is not None and s.extent.value * steps <= cfg.auto_max_step:
            if depth + 1 <= cfg.auto_max_depth:
                return True
        return s.extent.value <= cfg.auto_max_extent

    def visit_For(self, s: S.For) -> S.Stmt:
        body = self.visit(s.body)
        unroll = s.kind is S.ForKind.UNROLLED or self._auto(s, body)
        if not unroll:
            return (
                s
                if body is s.body
                else S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)
            )
        if not self.cfg.explicit_unroll:
            return S.For(
                s.loop_var, s.min, s.extent, S.ForKind.UNROLLED, body, s.thread_tag, s.annotations
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


def unroll_loops(func: S.PrimFunc, ctx: PassContext | None = None) -> S.PrimFunc:
    cfg = ctx.get("tir.UnrollLoop") if ctx is not None else UnrollConfig()
    return _Unroll(cfg).visit_func(func)
