"""Schedule -> PrimFunc: loop nests for every stage, placed at their attach points.

For each stage the leaf axes become ``For`` loops in leaf order; each original
axis is rebuilt from the leaves through the split/fuse relations; a split that
does not divide its extent adds a ``likely`` guard around the body, which
``loop_partition`` later removes from all but the tail. A reduction writes its
identity just outside its outermost reduction loop. A stage computed at a
loop is emitted at the top of that loop's body, inside an ``Allocate`` of its
buffer. Reads of tensors become buffer loads, offset by the region the
producing stage computed at that point.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.errors import LoweringError, ScheduleError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.functor import Mutator, substitute
from ember.tir.schedule.bound import StageBounds, infer_bounds
from ember.tir.schedule.graph import check_attach_tree, inlined_body
from ember.tir.schedule.relations import Split, pass_up_values, split_needs_guard
from ember.tir.schedule.schedule import AttachKind, Schedule, Stage
from ember.tir.te.tensor import ComputeOp, IterKind, IterVar, PlaceholderOp, Tensor


class _Lowering:
    def __init__(self, sch: Schedule, args: Sequence[Tensor]) -> None:
        self.sch = sch
        self.bodies: dict[int, E.PrimExpr] = {}
        self.buffers: dict[int, Buffer] = {}  # id(stage) -> buffer
        self.params: list[Buffer] = []
        arg_stages: set[int] = set()
        for t in args:
            if not isinstance(t, Tensor):
                raise LoweringError(f"arguments must be tensors, got {t!r}")
            st = sch.stage_of(t.op)
            if st is None:
                raise LoweringError(f"argument '{t.name}' is not part of the schedule")
            if id(st) in self.buffers:
                raise LoweringError(f"tensor '{t.name}' is passed twice in the argument list")
            if st.attach is not AttachKind.ROOT:
                raise ScheduleError(
                    f"stage '{st.name}' is a function argument, so it must be computed at the "
                    "root (not inlined or computed at another stage)"
                )
            buf = decl_buffer(t.shape, t.dtype, name=t.name)
            self.buffers[id(st)] = buf
            self.params.append(buf)
            arg_stages.add(id(st))
        self.arg_stages = arg_stages
        for st in sch.stages:
            if st.is_output and id(st) not in arg_stages:
                raise LoweringError(f"output '{st.name}' is missing from the argument list")
            if isinstance(st.op, PlaceholderOp) and id(st) not in arg_stages:
                if self._is_read(st):
                    raise LoweringError(
                        f"input tensor '{st.name}' is read but not in the argument list"
                    )
        check_attach_tree(sch)
        self.bounds = infer_bounds(sch, self.bodies, arg_stages)
        for st in sch.stages:
            if id(st) in self.bounds and id(st) not in self.buffers:
                self.buffers[id(st)] = self._scratch_buffer(st)

    def _is_read(self, st: Stage) -> bool:
        for other in self.sch.stages:
            if isinstance(other.op, ComputeOp) and any(
                self.sch.stage_of(t.op) is st for t in other.op.input_tensors
            ):
                return True
        return False

    def _scratch_buffer(self, st: Stage) -> Buffer:
        sb = self.bounds[id(st)]
        shape = sb.alloc_shape
        strides: tuple[int, ...] = ()
        if st.storage_align_:
            acc, out = 1, []
            for d in reversed(range(len(shape))):
                if d in st.storage_align_ and d != len(shape) - 1:
                    factor, offset = st.storage_align_[d]
                    acc = acc + ((offset - acc) % factor)
                out.append(acc)
                acc *= shape[d]
            strides = tuple(reversed(out))
        return decl_buffer(shape, st.op.dtype, name=st.name, scope=st.scope, strides=strides)  # type: ignore[attr-defined]

    # -- statements ---------------------------------------------------------------------------
    def run(self) -> S.Stmt:
        roots = [
            st for st in self.sch.stages if st.attach is AttachKind.ROOT and id(st) in self.bounds
        ]
        body = S.seq(*[self.stage_nest(st) for st in roots])
        for st in reversed(roots):
            if id(st) not in self.arg_stages:
                body = S.Allocate(self.buffers[id(st)], body)
        return body

    def attached_at(self, parent: Stage, iv: IterVar) -> list[Stage]:
        return [
            st
            for st in self.sch.stages
            if st.attach is AttachKind.SCOPE and st.attach_stage is parent and st.attach_ivar is iv
        ]

    def stage_nest(self, st: Stage) -> S.Stmt:
        """The stage's loops in leaf order around its store, with attached stages inside."""
        sb = self.bounds[id(st)]
        update, init, first_red = self.stage_body(st, sb)
        leaves = st.leaf_iter_vars
        if init is not None:
            for iv in reversed(leaves[first_red:]):
                if iv.kind is not IterKind.REDUCE:
                    init = self.make_for(st, iv, sb, init)
        nest = self.with_attached(st, leaves[-1], update) if leaves else update
        for n in reversed(range(len(leaves))):
            nest = self.make_for(st, leaves[n], sb, nest)
            if n == first_red and init is not None:
                nest = S.seq(init, nest)
            if n > 0:
                nest = self.with_attached(st, leaves[n - 1], nest)
        return nest

    def stage_body(self, st: Stage, sb: StageBounds) -> tuple[S.Stmt, S.Stmt | None, int]:
        """The guarded update, the reduction's init (or None), and the index of the first
        reduction leaf: the init goes just outside that loop."""
        op = st.op
        assert isinstance(op, ComputeOp)
        body = inlined_body(self.sch, st, self.bodies)
        loads = _LoadRewriter(self)
        root_vars = {iv.var: sb.root_value[iv] for iv in list(op.axis) + list(op.reduce_axis)}
        buf = self.buffers[id(st)]
        store_idx = tuple(self.store_index(st, iv) for iv in op.axis)
        guards_all, guards_data = self.guards(st, sb)
        if not isinstance(body, E.Reduce):
            value = loads.visit(substitute(body, root_vars))
            update = _guard(S.BufferStore(buf, value, store_idx), guards_all)
            return update, None, len(st.leaf_iter_vars)
        src = loads.visit(substitute(body.source, root_vars))
        acc = E.BufferLoad(buf.dtype, buf, store_idx)
        update: S.Stmt = S.BufferStore(buf, body.combiner(acc, src), store_idx)
        if body.condition is not None:
            update = S.IfThenElse(loads.visit(substitute(body.condition, root_vars)), update)
        init = _guard(S.BufferStore(buf, body.combiner.identity, store_idx), guards_data)
        first_red = next(
            (n for n, iv in enumerate(st.leaf_iter_vars) if iv.kind is IterKind.REDUCE),
            len(st.leaf_iter_vars),
        )
        return _guard(update, guards_all), init, first_red

    def with_attached(self, st: Stage, iv: IterVar, inner: S.Stmt) -> S.Stmt:
        """Prepend the stages computed at loop ``iv`` of ``st`` to ``inner``."""
        attached = self.attached_at(st, iv)
        if not attached:
            return inner
        body = S.seq(*[self.stage_nest(p) for p in attached], inner)
        for p in reversed(attached):
            buf = self.buffers[id(p)]
            stages = max(p.pipeline_stages, 2 if p.double_buffered else 1)
            if stages > 1:  # a fact for the GPU's inject_pipeline; CPU code ignores it
                body = S.AttrStmt(buf.data, "pipeline_stages", E.const(stages), body)
            body = S.Allocate(buf, body)
        return body

    def make_for(self, st: Stage, iv: IterVar, sb: StageBounds, body: S.Stmt) -> S.Stmt:
        attr = st.iter_attrs.get(iv)
        kind = attr.kind if attr is not None else S.ForKind.SERIAL
        ext = sb.thread_extents.get(iv, sb.extents[iv])
        if kind is S.ForKind.VECTORIZED and not isinstance(ext, E.IntImm):
            raise st._error(
                f"vectorize: axis '{iv.name}' has a non-constant extent ({ext!r}); split it by "
                "a constant factor and vectorize the inner loop",
                iv,
            )
        tag = attr.bind.thread_tag if attr is not None and attr.bind is not None else ""
        ann = tuple(attr.pragmas) if attr is not None else ()
        if tag == "vthread":
            # A virtual thread is a share of one thread's work: its iterations run one after
            # another in the same thread, unrolled so each keeps its own registers.
            kind, tag = S.ForKind.UNROLLED, ""
        return S.For(iv.var, E.const(0, iv.var.dtype), ext, kind, body, tag, ann)

    def store_index(self, st: Stage, iv: IterVar) -> E.PrimExpr:
        sb = self.bounds[id(st)]
        return sb.root_value[iv] if sb.full else sb.root_offset[iv]

    def guards(self, st: Stage, sb: StageBounds) -> tuple[list[E.PrimExpr], list[E.PrimExpr]]:
        """Guards for every update, and the subset that also applies to a reduction's init.

        A split that does not divide its parent keeps the parent below its extent; a
        region that may reach past the tensor (an edge tile) keeps the axis inside it.
        """
        leaf_vals = {iv: iv.var for iv in st.leaf_iter_vars}
        values = pass_up_values(st.relations, leaf_vals, sb.extents)
        reduce_g: list[E.PrimExpr] = []
        data_g: list[E.PrimExpr] = []
        for rel in st.relations:
            if isinstance(rel, Split) and split_needs_guard(rel, sb.extents):
                cond = values[rel.parent] < sb.extents[rel.parent]
                (reduce_g if rel.parent.kind is IterKind.REDUCE else data_g).append(cond)
        for iv, full_ext in sb.thread_extents.items():
            if full_ext is not sb.extents[iv]:
                data_g.append(iv.var < sb.extents[iv])
        for iv, (below, above) in sb.domain_guards.items():
            value, dom = sb.root_value[iv], iv.dom
            assert dom is not None
            if below:
                data_g.append(value >= dom.min)
            if above:
                data_g.append(value < dom.min + dom.extent)
        return data_g + reduce_g, data_g


def _guard(body: S.Stmt, conds: list[E.PrimExpr]) -> S.Stmt:
    if not conds:
        return body
    cond = conds[0]
    for c in conds[1:]:
        cond = E.logical_and(cond, c)
    return S.IfThenElse(E.Call("bool", E.Intrinsic.LIKELY, (cond,)), body)


class _LoadRewriter(Mutator):
    """Tensor reads -> buffer reads, offset by the producer's computed region."""

    def __init__(self, lw: _Lowering) -> None:
        self.lw = lw

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        indices = tuple(self.visit(i) for i in e.indices)
        st = self.lw.sch.stage_of(e.producer.op)
        if st is None or id(st) not in self.lw.buffers:
            raise LoweringError(f"tensor '{e.producer.name}' has no buffer (is it an argument?)")
        buf = self.lw.buffers[id(st)]
        sb = self.lw.bounds.get(id(st))
        if sb is not None and not sb.full:
            op = st.op
            assert isinstance(op, ComputeOp)
            indices = tuple(i - sb.root_min[iv] for i, iv in zip(indices, op.axis))
        return E.BufferLoad(buf.dtype, buf, indices)


def schedule_to_primfunc(sch: Schedule, args: Sequence[Tensor], name: str) -> S.PrimFunc:
    """Loop nests for the whole schedule, before any optimisation pass."""
    lw = _Lowering(sch, args)
    body = lw.run()
    return S.PrimFunc(name, tuple(lw.params), body, (("global_symbol", name),))
