"""One visitor and one mutator for every IR node, with dispatch on the node's class.

``Visitor.visit(node)`` calls ``visit_<ClassName>`` if the subclass defines it
(looking up the class's bases too), else walks the node's children generically.
The method for each node class is found once and cached, so a new node kind
needs no edits here. ``Mutator`` rebuilds a node only when a child came back as
a different object, so an unchanged tree is returned as the same object and a
pass that changes nothing costs no allocations.

Children are the dataclass fields holding a ``PrimExpr`` or ``Stmt``, or tuples
of them (any :class:`~ember.tir.node.IRNode`: this module needs no node module, so the
nodes may use it). Buffers are not children: a pass that rewrites buffers does so in its
``visit_BufferLoad`` / ``visit_BufferStore``.

Computes share subexpressions (one node object at many places: Winograd's select chains
are read by every sum of a transform), so an expression is a DAG whose paths can be
exponentially many. A walk whose result for a node does not depend on where the node sits
uses ``MemoMutator`` or ``OnceVisitor`` (or ``post_order_visit(..., once=True)``) and costs
the distinct nodes; a walk with scopes skips an expression met again in the same scope.
A walk whose ``visit_<Class>`` methods all name statements (and that keeps the base
``visit`` and ``generic_visit``) does not enter expressions at all: nothing there can
concern it (``post_order_stmts`` is such a walk).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ember.tir.node import IRNode

if TYPE_CHECKING:
    from ember.tir.expr import PrimExpr, Var
    from ember.tir.stmt import PrimFunc, Stmt

Node = Any  # PrimExpr | Stmt

_FIELDS: dict[type, tuple[str, ...]] = {}
_GETTERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def fields_of(cls: type) -> tuple[str, ...]:
    """A node class's field names, cached: the generic visitors walk children by them."""
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
        _FIELDS[cls] = names
    return names


def _no_fields(node: Any) -> tuple[Any, ...]:
    return ()


def field_values(node: Node) -> tuple[Any, ...]:
    """The values of a node's fields, in field order: one C-level ``attrgetter`` call per
    node class instead of a ``getattr`` per field, since every walk starts here."""
    cls = type(node)
    get = _GETTERS.get(cls)
    if get is None:
        names = fields_of(cls)
        if not names:
            get = _no_fields
        elif len(names) == 1:
            one = operator.attrgetter(names[0])
            get = lambda n: (one(n),)  # noqa: E731
        else:
            get = operator.attrgetter(*names)
        _GETTERS[cls] = get
    return get(node)


def children(node: Node) -> list[Node]:
    """The direct child nodes of ``node``, in field order."""
    out: list[Node] = []
    for value in field_values(node):
        if isinstance(value, IRNode):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if isinstance(v, IRNode))
    return out


class _Dispatch:
    """Finds and caches the ``visit_<Class>`` method of a functor class per node class."""

    _cache: dict[tuple[type, type], Callable[..., Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._cache = {}

    def _method(self, node: Node) -> Callable[..., Any]:
        key = (type(self), type(node))
        fn = self._cache.get(key)
        if fn is None:
            fn = type(self).generic_visit  # type: ignore[attr-defined]
            for klass in type(node).__mro__:
                found = getattr(type(self), f"visit_{klass.__name__}", None)
                if found is not None:
                    fn = found
                    break
            else:
                if _statements_only(type(self)) and _is_expr(type(node)):
                    fn = _skip_expression
            self._cache[key] = fn
        return fn


def _skip_expression(self: Any, node: Node) -> Node:
    return node  # a Mutator's result for an unchanged expression; a Visitor ignores it


_BASE_METHODS = ("visit", "generic_visit", "visit_expr")


_STATEMENTS_ONLY: dict[type, bool] = {}


def _statements_only(cls: type) -> bool:
    found = _STATEMENTS_ONLY.get(cls)
    if found is None:
        found = _STATEMENTS_ONLY[cls] = _adds_statement_visits_only(cls)
    return found


def _adds_statement_visits_only(cls: type) -> bool:
    """Whether a functor class acts on statements alone: every ``visit_<Class>`` it adds
    names a statement class, and it keeps the base walk. Such a walk cannot change or
    find anything inside an expression, so it does not enter one; walking an expression
    that shares subtrees as a tree costs its paths, exponentially many."""
    from ember.tir import stmt as S

    base = Mutator if issubclass(cls, Mutator) else Visitor
    if any(getattr(cls, m, None) is not getattr(base, m, None) for m in _BASE_METHODS):
        return False
    added = {n[len("visit_") :] for n in dir(cls) if n.startswith("visit_")}
    added -= {n[len("visit_") :] for n in dir(base) if n.startswith("visit_")}
    statements = {
        c.__name__ for c in vars(S).values() if isinstance(c, type) and issubclass(c, S.Stmt)
    }
    return bool(added) and added <= statements


def _is_expr(cls: type) -> bool:
    from ember.tir import expr as E

    return issubclass(cls, E.PrimExpr)


class Visitor(_Dispatch):
    """Read-only walk. Override ``visit_<Class>``; call ``self.generic_visit(node)`` to recurse."""

    def visit(self, node: Node) -> Any:
        return self._method(node)(self, node)

    def generic_visit(self, node: Node) -> None:
        # ``children`` inlined: this runs for every node of every walk, and builds no list
        for value in field_values(node):
            if isinstance(value, IRNode):
                self.visit(value)
            elif isinstance(value, tuple):
                for v in value:
                    if isinstance(v, IRNode):
                        self.visit(v)


class Mutator(_Dispatch):
    """Rewrite walk. ``visit_<Class>`` returns the replacement node."""

    def visit(self, node: Node) -> Any:
        return self._method(node)(self, node)

    def visit_expr(self, e: PrimExpr) -> PrimExpr:
        return self.visit(e)

    def visit_stmt(self, s: Stmt) -> Stmt:
        return self.visit(s)

    def generic_visit(self, node: Node) -> Node:
        old_values = field_values(node)
        values = []
        changed = False
        for old in old_values:
            if isinstance(old, IRNode):
                new = self.visit(old)
            elif isinstance(old, tuple) and any(isinstance(v, IRNode) for v in old):
                new = tuple(self.visit(v) if isinstance(v, IRNode) else v for v in old)
                if all(a is b for a, b in zip(new, old)):
                    new = old
            else:
                new = old
            changed |= new is not old
            values.append(new)
        return type(node)(*values) if changed else node

    def visit_func(self, func: PrimFunc) -> PrimFunc:
        body = self.visit(func.body)
        return func if body is func.body else func.with_body(body)


class MemoMutator(Mutator):
    """A mutator whose result for a node depends on that node alone, not on where it sits
    (no scopes, no analyzer facts): it rewrites each distinct node object once and returns
    the same result wherever the node appears again. An expression that shares a subtree
    (a select chain referenced by many sums) is then rewritten in time proportional to its
    distinct nodes, and the result shares it too, instead of being copied into a tree with
    one copy per path. One instance serves one rewrite with fixed settings."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Node, Node]] = {}  # id -> (node, result): keeps ids alive

    def visit(self, node: Node) -> Any:
        hit = self._memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = self._method(node)(self, node)
        self._memo[id(node)] = (node, out)
        return out


class OnceVisitor(Visitor):
    """A read-only walk that visits each distinct node object once, as TVM's
    ``PostOrderVisit`` does: for walks whose findings do not depend on the path to a node
    (which variables or loads occur), a shared subtree is walked once instead of once per
    path."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._alive: list[Node] = []  # keeps the ids in ``_seen`` from being reused

    def visit(self, node: Node) -> Any:
        key = id(node)
        if key in self._seen:
            return None
        self._seen.add(key)
        self._alive.append(node)
        return self._method(node)(self, node)


class _PostOrder(Visitor):
    def __init__(self, fn: Callable[[Node], None]) -> None:
        self.fn = fn

    def generic_visit(self, node: Node) -> None:
        Visitor.generic_visit(self, node)
        self.fn(node)


class _PostOrderOnce(OnceVisitor):
    def __init__(self, fn: Callable[[Node], None]) -> None:
        super().__init__()
        self.fn = fn

    def generic_visit(self, node: Node) -> None:
        Visitor.generic_visit(self, node)
        self.fn(node)


def post_order_visit(node: Node, fn: Callable[[Node], None], *, once: bool = False) -> None:
    """Call ``fn`` on every node below and including ``node``, children first: at each
    place a node appears, or with ``once`` on each distinct node object once (TVM's
    ``PostOrderVisit``; a DAG costs its distinct nodes, not its paths)."""
    (_PostOrderOnce(fn) if once else _PostOrder(fn)).visit(node)


class _PostOrderStmts(Visitor):
    def __init__(self, fn: Callable[[Stmt], None]) -> None:
        self.fn = fn

    def visit_Stmt(self, s: Stmt) -> None:
        Visitor.generic_visit(self, s)  # expressions are skipped: statements only
        self.fn(s)


def post_order_stmts(node: Node, fn: Callable[[Stmt], None]) -> None:
    """Call ``fn`` on every statement below and including ``node``, children first, at each
    place it appears, without entering expressions (which hold no statements): a walk
    that counts statements (bytes allocated) costs the statements, not the paths of the
    expressions they hold."""
    _PostOrderStmts(fn).visit(node)


class _Substitute(MemoMutator):
    def __init__(self, vmap: Mapping[Var, PrimExpr]) -> None:
        super().__init__()
        self.vmap = vmap

    def visit_Var(self, v: Var) -> PrimExpr:
        return self.vmap.get(v, v)


def substitute(node: Node, vmap: Mapping[Var, PrimExpr]) -> Node:
    """Replace variables by expressions (by identity) in an expression or statement."""
    if not vmap:
        return node
    return _Substitute(vmap).visit(node)


class HasBelow:
    """Whether ``pred`` holds for a node or any node below it, remembered per node object
    for as long as this object lives: asked of every node of a DAG, possibly many times
    (a body copied once per unrolled iteration, a guard search per loop), each distinct
    node is tested once. ``contains`` answers the same question once, without the memo."""

    def __init__(self, pred: Callable[[Node], bool]) -> None:
        self.pred = pred
        self.memo: dict[int, tuple[Node, bool]] = {}  # id -> (node, answer): keeps ids alive

    def __call__(self, node: Node) -> bool:
        hit = self.memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        found = self.pred(node) or any(self(c) for c in children(node))
        self.memo[id(node)] = (node, found)
        return found


class _SubstituteWhere(_Substitute):
    def __init__(self, vmap: Mapping[Var, PrimExpr], mentions: HasBelow) -> None:
        super().__init__(vmap)
        self.mentions = mentions

    def visit(self, node: Node) -> Any:
        return _Substitute.visit(self, node) if self.mentions(node) else node


def substitute_each(node: Node, var: Var, values: Sequence[PrimExpr]) -> list[Node]:
    """``node`` with ``var`` replaced by each of ``values`` in turn: the copies of an
    unrolled loop's body. Which subexpressions mention ``var`` is found once for all the
    copies, and each copy rebuilds only those: an unrolled Winograd transform reads its
    variable in a select chain's conditions, not in the sums below them, which a plain
    ``substitute`` per copy walked again for every copy."""
    mentions = HasBelow(lambda n: n is var)
    return [_SubstituteWhere({var: v}, mentions).visit(node) for v in values]


class _FindVar(OnceVisitor):
    def __init__(self, pred: Callable[[Var], bool]) -> None:
        super().__init__()
        self.pred = pred
        self.found = False

    def visit(self, node: Node) -> Any:
        return None if self.found else OnceVisitor.visit(self, node)

    def visit_Var(self, v: Var) -> None:
        if self.pred(v):
            self.found = True


def uses_var(node: Node, pred: Callable[[Var], bool]) -> bool:
    """True if some variable in ``node`` satisfies ``pred``."""
    finder = _FindVar(pred)
    finder.visit(node)
    return finder.found


class _FindNode(OnceVisitor):
    def __init__(self, pred: Callable[[Node], bool]) -> None:
        super().__init__()
        self.pred = pred
        self.found = False

    def visit(self, node: Node) -> Any:
        if self.found:
            return None
        if self.pred(node):
            self.found = True
            return None
        return OnceVisitor.visit(self, node)


def contains(node: Node, pred: Callable[[Node], bool]) -> bool:
    """True if ``node`` or a node inside it satisfies ``pred`` (each distinct node tested
    once; the walk stops at the first)."""
    finder = _FindNode(pred)
    finder.visit(node)
    return finder.found


class _CollectVars(OnceVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.out: set[Var] = set()

    def visit_Var(self, v: Var) -> None:
        self.out.add(v)


def free_vars(node: Node) -> set[Var]:
    """Every variable mentioned in ``node`` (including ones bound inside it)."""
    collect = _CollectVars()
    collect.visit(node)
    return collect.out
