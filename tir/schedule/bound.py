"""Bound inference: the region of each stage that must be computed where it is placed.

An output is computed over its whole shape. Any other stage is computed over
the union of the regions its consumers read, evaluated with the consumers'
loops that lie *inside* the stage's attach point relaxed to their full ranges
and the loops *outside* it kept as symbols. So a cache computed at ``k_outer``
of a matmul covers one tile, expressed in terms of ``k_outer``. Regions are
clipped to the tensor's shape, which keeps guarded tail iterations from
reading out of bounds. A buffer for the stage is sized by the constant upper
bound of each region's extent.

A ``local`` stage (or a ``wmma`` fragment) that reads only on-chip stages (a GPU
thread's register tile) is not clipped: at an edge tile it computes its whole constant
region, the part outside the tensor from on-chip values nobody wrote, which
stay in registers and are never stored. Its reads stay inside the producers'
allocations, which cover the same unclipped region, and its loops keep constant
trip counts, so the tile stays in registers instead of local memory.

GPU scopes widen the relaxation: a ``shared`` stage serves every thread of its
block, so thread-index loops outside its attach point are relaxed too; a ``warp``
stage serves the lanes of its warp (``threadIdx.x``); ``local`` stages and ``wmma``
fragments relax none (:func:`ember.tir.scopes.thread_rank_relaxed`). A fragment,
like a register tile, is computed whole. A stage
that exchanges values between lanes (a warp shuffle) must run in every lane
that takes part, not only in those whose results are read: an axis it binds
directly to a ``threadIdx`` axis is computed over its whole range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ember.errors import LoweringError, ScheduleError
from ember.tir import expr as E
from ember.tir.arith import Analyzer, IntSet, int_set
from ember.tir.functor import post_order_visit, substitute, uses_var
from ember.tir.schedule.attach import AttachKind
from ember.tir.schedule.graph import inlined_bodies, loop_path, outer_path, producer_stages
from ember.tir.schedule.relations import pass_down_extents, pass_up_values
from ember.tir.scopes import ON_CHIP_SCOPES, is_fragment, thread_rank_relaxed
from ember.tir.te.tensor import ComputeOp, IterVar

if TYPE_CHECKING:
    from ember.tir.schedule.schedule import Schedule, Stage


@dataclass
class StageBounds:
    """Where a stage's root axes start (possibly symbolic) and how far every axis runs."""

    root_min: dict[IterVar, E.PrimExpr]
    extents: dict[IterVar, E.PrimExpr]  # root and derived axes; every loop starts at 0
    alloc_shape: tuple[int | E.PrimExpr, ...] = ()  # an expression: a symbolic size
    full: bool = False  # computed over the whole tensor (region min is 0)
    root_value: dict[IterVar, E.PrimExpr] = field(default_factory=dict)
    root_offset: dict[IterVar, E.PrimExpr] = field(default_factory=dict)  # value - region min
    # axes whose region may leave the tensor: (below its start, beyond its end)
    domain_guards: dict[IterVar, tuple[bool, bool]] = field(default_factory=dict)
    # leaves bound to a thread axis with its own range: the loop runs that many
    # iterations, and only the first ``extents[leaf]`` do the work
    thread_extents: dict[IterVar, E.PrimExpr] = field(default_factory=dict)


def infer_bounds(
    sch: Schedule,
    bodies: dict[int, E.PrimExpr],
    full_stages: set[int],
    seeds: dict[int, StageBounds] | None = None,
    fixed: dict[int, tuple[dict[IterVar, E.PrimExpr], dict[IterVar, E.PrimExpr]]] | None = None,
) -> dict[int, StageBounds]:
    """Bounds of every computed stage, keyed by ``id(stage)``; consumers are done first.

    ``seeds`` are the bounds of stages that are not computes (a scan's time loop), and
    ``fixed`` the root region (min, extent per axis) of stages whose owner decides what
    they compute (a scan's update: one row per time step).
    """
    bounds: dict[int, StageBounds] = dict(seeds or {})
    fixed = fixed or {}
    consumers = _consumers(sch, bodies)
    for st in reversed(sch.stages):
        if not isinstance(st.op, ComputeOp) or st.attach is AttachKind.INLINE:
            continue
        op = st.op
        readers = consumers.get(id(st), [])
        root_arg = id(st) in full_stages and st.attach is AttachKind.ROOT
        guards: dict[IterVar, tuple[bool, bool]]
        if id(st) in fixed:
            root_min, root_ext = (dict(d) for d in fixed[id(st)])
            full, guards = False, {}
        elif root_arg or st.is_output or not readers:
            root_min = {iv: iv.dom.min for iv in op.axis}  # type: ignore[union-attr]
            root_ext = {iv: iv.dom.extent for iv in op.axis}  # type: ignore[union-attr]
            full, guards = True, {}
        else:
            root_min, root_ext, guards = _region(sch, st, readers, bodies, bounds)
            full = False
            own = inlined_bodies(sch, st, bodies)
            tile = st.scope == "local" or is_fragment(st.scope)
            if tile and all(_reads_only_on_chip(sch, b) for b in own):
                guards = {}  # a register tile computed whole: see the module docstring
            if any(_shuffles_lanes(b) for b in own):
                _whole_thread_axes(st, root_min, root_ext, guards)
        for rv in op.reduce_axis:
            root_min[rv] = rv.dom.min  # type: ignore[union-attr]
            root_ext[rv] = rv.dom.extent  # type: ignore[union-attr]
        sb = _stage_bounds(st, root_min, root_ext, full, guards)
        if _reduce_dom_uses_axes(op):
            # a reduction range written in the output's index (TVM's test_loop_dep_reduce):
            # its loop runs to the index's value at that point, not to a leaf variable's
            vmap = {iv.var: sb.root_value[iv] for iv in op.axis}
            for rv in op.reduce_axis:
                root_min[rv] = substitute(rv.dom.min, vmap)  # type: ignore[union-attr]
                root_ext[rv] = substitute(rv.dom.extent, vmap)  # type: ignore[union-attr]
            sb = _stage_bounds(st, root_min, root_ext, full, guards)
        if id(st) not in full_stages:  # arguments live in the caller's memory
            sb.alloc_shape = _alloc_shape(st, sb, bounds)
        bounds[id(st)] = sb
    return bounds


def _stage_bounds(
    st: Stage,
    root_min: dict[IterVar, E.PrimExpr],
    root_ext: dict[IterVar, E.PrimExpr],
    full: bool,
    guards: dict[IterVar, tuple[bool, bool]],
) -> StageBounds:
    """Leaf extents, thread extents and every root axis's value from the root region."""
    op = st.op
    assert isinstance(op, ComputeOp)
    extents = pass_down_extents(st.relations, root_ext)
    sb = StageBounds(root_min, extents, full=full, domain_guards=guards)
    sb.thread_extents = _thread_extents(st, extents)
    leaf_vals = {iv: iv.var for iv in st.leaf_iter_vars}
    offsets = pass_up_values(st.relations, leaf_vals, extents)
    sb.root_offset = offsets
    sb.root_value = {
        iv: _add(root_min[iv], offsets[iv]) for iv in list(op.axis) + list(op.reduce_axis)
    }
    return sb


def _reduce_dom_uses_axes(op: ComputeOp) -> bool:
    data = {iv.var for iv in op.axis}
    return any(
        uses_var(rv.dom.min, data.__contains__) or uses_var(rv.dom.extent, data.__contains__)
        for rv in op.reduce_axis
        if rv.dom is not None
    )


def _add(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    return b if E.is_const_int(a, 0) else a + b


def _consumers(sch: Schedule, bodies: dict[int, E.PrimExpr]) -> dict[int, list[Stage]]:
    out: dict[int, list[Stage]] = {}
    for st in sch.stages:
        if isinstance(st.op, ComputeOp) and st.attach is not AttachKind.INLINE:
            for p in producer_stages(sch, inlined_bodies(sch, st, bodies)):
                out.setdefault(id(p), []).append(st)
    return out


def _relaxed_loops(producer: Stage, consumer: Stage) -> list[tuple[Stage, IterVar]]:
    outer = outer_path(producer)
    path = loop_path(consumer)
    if len(outer) > len(path) or any(
        a[0] is not b[0] or a[1] is not b[1] for a, b in zip(outer, path)
    ):
        where = f"axis '{producer.attach_ivar.name}' of stage '{producer.attach_stage.name}'"  # type: ignore[union-attr]
        raise ScheduleError(
            f"stage '{producer.name}' is computed inside {where}, but stage '{consumer.name}' "
            "reads it outside that loop; compute it at a loop that encloses every reader"
        )
    relaxed = path[len(outer) :]
    for st, iv in outer:
        attr = st.iter_attrs.get(iv)
        tag = attr.bind.thread_tag if attr is not None and attr.bind is not None else ""
        if not tag:
            continue
        if thread_rank_relaxed(producer.scope, tag):
            relaxed.append((st, iv))
    return relaxed


def _region(
    sch: Schedule,
    st: Stage,
    readers: list[Stage],
    bodies: dict[int, E.PrimExpr],
    bounds: dict[int, StageBounds],
) -> tuple[dict[IterVar, E.PrimExpr], dict[IterVar, E.PrimExpr], dict[IterVar, tuple[bool, bool]]]:
    """The region consumers read, unclipped (constant extents vectorize), with the sides
    on which it may leave the tensor's domain; those sides get guards in the loop nest."""
    op = st.op
    assert isinstance(op, ComputeOp)
    dims: list[IntSet | None] = [None] * len(op.axis)
    for reader in readers:
        relaxed = _relaxed_loops(st, reader)
        dom_map = {
            iv.var: IntSet.interval(E.const(0, iv.var.dtype), bounds[id(owner)].extents[iv] - 1)
            for owner, iv in relaxed
        }
        rb = bounds[id(reader)]
        rop = reader.op
        assert isinstance(rop, ComputeOp)
        vmap = {iv.var: rb.root_value[iv] for iv in list(rop.axis) + list(rop.reduce_axis)}
        loads = [x for b in inlined_bodies(sch, reader, bodies) for x in _loads_of(b, sch, st)]
        for load in loads:
            for d, index in enumerate(load.indices):
                s = _relax(substitute(index, vmap), dom_map)
                dims[d] = s if dims[d] is None else dims[d].union(s)  # type: ignore[union-attr]
    ana = Analyzer()
    for owner, iv in outer_path(st):
        ana.bind(iv.var, E.Range(E.const(0), bounds[id(owner)].extents[iv]))
    root_min: dict[IterVar, E.PrimExpr] = {}
    root_ext: dict[IterVar, E.PrimExpr] = {}
    guards: dict[IterVar, tuple[bool, bool]] = {}
    for d, iv in enumerate(op.axis):
        s = dims[d]
        full_lo, full_ext = iv.dom.min, iv.dom.extent  # type: ignore[union-attr]
        if s is None or s.is_everything():
            root_min[iv], root_ext[iv] = full_lo, full_ext
            continue
        lo, hi = ana.simplify(s.min), ana.simplify(s.max)
        ext = ana.simplify(hi - lo + 1)
        if not isinstance(ext, E.IntImm):
            # A symbolic extent (a clipped edge tile): take the full range instead when
            # the bound cannot be made constant.
            _, ub = ana.const_int_bound(ext)
            if isinstance(ub, int) and ub < 2**40:
                ext = E.const(int(ub), ext.dtype)
        root_min[iv], root_ext[iv] = lo, ext
        below = not ana.can_prove(lo >= full_lo)
        above = not ana.can_prove(lo + ext <= full_lo + full_ext)
        if below or above:
            guards[iv] = (below, above)
    return root_min, root_ext, guards


def _reads_only_on_chip(sch: Schedule, body: E.PrimExpr) -> bool:
    """Does ``body`` read nothing but shared and local stages (no tensor in global memory)?"""
    ok = True

    def visit(node: Any) -> None:
        nonlocal ok
        if isinstance(node, E.ProducerLoad):
            producer = sch.stage_of(node.producer.op)
            ok = ok and producer is not None and producer.scope in ON_CHIP_SCOPES

    post_order_visit(body, visit, once=True)
    return ok


def _shuffles_lanes(body: E.PrimExpr) -> bool:
    found = False

    def visit(node: Any) -> None:
        nonlocal found
        found = found or (isinstance(node, E.Call) and node.op in E.WARP_SHUFFLES)

    post_order_visit(body, visit, once=True)
    return found


def _whole_thread_axes(
    st: Stage,
    root_min: dict[IterVar, E.PrimExpr],
    root_ext: dict[IterVar, E.PrimExpr],
    guards: dict[IterVar, tuple[bool, bool]],
) -> None:
    """Widen the data axes bound to ``threadIdx`` to their domain: a full-mask shuffle
    needs each lane of the warp, so none may be guarded off for computing unread values."""
    for iv in cast(ComputeOp, st.op).axis:  # only computes have bounds to widen
        attr = st.iter_attrs.get(iv)
        if attr is None or attr.bind is None or not attr.bind.thread_tag.startswith("threadIdx"):
            continue
        root_min[iv], root_ext[iv] = iv.dom.min, iv.dom.extent  # type: ignore[union-attr]
        guards.pop(iv, None)


def _relax(expr: E.PrimExpr, dom_map: dict[E.Var, IntSet]) -> IntSet:
    """Interval of ``expr`` with ``dom_map``'s vars relaxed, also inside symbolic bounds."""
    s = int_set(expr, dom_map)
    for _ in range(8):
        if s.is_everything() or not (_mentions(s.min, dom_map) or _mentions(s.max, dom_map)):
            return s
        lo = int_set(s.min, dom_map)
        hi = int_set(s.max, dom_map)
        s = IntSet.interval(lo.min, hi.max)
    return s


def _mentions(e: E.PrimExpr, dom_map: dict[E.Var, IntSet]) -> bool:
    return uses_var(e, lambda v: v in dom_map)


def _loads_of(body: E.PrimExpr, sch: Schedule, producer: Stage) -> list[E.ProducerLoad]:
    out: list[E.ProducerLoad] = []

    def visit(node: Any) -> None:
        if isinstance(node, E.ProducerLoad) and sch.stage_of(node.producer.op) is producer:
            out.append(node)

    post_order_visit(body, visit, once=True)
    return out


def _mentions_any(e: E.PrimExpr, names: set[E.Var]) -> bool:
    return uses_var(e, lambda v: v in names)


def _alloc_shape(
    st: Stage, sb: StageBounds, bounds: dict[int, StageBounds]
) -> tuple[int | E.PrimExpr, ...]:
    op = st.op
    assert isinstance(op, ComputeOp)
    ana = Analyzer()
    for owner, iv in outer_path(st):
        ana.bind(iv.var, E.Range(E.const(0), bounds[id(owner)].extents[iv]))
    shape: list[int | E.PrimExpr] = []
    loop_vars = {iv.var for _, iv in outer_path(st)}
    for iv in op.axis:
        ext = sb.extents[iv]
        lo, hi = ana.const_int_bound(ext)
        if (not isinstance(hi, int) or hi > 2**40) and not _mentions_any(ext, loop_vars):
            # a symbolic size (``n``): allocated at run time with that many elements
            shape.append(ana.simplify(ext))
            continue
        if not isinstance(hi, int) or hi > 2**40:
            raise LoweringError(
                f"stage '{st.name}': cannot bound the extent of axis '{iv.name}' ({ext!r}) by a "
                "constant, so its buffer cannot be allocated; give the tensor a static shape or "
                "compute it at a loop whose region is bounded"
            )
        shape.append(max(int(hi), 1))
    return tuple(shape)


def _thread_extents(st: Stage, extents: dict[IterVar, E.PrimExpr]) -> dict[IterVar, E.PrimExpr]:
    """Loop extents fixed by ``bind`` to a thread axis made with a range (``thread_axis((0, 256),
    "threadIdx.x")``), as in TVM: a stage whose region is smaller still spans every thread."""
    out: dict[IterVar, E.PrimExpr] = {}
    for iv in st.leaf_iter_vars:
        attr = st.iter_attrs.get(iv)
        dom = attr.bind.dom if attr is not None and attr.bind is not None else None
        if dom is None:
            continue
        need, have = extents[iv], dom.extent
        if isinstance(need, E.IntImm) and isinstance(have, E.IntImm) and have.value < need.value:
            raise LoweringError(
                f"stage '{st.name}': axis '{iv.name}' needs {need.value} iterations but is bound "
                f"to {attr.bind.thread_tag} with range {have.value}"  # type: ignore[union-attr]
            )
        out[iv] = have
    return out
