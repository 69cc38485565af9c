"""Decision-tree walks: which leaf each tree of an ensemble sends each sample to.

ONNX's ``ai.onnx.ml`` TreeEnsemble describes its trees as flat tables, and they are
known at compile time, but a sample's path through a tree is not: it depends on the
sample's features. :func:`tree_leaves` walks every tree as the tables say, a fixed
number of steps (the deepest tree's depth) from its root: at each step the current
entry's feature is compared with its threshold, and the walk moves to the entry's true
or false successor. Leaves are entries too, after the interior nodes, whose successors
are themselves, so a walk that reaches a leaf early stays there; the tables are
constant tensors, read at the data-dependent entry, so a forest of thousands of nodes
is a handful of loads per step, not an expression with a term per node. What the
leaves hold (weights, targets) and how trees combine is the converter's business
(``frontend/onnx_import/ops_ml.py``).

Comparisons follow ONNX's reference: ``BRANCH_LEQ/LT/GTE/GT/EQ/NEQ`` compare the
feature ``v`` with the threshold ``s`` as ``v <= s`` ... ``v != s`` (a NaN feature makes
all of them false but NEQ), ``BRANCH_MEMBER`` asks whether ``v`` equals one of the
entry's set members (a row of ``members``, padded with NaN, which equals nothing), and
an entry that tracks missing values takes its true branch for a NaN feature whatever
the comparison says.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import op as _op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.transform import static_shape

# ONNX's nodes_modes values.
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
MODES = (LEQ, LT, GTE, GT, EQ, NEQ, MEMBER)


def _compare(mode: int, v: E.PrimExpr, s: E.PrimExpr, members: list[E.PrimExpr]) -> E.PrimExpr:
    if mode == LEQ:
        return v <= s
    if mode == LT:
        return v < s
    if mode == GTE:
        return v >= s
    if mode == GT:
        return v > s
    if mode == EQ:
        return E.eq(v, s)
    if mode == NEQ:
        return E.ne(v, s)
    if not members:
        return E.const(False, "bool")
    hit = E.eq(v, members[0])
    for m in members[1:]:
        hit = E.logical_or(hit, E.eq(v, m))
    return hit


def _check(
    X: Tensor,
    feature: Tensor,
    split: Tensor,
    true_next: Tensor,
    false_next: Tensor,
    modes: Sequence[int],
    mode: Tensor | None,
) -> None:
    if not dt.is_float(X.dtype) or split.dtype != X.dtype:
        raise ArgumentError(
            f"tree_leaves: features {X.dtype} and thresholds {split.dtype} must be one float dtype"
        )
    if not modes or any(md not in MODES for md in modes) or (len(modes) > 1 and mode is None):
        raise ArgumentError(f"tree_leaves: modes {list(modes)} need a mode table where mixed")
    rows = {static_shape(t) for t in (feature, split, true_next, false_next)}
    if len(rows) != 1:
        raise ArgumentError("tree_leaves: the tables must have one row per entry")
    if {true_next.dtype, false_next.dtype, feature.dtype} != {"int32"}:
        raise ArgumentError("tree_leaves: features and successors must be int32 tables")


def tree_leaves(
    X: Tensor,
    feature: Tensor,
    split: Tensor,
    true_next: Tensor,
    false_next: Tensor,
    roots: Tensor,
    modes: Sequence[int],
    depth: int,
    mode: Tensor | None = None,
    missing_true: Tensor | None = None,
    members: Tensor | None = None,
) -> Tensor:
    """``leaf[n, t]``: the entry (an index into the tables) where tree ``t``'s walk for
    sample ``X[n]`` ends after ``depth`` steps from ``roots[t]``.

    ``feature``, ``split``, ``true_next``, ``false_next`` (and ``mode``,
    ``missing_true``, ``members`` where given) have one row per entry; ``modes`` lists
    the comparison modes in use (``mode`` says which applies to each entry where there
    are several; otherwise ``modes[0]`` applies to all), ``missing_true`` is nonzero
    where a NaN feature takes the true branch, ``members`` holds each entry's set
    members padded with NaN."""
    n, f = static_shape(X)
    (m,) = static_shape(feature)
    (t,) = static_shape(roots)
    _check(X, feature, split, true_next, false_next, modes, mode)
    width = static_shape(members)[1] if members is not None else 0

    def step(b: E.PrimExpr, at: E.PrimExpr) -> E.PrimExpr:
        """One move of the walk from entry ``at``; the result named as a Let by the caller."""
        v = X[b, E.max_(E.min_(feature[(at,)], f - 1), 0)]
        s = split[(at,)]
        row = [members[at, k] for k in range(width)] if members is not None else []
        conds = [(md, _compare(md, v, s, row)) for md in modes]
        cond = conds[-1][1]
        for md, c in reversed(conds[:-1]):
            assert mode is not None
            cond = E.select(E.eq(mode[(at,)], md), c, cond)
        if missing_true is not None:
            cond = E.logical_or(cond, E.logical_and(_op.isnan(v), E.ne(missing_true[(at,)], 0)))
        nxt = E.select(cond, true_next[(at,)], false_next[(at,)])
        return E.max_(E.min_(nxt, m - 1), 0)  # the tables stay in bounds whatever they hold

    def f_leaf(b: E.PrimExpr, tree: E.PrimExpr) -> E.PrimExpr:
        at: E.PrimExpr = E.max_(E.min_(roots[(tree,)], m - 1), 0)
        names = []
        for i in range(depth):
            var = E.Var(f"at{i}", "int32")
            names.append((var, step(b, at)))
            at = var
        body = at
        for var, value in reversed(names):
            body = E.Let(body.dtype, var, value, body)
        return body

    return te.compute((n, t), f_leaf, name="tree_leaves", tag="injective")
