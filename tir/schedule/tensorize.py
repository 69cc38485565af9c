"""Lowering of ``s[C].tensorize(axis, intrin)``: a loop nest replaced by a tensor intrinsic.

Called by :mod:`.lower` for a stage with a tensorized leaf. The leaves from that
axis inward form the region the intrinsic computes. It is checked as TVM checks it:
the region of each trailing data axis (and reduce axis) must have the extent of the
intrinsic's matching axis, the leading ones extent 1; the stage's reduction, with its
axes set to the region's start plus the intrinsic's axes and each tensor read
rewritten relative to the region it reads, must equal the intrinsic's computation
(after simplification). A mismatch is a :class:`ScheduleError` that prints both.

Each buffer of the intrinsic is then bound to the real buffer: dtype and scope
checked (a buffer declared in a scope other than ``global`` must be bound to one in
that scope), its declared strides equal to the real buffer's trailing strides or
symbolic (their values substituted), its ``elem_offset`` variable given the flat
offset of the region's first element and its pointer the real one; its accesses
become accesses of the real buffer, shifted by the region's start.

A reduction whose reduce loops all lie inside the region takes the intrinsic's
body. One with reduce loops outside takes ``update`` in the nest and ``reset`` where
the stage's init would go (just outside its first reduce loop); an intrinsic without
``reset`` runs its body on the first iteration of the outer reduce loops and
``update`` on the others (TVM's two routes).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ember.errors import ScheduleError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith.analyzer import Analyzer
from ember.tir.buffer import Buffer
from ember.tir.functor import Mutator, fields_of, post_order_visit, substitute, uses_var
from ember.tir.printer import expr_to_str
from ember.tir.schedule.graph import inlined_bodies
from ember.tir.schedule.load_rewriter import LoadRewriter
from ember.tir.structural import structural_equal
from ember.tir.te.tensor import ComputeOp, IterKind, IterVar, Tensor
from ember.tir.te.tensor_intrin import TensorIntrin

if TYPE_CHECKING:
    from ember.tir.schedule.bound import StageBounds
    from ember.tir.schedule.lower import _Lowering
    from ember.tir.schedule.schedule import Stage


def _const(ana: Analyzer, e: E.PrimExpr) -> int | None:
    v = E.const_value(ana.simplify(e))
    return int(v) if v is not None else None


def _region(st: Stage, sb: StageBounds, inner: list[IterVar]) -> dict[IterVar, tuple[Any, int]]:
    """For every root axis: (start of the region as an expression of the outer loops,
    extent inside the region)."""
    op = st.op
    assert isinstance(op, ComputeOp)
    ana = Analyzer()
    zero = {iv.var: E.const(0, iv.var.dtype) for iv in inner}
    last = {iv.var: sb.extents[iv] - 1 for iv in inner}
    out: dict[IterVar, tuple[Any, int]] = {}
    points = 1
    for iv in inner:
        n = _const(ana, sb.extents[iv])
        if n is None:
            raise st._error(f"tensorize: loop '{iv.name}' has a non-constant extent", iv)
        points *= n
    covered = 1
    for iv in (*op.axis, *op.reduce_axis):
        value = sb.root_value[iv]
        start = ana.simplify(substitute(value, zero))
        ext = _const(ana, substitute(value, last) - start + 1)
        if ext is None or ext < 1:
            raise st._error(f"tensorize: the region of axis '{iv.name}' is not contiguous")
        out[iv] = (start, ext)
        covered *= ext
    if covered != points:
        raise st._error(
            "tensorize: the loops inside the tensorized axis do not cover a dense block of "
            "the stage's axes (reorder so that each axis's inner part is inside)"
        )
    return out


def _match_axes(
    st: Stage, ours: tuple[IterVar, ...], theirs: tuple[IterVar, ...], region: dict, what: str
) -> dict[E.Var, E.PrimExpr]:
    """Our trailing axes to the intrinsic's ones (start + its var), the leading to their start."""
    if len(ours) < len(theirs):
        raise st._error(
            f"tensorize: the intrinsic has {len(theirs)} {what} axes, the stage {len(ours)}"
        )
    vmap: dict[E.Var, E.PrimExpr] = {}
    lead = len(ours) - len(theirs)
    for n, iv in enumerate(ours):
        start, ext = region[iv]
        if n < lead:
            if ext != 1:
                raise st._error(
                    f"tensorize: {what} axis '{iv.name}' runs {ext} iterations inside the "
                    "tensorized loops, but the intrinsic has no axis for it"
                )
            vmap[iv.var] = start
            continue
        other = theirs[n - lead]
        want = E.const_value(other.dom.extent)
        if want != ext:
            raise st._error(
                f"tensorize: {what} axis '{iv.name}' runs {ext} iterations inside the "
                f"tensorized loops, the intrinsic's '{other.name}' {want}"
            )
        vmap[iv.var] = start + other.var
    return vmap


def _loads_in_order(e: E.PrimExpr) -> list[Tensor]:
    seen: list[Tensor] = []

    def visit(n: Any) -> None:
        if isinstance(n, E.ProducerLoad) and not any(t is n.producer for t in seen):
            seen.append(n.producer)

    post_order_visit(e, visit, once=True)
    return seen


class _Relative(Mutator):
    """Reads of the stage's tensors -> reads of the intrinsic's, relative to the region."""

    def __init__(self, pairs: dict[int, Tensor], ivars: list[E.Var], ana: Analyzer) -> None:
        self.pairs, self.ana = pairs, ana
        self.zero = {v: E.const(0, v.dtype) for v in ivars}
        self.starts: dict[int, tuple[Tensor, tuple[E.PrimExpr, ...]]] = {}
        self.bad: str | None = None
        self.scalars: dict[E.Var, E.PrimExpr] = {}  # the intrinsic's scalar_params' values

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        theirs = self.pairs[id(e.producer)]
        start = tuple(self.ana.simplify(substitute(i, self.zero)) for i in e.indices)
        self.starts.setdefault(id(e.producer), (e.producer, start))
        rel = [self.ana.simplify(i - s) for i, s in zip(e.indices, start)]
        lead = len(rel) - len(theirs.shape)
        if lead < 0 or any(not E.is_const_int(r, 0) for r in rel[:lead]):
            self.bad = f"the read of '{e.producer.name}' does not fit '{theirs.name}'"
            return e
        return E.ProducerLoad(e.dtype, theirs, tuple(rel[lead:]))


def _check_match(st: Stage, intrin: TensorIntrin, mine: E.PrimExpr, vmap: dict) -> _Relative:
    """Compare the stage's computation in the region with the intrinsic's; raise if not equal."""
    theirs = intrin.op.body
    ivs = [*intrin.op.axis, *intrin.op.reduce_axis]
    ana = Analyzer()
    for iv in ivs:
        ana.bind(iv.var, iv.dom)
    if isinstance(mine, E.Reduce) != isinstance(theirs, E.Reduce):
        raise _mismatch(st, intrin, mine, "one is a reduction and the other is not")
    src_m = mine.source if isinstance(mine, E.Reduce) else mine
    src_t = theirs.source if isinstance(theirs, E.Reduce) else theirs
    src_m = substitute(src_m, vmap)
    ours_t, their_t = _loads_in_order(src_m), _loads_in_order(src_t)
    if len(ours_t) != len(their_t):
        raise _mismatch(st, intrin, mine, f"{len(ours_t)} tensors read vs {len(their_t)}")
    rel = _Relative({id(a): b for a, b in zip(ours_t, their_t)}, [iv.var for iv in ivs], ana)
    got = ana.simplify(rel.visit(src_m))
    if rel.bad is not None:
        raise _mismatch(st, intrin, mine, rel.bad)
    rel.scalars = {}
    if intrin.scalar_params:
        if not _match_scalars(ana.simplify(src_t), got, set(intrin.scalar_params), rel.scalars):
            raise _mismatch(st, intrin, got, "the computations differ")
        inside = {iv.var for iv in ivs}
        for v, value in rel.scalars.items():
            if uses_var(value, lambda x: x in inside):
                raise _mismatch(
                    st, intrin, got, f"scalar parameter '{v.name}' = {expr_to_str(value)} "
                    "changes inside the tensorized region",
                )  # fmt: skip
    elif not structural_equal(got, ana.simplify(src_t)):
        raise _mismatch(st, intrin, got, "the computations differ")
    if isinstance(mine, E.Reduce):
        assert isinstance(theirs, E.Reduce)
        a, b = E.Var("a", mine.dtype), E.Var("b", mine.dtype)
        if mine.init is not None or not structural_equal(
            mine.combine((a,), (b,))[0], theirs.combine((a,), (b,))[0]
        ):
            raise _mismatch(st, intrin, mine, "the reductions combine differently")
    return rel


def _match_scalars(pattern: Any, expr: Any, params: set[E.Var], bound: dict) -> bool:
    """Whether ``expr`` is ``pattern`` with each variable of ``params`` standing for one
    expression (the same wherever it appears), recording those in ``bound``."""
    if isinstance(pattern, E.Var):
        if pattern not in params:
            return pattern is expr
        if pattern in bound:
            return structural_equal(bound[pattern], expr)
        if not isinstance(expr, E.PrimExpr) or expr.dtype != pattern.dtype:
            return False
        bound[pattern] = expr
        return True
    if type(pattern) is not type(expr):
        return False
    if not isinstance(pattern, (E.PrimExpr, S.Stmt)):
        return bool(pattern == expr)
    for name in fields_of(type(pattern)):
        a, b = getattr(pattern, name), getattr(expr, name)
        if isinstance(a, tuple) and isinstance(b, tuple):
            if len(a) != len(b) or not all(
                _match_scalars(x, y, params, bound) for x, y in zip(a, b)
            ):
                return False
        elif isinstance(a, (E.PrimExpr, S.Stmt)):
            if not _match_scalars(a, b, params, bound):
                return False
        elif not (a is b or a == b):
            return False
    return True


def _mismatch(st: Stage, intrin: TensorIntrin, mine: E.PrimExpr, why: str) -> ScheduleError:
    return st._error(
        f"tensorize with '{intrin.name}': {why}\n  stage computes:     {expr_to_str(mine)}\n"
        f"  intrinsic computes: {expr_to_str(intrin.op.body)}"
    )


def _bind(st: Stage, decl: Buffer, real: Buffer, start: tuple, vmap: dict) -> None:
    """Check that ``decl`` can be ``real`` at ``start`` (dtype, scope, strides); fill ``vmap``
    with the values of ``decl``'s symbolic strides and offset, and its pointer."""
    ana = Analyzer()
    strides = real.row_major_strides()
    offset: E.PrimExpr = E.const(0, "int32")
    for idx, stride in zip(start, strides):
        offset = offset + idx * stride
    offset = ana.simplify(offset)
    mine = strides[len(strides) - decl.ndim :]
    if decl.dtype != real.dtype or decl.scope not in ("global", real.scope):
        raise st._error(
            f"tensorize: intrinsic buffer '{decl.name}' is {decl.dtype} in '{decl.scope}', "
            f"the tensor's buffer {real.dtype} in '{real.scope}'"
        )
    declared = decl.strides or decl.row_major_strides()
    for d, (want, have) in enumerate(zip(declared, mine)):
        if isinstance(want, E.Var):
            vmap[want] = have
        elif not ana.can_prove_equal(want, have):
            raise st._error(
                f"tensorize: intrinsic buffer '{decl.name}' has stride {expr_to_str(want)} in "
                f"dimension {d}, the tensor '{real.name}' {expr_to_str(have)}; declare it with "
                "symbolic strides (binds=) to take any"
            )
    if isinstance(decl.elem_offset, E.Var):
        vmap[decl.elem_offset] = offset
    elif not ana.can_prove_equal(decl.elem_offset or E.const(0), offset):
        raise st._error(
            f"tensorize: intrinsic buffer '{decl.name}' starts at a fixed offset, but the "
            f"region of '{real.name}' starts at {expr_to_str(offset)}"
        )
    vmap[decl.data] = real.data


class _Rebind(Mutator):
    """Accesses of the intrinsic's buffers -> accesses of the real ones: the trailing
    indices shifted by the region's start, the leading ones at it. (Not a view buffer with
    an ``elem_offset``: later passes substitute loop variables in statements, not inside
    buffers.)"""

    def __init__(self, views: dict[int, tuple[Buffer, tuple]], vmap: dict) -> None:
        self.views, self.vmap = views, vmap

    def visit_Var(self, v: E.Var) -> E.PrimExpr:
        return self.vmap.get(v, v)

    def _target(self, buf: Buffer, indices: tuple) -> tuple[Buffer, tuple]:
        idx = tuple(self.visit(i) for i in indices)
        if id(buf) not in self.views:
            return buf, idx
        real, start = self.views[id(buf)]
        lead = len(start) - len(idx)
        return real, (*start[:lead], *(s + i for s, i in zip(start[lead:], idx)))

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        buf, idx = self._target(e.buffer, e.indices)
        return E.BufferLoad(e.dtype, buf, idx)

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        buf, idx = self._target(s.buffer, s.indices)
        return S.BufferStore(buf, self.visit(s.value), idx)


def tensorize_parts(
    lw: _Lowering, st: Stage, sb: StageBounds, pos: int, intrin: TensorIntrin
) -> tuple[S.Stmt | None, S.Stmt | None, S.Stmt | None]:
    """The intrinsic's (body, reset, update), bound to the stage's buffers at the region
    of the loops from leaf ``pos`` inward."""
    op = st.op
    assert isinstance(op, ComputeOp)
    if op.num_outputs != 1:
        raise st._error("tensorize: a multi-output stage cannot be tensorized")
    inner = st.leaf_iter_vars[pos:]
    region = _region(st, sb, inner)
    vmap = _match_axes(st, op.axis, intrin.op.axis, region, "data")
    vmap.update(_match_axes(st, op.reduce_axis, intrin.op.reduce_axis, region, "reduce"))
    rel = _check_match(st, intrin, inlined_bodies(lw.sch, st, lw.bodies)[0], vmap)
    loads = LoadRewriter(lw)
    views: dict[int, tuple[Buffer, tuple]] = {}
    bind_map: dict[E.Var, E.PrimExpr] = {}
    for n, t in enumerate(intrin.inputs):
        tensor, start = _start_of(rel, t)
        load = loads.visit(E.ProducerLoad(tensor.dtype, tensor, start))
        if not isinstance(load, E.BufferLoad):
            raise st._error(f"tensorize: '{tensor.name}' is not read from a buffer")
        decl = intrin.buffers[n]
        _bind(st, decl, load.buffer, load.indices, bind_map)
        views[id(decl)] = (load.buffer, load.indices)
    zero = {iv.var: E.const(0, iv.var.dtype) for iv in inner}
    out_start = tuple(substitute(lw.store_index(st, iv), zero) for iv in op.axis)
    out = lw.buffer_of(st, 0)
    assert out is not None
    _bind(st, intrin.buffers[-1], out, out_start, bind_map)
    views[id(intrin.buffers[-1])] = (out, out_start)
    rebind = _Rebind(views, bind_map)
    parts = (intrin.body, intrin.reduce_init, intrin.reduce_update)
    scalars = {v: loads.visit(e) for v, e in rel.scalars.items()}  # their tensor reads too
    return tuple(  # type: ignore[return-value]
        None if p is None else substitute(rebind.visit(p), scalars) for p in parts
    )


def _start_of(rel: _Relative, t: Tensor) -> tuple[Tensor, tuple[E.PrimExpr, ...]]:
    for key, theirs in rel.pairs.items():
        if theirs is t:
            return rel.starts[key]
    raise ScheduleError(f"tensorize: the intrinsic's input '{t.name}' is never read")


def reduce_outside(st: Stage, sb: StageBounds, pos: int) -> list[IterVar]:
    """The stage's reduce loops outside the tensorized region (but those of one iteration)."""
    return [
        iv
        for iv in st.leaf_iter_vars[:pos]
        if iv.kind is IterKind.REDUCE and not E.is_const_int(sb.extents[iv], 1)
    ]


def tensorized_leaf(st: Stage) -> int | None:
    """The position of the stage's tensorized leaf, or None."""
    for n, iv in enumerate(st.leaf_iter_vars):
        attr = st.iter_attrs.get(iv)
        if attr is not None and attr.tensor_intrin is not None:
            return n
    return None


def tensorized_stage(
    lw: _Lowering, st: Stage, sb: StageBounds, pos: int, init: S.Stmt | None
) -> tuple[S.Stmt, S.Stmt | None, list[IterVar]]:
    """The update and init of a stage whose loops from leaf ``pos`` inward are a tensor
    intrinsic (see :mod:`.tensorize`), and its remaining loops."""
    intrin = st.iter_attrs[st.leaf_iter_vars[pos]].tensor_intrin
    for iv in st.leaf_iter_vars[pos:-1]:
        if lw.attached_at(st, iv):
            raise st._error(f"tensorize: a stage is computed at '{iv.name}', inside the region")
    body, reset, update = tensorize_parts(lw, st, sb, pos, intrin)
    all_g, data_g = lw.guards(st, sb)
    inner = {iv.var for iv in st.leaf_iter_vars[pos:]}
    if any(uses_var(g, lambda v: v in inner) for g in all_g):
        raise st._error(
            "tensorize: a split inside the tensorized loops does not divide its axis; "
            "pad the tensors to a multiple of the intrinsic's shape"
        )
    outer_red = reduce_outside(st, sb, pos)
    if init is None or not outer_red:
        if body is None:
            raise st._error(f"tensorize: '{intrin.name}' has no body, only an update")
        return lw.guarded(body, all_g), None, st.leaf_iter_vars[:pos]
    if update is None:
        raise st._error(
            f"tensorize: a reduce loop is outside the tensorized region, and "
            f"'{intrin.name}' has no reduce_update"
        )
    if reset is not None:
        return lw.guarded(update, all_g), lw.guarded(reset, data_g), st.leaf_iter_vars[:pos]
    if body is None:
        raise st._error(f"tensorize: '{intrin.name}' has neither body nor reset")
    first = functools.reduce(E.logical_and, [iv.var == 0 for iv in outer_red])
    return lw.guarded(S.IfThenElse(first, body, update), all_g), None, st.leaf_iter_vars[:pos]
