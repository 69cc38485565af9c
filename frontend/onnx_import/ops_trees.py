"""Converter for ``ai.onnx.ml`` TreeEnsemble (opset 5): a forest as tables, walked per sample.

The attributes describe the trees as flat lists of interior nodes and of leaves. Here
they become one table of *entries*, the nodes then the leaves, each node's true and
false successors turned into entry numbers (a leaf's successors are itself), and each
tree's depth is worked out, so the ``tree_leaves`` op (``tir/topi/trees.py``) can walk
every tree that many steps and land on a leaf entry. The rest is existing ops: a
``gather`` of a constant per-entry table of target contributions (the leaf's weight in
its target's column, the aggregate's identity elsewhere: 0 for SUM and AVERAGE, whose
weights are divided by the tree count, the largest float for MIN, the lowest for MAX,
as ONNX's reference starts from them), a ``reduce`` over the trees, and the
post-transform.

Three points where ONNX's reference (``onnx.reference``) departs from the operator's text,
and Ember follows the text: set members are read in the order the BRANCH_MEMBER nodes
appear in ``nodes_modes`` (the reference reads them in the order its recursive build
visits the nodes); a one-leaf tree is a node whose true and false branches name the
same leaf, and it gives that leaf (the reference gives the leaf numbered like the
root); and ``post_transform`` is applied (the reference ignores it), with the text's
numbering, 1 SOFTMAX and 2 LOGISTIC (onnxruntime swaps those two). PROBIT is
``sqrt(2) * erfinv(2p - 1)``, erfinv by Giles' single-precision approximation
(a few 1e-7 relative, for float64 too); SOFTMAX_ZERO is a softmax
over the nonzero scores that leaves zeros at 0, as onnxruntime computes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.tir.topi.trees import MEMBER, MODES

ML = "ai.onnx.ml"
AVERAGE, SUM, MIN, MAX = range(4)
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = range(5)
SOFTMAX_ZERO_EPS = 1e-7  # |score| at or below this counts as zero (onnxruntime's bound)


@dataclass
class _Forest:
    """The entry tables of a forest: nodes first, then leaves."""

    feature: np.ndarray
    split: np.ndarray
    true_next: np.ndarray
    false_next: np.ndarray
    mode: np.ndarray
    missing_true: np.ndarray
    members: np.ndarray | None
    roots: np.ndarray
    depth: int
    nodes: int


def _ints(ctx: ConvertContext, name: str, default: tuple[int, ...] | None = None) -> np.ndarray:
    value = ctx.attr(name) if default is None else ctx.attr(name, default)
    return np.asarray(value, dtype=np.int64).reshape(-1)


def _successors(ctx: ConvertContext, side: str, nodes: int, leaves: int) -> np.ndarray:
    ids, to_leaf = _ints(ctx, f"nodes_{side}nodeids"), _ints(ctx, f"nodes_{side}leafs")
    if len(ids) != nodes or len(to_leaf) != nodes:
        raise ArgumentError(
            f"TreeEnsemble '{ctx.name}': nodes_{side}nodeids and nodes_{side}leafs must "
            f"have one entry per node ({nodes})"
        )
    limit = np.where(to_leaf != 0, leaves, nodes)
    if np.any(ids < 0) or np.any(ids >= limit):
        raise ArgumentError(f"TreeEnsemble '{ctx.name}': nodes_{side}nodeids name no node or leaf")
    return np.where(to_leaf != 0, nodes + ids, ids)


def _depth(
    ctx: ConvertContext,
    roots: np.ndarray,
    true_next: np.ndarray,
    false_next: np.ndarray,
    nodes: int,
) -> int:
    """The most steps any tree's walk takes to reach a leaf; a cycle is refused."""
    memo: dict[int, int] = {}
    for root in roots.tolist():
        stack = [(int(root), False)]
        on_path: set[int] = set()
        while stack:
            at, done = stack.pop()
            if at >= nodes or at in memo:
                continue
            if done:
                on_path.discard(at)
                kids = (int(true_next[at]), int(false_next[at]))
                memo[at] = 1 + max(memo.get(k, 0) if k < nodes else 0 for k in kids)
                continue
            if at in on_path:
                raise ArgumentError(f"TreeEnsemble '{ctx.name}': the nodes form a cycle")
            on_path.add(at)
            stack.append((at, True))
            stack.extend((int(k), False) for k in (true_next[at], false_next[at]))
    return max((memo.get(int(r), 0) for r in roots), default=0)


def _members(ctx: ConvertContext, modes: np.ndarray, dtype: str, size: int) -> np.ndarray | None:
    """One row of set members per entry (NaN-padded), in the order MEMBER nodes appear."""
    member_nodes = np.flatnonzero(modes == MEMBER)
    if not len(member_nodes):
        return None
    if not ctx.has_attr("membership_values"):
        raise ArgumentError(
            f"TreeEnsemble '{ctx.name}': BRANCH_MEMBER nodes need membership_values"
        )
    values = np.asarray(ctx.attr("membership_values"), dtype=np.float64).reshape(-1)
    sets: list[list[float]] = []
    current: list[float] = []
    for v in values.tolist():
        if math.isnan(v):
            sets.append(current)
            current = []
        else:
            current.append(v)
    if current:
        sets.append(current)
    if len(sets) != len(member_nodes):
        raise ArgumentError(
            f"TreeEnsemble '{ctx.name}': {len(sets)} member sets for {len(member_nodes)} "
            "BRANCH_MEMBER nodes"
        )
    table = np.full((size, max(1, *(len(s) for s in sets))), np.nan)
    for node, members in zip(member_nodes, sets):
        table[node, : len(members)] = members
    return table.astype(dtype)


def _forest(ctx: ConvertContext, features: int, dtype: str) -> _Forest:
    feature = _ints(ctx, "nodes_featureids")
    nodes = len(feature)
    weights = np.asarray(ctx.attr("leaf_weights")).reshape(-1)
    leaves = len(weights)
    modes = np.asarray(ctx.attr("nodes_modes")).reshape(-1).astype(np.int64)
    splits = np.asarray(ctx.attr("nodes_splits")).reshape(-1)
    if nodes < 1 or leaves < 1 or len(modes) != nodes or len(splits) != nodes:
        raise ArgumentError(
            f"TreeEnsemble '{ctx.name}': nodes_featureids, nodes_modes and nodes_splits must "
            "have one entry per node, and there must be nodes and leaves"
        )
    if np.any(feature < 0) or np.any(feature >= features):
        raise ArgumentError(
            f"TreeEnsemble '{ctx.name}': nodes_featureids must lie in [0, {features})"
        )
    if not set(modes.tolist()) <= set(MODES):
        raise ArgumentError(f"TreeEnsemble '{ctx.name}': unknown nodes_modes {sorted(set(modes))}")
    size = nodes + leaves
    own = np.arange(nodes, size)
    true_next = np.concatenate([_successors(ctx, "true", nodes, leaves), own])
    false_next = np.concatenate([_successors(ctx, "false", nodes, leaves), own])
    roots = _ints(ctx, "tree_roots")
    if not len(roots) or np.any(roots < 0) or np.any(roots >= nodes):
        raise ArgumentError(f"TreeEnsemble '{ctx.name}': tree_roots must name nodes")
    missing = _ints(ctx, "nodes_missing_value_tracks_true", (0,) * nodes)
    if len(missing) != nodes:
        raise ArgumentError(
            f"TreeEnsemble '{ctx.name}': nodes_missing_value_tracks_true needs one per node"
        )
    pad = np.zeros(leaves, np.int64)
    return _Forest(
        feature=np.concatenate([feature, pad]).astype(np.int32),
        split=np.concatenate([splits.astype(dtype), np.zeros(leaves, dtype)]),
        true_next=true_next.astype(np.int32),
        false_next=false_next.astype(np.int32),
        mode=np.concatenate([modes, pad]).astype(np.int32),
        missing_true=np.concatenate([missing != 0, pad != 0]).astype(np.int8),
        members=_members(ctx, modes, dtype, size),
        roots=roots.astype(np.int32),
        depth=_depth(ctx, roots, true_next, false_next, nodes),
        nodes=nodes,
    )


def _contributions(
    ctx: ConvertContext, forest: _Forest, aggregate: int, targets: int, dtype: str
) -> np.ndarray:
    """(entries, targets): each leaf's weight in its target's column, else the aggregate's
    identity."""
    weights = np.asarray(ctx.attr("leaf_weights")).reshape(-1).astype(np.float64)
    target = _ints(ctx, "leaf_targetids")
    if len(target) != len(weights) or np.any(target < 0) or np.any(target >= targets):
        raise ArgumentError(
            f"TreeEnsemble '{ctx.name}': leaf_targetids must give each leaf a target in "
            f"[0, {targets})"
        )
    info = np.finfo(dtype)
    identity = {SUM: 0.0, AVERAGE: 0.0, MIN: float(info.max), MAX: float(info.min)}[aggregate]
    if aggregate == AVERAGE:
        weights = weights / len(forest.roots)
    table = np.full((len(forest.feature), targets), identity, dtype=np.float64)
    leaves = len(forest.feature) - len(weights)
    table[leaves + np.arange(len(weights)), target] = weights
    return table.astype(dtype)


def _tables(ctx: ConvertContext, forest: _Forest) -> tuple[list[str], dict]:
    """The ``tree_leaves`` inputs after X, and its attributes."""
    used = tuple(sorted(set(forest.mode[: forest.nodes].tolist())))
    inputs = [
        ctx.const(forest.feature), ctx.const(forest.split), ctx.const(forest.true_next),
        ctx.const(forest.false_next), ctx.const(forest.roots),
    ]  # fmt: skip
    tables = []
    if len(used) > 1:
        tables.append("mode")
        inputs.append(ctx.const(forest.mode))
    if forest.missing_true.any():
        tables.append("missing_true")
        inputs.append(ctx.const(forest.missing_true))
    if forest.members is not None:
        tables.append("members")
        inputs.append(ctx.const(forest.members))
    return inputs, {"modes": used, "depth": forest.depth, "tables": tuple(tables)}


@converter("TreeEnsemble", since=5, domain=ML)
def tree_ensemble(ctx: ConvertContext) -> list[str]:
    """ONNX TreeEnsemble: each tree's leaf, aggregated per target, then post-transformed."""
    x = ctx.type(0)
    if x.ndim != 2 or not isinstance(x.shape[1], int):
        raise ArgumentError(f"TreeEnsemble '{ctx.name}': X must be (N, F) with static F, got {x}")
    if x.dtype not in ("float16", "float32", "float64"):
        raise ArgumentError(f"TreeEnsemble '{ctx.name}': {x.dtype} features are not supported")
    aggregate = int(ctx.attr("aggregate_function", SUM))
    transform = int(ctx.attr("post_transform", NONE))
    targets = int(ctx.attr("n_targets"))
    if aggregate not in (AVERAGE, SUM, MIN, MAX) or transform not in range(5) or targets < 1:
        raise ArgumentError(
            f"TreeEnsemble '{ctx.name}': aggregate_function {aggregate}, post_transform "
            f"{transform} or n_targets {targets} is out of range"
        )
    dtype = "float32" if x.dtype == "float16" else x.dtype  # float16 is compared widened
    samples = ctx.input(0)
    if dtype != x.dtype:
        samples = ctx.emit1("cast", [samples], {"dtype": dtype})
    forest = _forest(ctx, x.shape[1], dtype)
    tables, attrs = _tables(ctx, forest)
    leaves = ctx.emit1("tree_leaves", [samples, *tables], attrs)  # (N, trees)
    table = ctx.const(_contributions(ctx, forest, aggregate, targets, dtype))
    scores = ctx.emit1("gather", [table, leaves], {"axis": 0})  # (N, trees, targets)
    kind = {AVERAGE: "sum", SUM: "sum", MIN: "min", MAX: "max"}[aggregate]
    y = ctx.emit1("reduce", [scores], {"kind": kind, "axes": (1,), "keepdims": False})
    y = _post_transform(ctx, y, transform, dtype)
    return [y if dtype == x.dtype else ctx.emit1("cast", [y], {"dtype": x.dtype})]


def _post_transform(ctx: ConvertContext, y: str, transform: int, dtype: str) -> str:
    if transform == SOFTMAX:
        return ctx.emit1("softmax", [y], {"axis": 1})
    if transform == LOGISTIC:
        return ctx.emit1("sigmoid", [y])
    if transform == SOFTMAX_ZERO:
        return _softmax_zero(ctx, y, dtype)
    if transform == PROBIT:
        return _probit(ctx, y, dtype)
    return y


def _softmax_zero(ctx: ConvertContext, y: str, dtype: str) -> str:
    """Softmax over the nonzero scores of each row; a zero score stays (about) zero: it
    is scaled by ``exp(-max)`` and divided by the sum like the others, as onnxruntime does."""

    def c(v: float) -> str:
        return ctx.const(np.array(v, dtype=dtype))

    top = ctx.emit1("reduce", [y], {"kind": "max", "axes": (1,), "keepdims": True})
    nonzero = ctx.emit1("greater", [ctx.emit1("abs", [y]), c(SOFTMAX_ZERO_EPS)])
    e = ctx.emit1("exp", [ctx.emit1("subtract", [y, top])])
    kept = ctx.emit1("multiply", [y, ctx.emit1("exp", [ctx.emit1("neg", [top])])])
    total = ctx.emit1("where", [nonzero, e, c(0.0)])
    total = ctx.emit1("reduce", [total], {"kind": "sum", "axes": (1,), "keepdims": True})
    return ctx.emit1("divide", [ctx.emit1("where", [nonzero, e, kept]), total])


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision:
# polynomials in w = -log((1 - x)(1 + x)), for w < 5 (in w - 2.5) and beyond (in sqrt(w) - 3).
_ERFINV_CENTRAL = (
    2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
    -0.00125372503, -0.00417768164, 0.246640727, 1.50140941,
)  # fmt: skip
_ERFINV_TAIL = (
    -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
    -0.0076224613, 0.00943887047, 1.00167406, 2.83297682,
)  # fmt: skip


def _probit(ctx: ConvertContext, y: str, dtype: str) -> str:
    """``sqrt(2) * erfinv(2y - 1)``: the standard normal quantile of ``y`` in (0, 1)."""

    def c(v: float) -> str:
        return ctx.const(np.array(v, dtype=dtype))

    def horner(w: str, coeffs: tuple[float, ...]) -> str:
        p = c(coeffs[0])
        for k in coeffs[1:]:
            p = ctx.emit1("add", [ctx.emit1("multiply", [p, w]), c(k)])
        return p

    x = ctx.emit1("subtract", [ctx.emit1("multiply", [y, c(2.0)]), c(1.0)])
    one_minus = ctx.emit1(
        "multiply", [ctx.emit1("subtract", [c(1.0), x]), ctx.emit1("add", [c(1.0), x])]
    )
    w = ctx.emit1("neg", [ctx.emit1("log", [one_minus])])
    central = horner(ctx.emit1("subtract", [w, c(2.5)]), _ERFINV_CENTRAL)
    tail = horner(ctx.emit1("subtract", [ctx.emit1("sqrt", [w]), c(3.0)]), _ERFINV_TAIL)
    p = ctx.emit1("where", [ctx.emit1("less", [w, c(5.0)]), central, tail])
    return ctx.emit1("multiply", [ctx.emit1("multiply", [p, x]), c(math.sqrt(2.0))])
