"""Well-formedness of a PrimFunc, checked after every pass when ``EMBER_VERIFY_IR=1``.

It catches the bugs a pass can introduce before a backend turns them into
wrong code: a variable used outside the loop or let that defines it, a loop
variable defined twice, operands of mismatched dtypes, an access with the
wrong number of indices, or tensor-expression nodes that lowering should
have removed.
"""

from __future__ import annotations

from typing import Any

from ember.errors import InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import Visitor


class _Verify(Visitor):
    """Collects the problems; an expression met again while the same variables are
    defined has nothing new to report, so a shared subexpression is checked once."""

    def __init__(self, func: S.PrimFunc) -> None:
        self.func = func
        self.defined: set[E.Var] = set(func.size_vars())
        self.problems: list[str] = []
        self.undefined: list[E.Var] = []
        self.context = 0  # changes with ``defined``
        self.seen: set[tuple[int, int]] = set()
        self.alive: list[E.PrimExpr] = []  # keeps the ids in ``seen`` from being reused

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):
            key = (id(node), self.context)
            if key in self.seen:
                return None
            self.seen.add(key)
            self.alive.append(node)
        return self._method(node)(self, node)

    def define(self, v: E.Var, what: str) -> None:
        if v in self.defined:
            self.problems.append(f"variable '{v.name}' is redefined inside its own scope ({what})")
        self.defined.add(v)
        self.context += 1

    def undefine(self, v: E.Var) -> None:
        self.defined.discard(v)
        self.context += 1

    def visit_Var(self, v: E.Var) -> None:
        if v not in self.defined and v.dtype != "handle":
            self.problems.append(f"variable '{v.name}' is used outside its definition")
            if v not in self.undefined:
                self.undefined.append(v)

    def visit_For(self, s: S.For) -> None:
        self.visit(s.min)
        self.visit(s.extent)
        self.define(s.loop_var, "loop")
        self.visit(s.body)
        self.undefine(s.loop_var)

    def visit_LetStmt(self, s: S.LetStmt) -> None:
        self.visit(s.value)
        self.define(s.var, "let")
        self.visit(s.body)
        self.undefine(s.var)

    def visit_Let(self, e: E.Let) -> None:
        self.visit(e.value)
        self.defined.add(e.var)
        self.context += 1
        self.visit(e.body)
        self.undefine(e.var)

    def visit_BinOp(self, e: E.BinOp) -> None:
        if not (e.a.dtype == e.b.dtype == e.dtype):
            self.problems.append(f"{e.op.name} mixes {e.a.dtype}, {e.b.dtype} -> {e.dtype}: {e!r}")
        self.generic_visit(e)

    def visit_Compare(self, e: E.Compare) -> None:
        if e.a.dtype != e.b.dtype or not dt.is_bool(e.dtype):
            self.problems.append(f"comparison of {e.a.dtype} with {e.b.dtype}: {e!r}")
        self.generic_visit(e)

    def _access(self, buf: Buffer, indices: tuple[E.PrimExpr, ...], what: str) -> None:
        ndim = len(buf.shape)
        if len(indices) not in (ndim, 1):
            self.problems.append(
                f"{what} of '{buf.name}' with {len(indices)} indices for {ndim} dims"
            )

    def visit_BufferLoad(self, e: E.BufferLoad) -> None:
        self._access(e.buffer, e.indices, "load")
        self.generic_visit(e)

    def visit_BufferStore(self, s: S.BufferStore) -> None:
        self._access(s.buffer, s.indices, "store")
        if dt.element_of(s.value.dtype) != dt.element_of(s.buffer.dtype):
            self.problems.append(
                f"store of {s.value.dtype} into '{s.buffer.name}' of {s.buffer.dtype}"
            )
        self.generic_visit(s)

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> None:
        self.problems.append(f"tensor read '{e.producer.name}' survived lowering")

    def visit_Reduce(self, e: E.Reduce) -> None:
        self.problems.append("a reduction expression survived lowering")


def verify_well_formed(func: S.PrimFunc, after: str = "") -> None:
    """Raise when ``func`` breaks a TIR invariant, naming the pass that ran just before."""
    v = _Verify(func)
    v.visit(func.body)
    if v.problems:
        where = f" after pass '{after}'" if after else ""
        listed = "\n  ".join(dict.fromkeys(v.problems))
        raise InternalError(f"ill-formed TIR in '{func.name}'{where}:\n  {listed}\n{func!r}")


def undefined_vars(func: S.PrimFunc) -> list[E.Var]:
    """Scalar variables the body uses that no parameter, shape, loop or let defines: on a
    freshly lowered function, symbols (a size, a split factor) missing from the arguments."""
    v = _Verify(func)
    v.visit(func.body)
    return v.undefined
