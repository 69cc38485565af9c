"""The subexpressions a large expression DAG reads more than once, for printers to name.

Simplified TIR is a DAG: a fused chain of ops that each read a value twice (``max(x,
-x)``, SiLU, GELU) doubles its tree with every op, so a printer that prints the tree
doubles its text too: 40 such ops made no CUDA kernel at all, and ``print`` of a 16-op
chain's TIR did not finish in a minute. Both printers (``codegen_cuda/printer_c.py``'s C
and ``tir/printer.py``'s text) name each such subexpression once, above the statement
that reads it, where the tree is large; below :data:`SHARED_TREE_LIMIT` they print as
before, one expression per statement, as TVM prints it.
"""

from __future__ import annotations

from ember.tir import expr as E
from ember.tir.functor import children

# An expression whose tree (every path to every node) is larger than this names the
# subexpressions it reads more than once.
SHARED_TREE_LIMIT = 4096


def shared_subexpressions(root: E.PrimExpr) -> dict[int, E.PrimExpr]:
    """The nodes of ``root`` read at two places or more, by id, where ``root`` as a tree
    is over :data:`SHARED_TREE_LIMIT` nodes (else none). Only nodes that evaluate the
    same wherever they are computed are taken: no variable, constant or call with
    effects, and nothing under a branch that C evaluates lazily (``if_then_else``'s
    values, the right side of ``&&`` and ``||``) or that binds variables of its own (a
    ``Let``'s body, a ``Reduce``'s source), which stays as it is printed."""
    sizes: dict[int, int] = {}
    readers: dict[int, int] = {}
    nodes: dict[int, E.PrimExpr] = {}

    def walk(e: E.PrimExpr) -> int:
        done = sizes.get(id(e))
        if done is not None:
            return done
        size = 1
        for child in _eager_children(e):
            readers[id(child)] = readers.get(id(child), 0) + 1
            size += walk(child)
        sizes[id(e)], nodes[id(e)] = size, e
        return size

    if walk(root) <= SHARED_TREE_LIMIT:
        return {}
    return {k: nodes[k] for k, n in readers.items() if n > 1 and _bindable(nodes[k])}


def _eager_children(e: E.PrimExpr) -> list[E.PrimExpr]:
    if isinstance(e, E.Call):
        if e.op is E.Intrinsic.IF_THEN_ELSE:
            return [e.args[0]]
        return list(e.args) if e.op in E.PURE_CALLS else []
    if isinstance(e, E.BinOp) and e.op in (E.BinaryOp.AND, E.BinaryOp.OR):
        return [e.a]
    if isinstance(e, (E.Let, E.Reduce, E.Var, E.IntImm, E.FloatImm)):
        return []  # a Let's body reads its variable, a Reduce's source its axes
    return [c for c in children(e) if isinstance(c, E.PrimExpr)]


def _bindable(e: E.PrimExpr) -> bool:
    if isinstance(e, (E.Var, E.IntImm, E.FloatImm, E.StringImm, E.Let, E.Reduce)):
        return False
    return not isinstance(e, E.Call) or e.op in E.PURE_CALLS
