"""Schedule -> PrimFunc: loop nests for every stage, placed at their attach points.

For each stage the leaf axes become ``For`` loops in leaf order; each original
axis is rebuilt from the leaves through the split/fuse relations; a split that
does not divide its extent adds a ``likely`` guard around the body, which
``loop_partition`` later removes from all but the tail. A reduction writes its
identity just outside its outermost reduction loop; one whose reduction axis is
bound to threads is a cross-thread reduction (:mod:`.cross_thread`). A stage computed at a
loop is emitted at the top of that loop's body, inside an ``Allocate`` of its
buffer. Reads of tensors become buffer loads, offset by the region the
producing stage computed at that point.

The argument list is taken as TVM takes it: tensors and scalar ``te.var``s
(sizes, split factors; a float one becomes a 0-d input) in call order; an
intermediate or an output left out is allocated inside the function, an input
the schedule never reads is still a parameter, a stage whose tensor is an
argument may be computed at another stage's loop, writing its parameter buffer
there, and one that is inlined leaves its parameter unwritten (with a warning).
A tensor of a vector dtype (``float32x4``) gets a buffer of its elements with an
innermost lane dimension (:mod:`.lower_params` declares the buffers and parameters).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from ember.errors import LoweringError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import substitute
from ember.tir.schedule.bound import StageBounds, infer_bounds
from ember.tir.schedule.cross_thread import cross_thread_nest, thread_reduce_leaves
from ember.tir.schedule.extern_lower import extern_bounds, extern_nest
from ember.tir.schedule.graph import check_attach_tree, inlined_bodies
from ember.tir.schedule.load_rewriter import LoadRewriter, lane_index
from ember.tir.schedule.lower_params import (
    box_float_scalars,
    decl_lanes,
    num_outputs,
    scratch_buffer,
    symbolic_split_amounts,
)
from ember.tir.schedule.prefetch import prefetch_nest
from ember.tir.schedule.relations import (
    Split,
    data_derived,
    pass_up_values,
    split_needs_guard,
)
from ember.tir.schedule.scan_lower import alias_scan_buffers, scan_bounds, scan_nest
from ember.tir.schedule.schedule import AttachKind, Schedule, Stage
from ember.tir.schedule.store_predicate import in_threads, store_predicate
from ember.tir.schedule.tensorize import tensorized_leaf, tensorized_stage
from ember.tir.schedule.tuple_update import tuple_update
from ember.tir.te.extern import ExternOp
from ember.tir.te.scan import ScanOp
from ember.tir.te.tensor import ComputeOp, IterKind, IterVar, PlaceholderOp, Tensor
from ember.tir.verify import undefined_vars


class _Lowering:
    def __init__(self, sch: Schedule, args: Sequence[Tensor]) -> None:
        self.sch = sch
        self.bodies: dict[int, E.PrimExpr] = {}
        self.buffers: dict[int, Buffer] = {}  # id(stage) -> buffer (its first output's)
        self.more_buffers: dict[tuple[int, int], Buffer] = {}  # a multi-output op's others
        self.params: list[Buffer | E.Var] = []
        arg_stages: set[int] = set()
        for t in args:
            if isinstance(t, E.Var):  # a scalar argument: a size or a split factor
                if t in self.params:
                    raise LoweringError(f"variable '{t.name}' is passed twice in the arguments")
                self.params.append(t)
                continue
            if not isinstance(t, Tensor):
                raise LoweringError(f"arguments must be tensors or te.var scalars, got {t!r}")
            st = sch.stage_of(t.op)
            if st is None and isinstance(t.op, PlaceholderOp):
                # an input the schedule never reads is still a parameter, as in TVM
                self.params.append(decl_lanes(t.shape, t.dtype, t.name))
                continue
            if st is None:
                raise LoweringError(f"argument '{t.name}' is not part of the schedule")
            if self.buffer_of(st, t.value_index) is not None:
                raise LoweringError(f"tensor '{t.name}' is passed twice in the argument list")
            if st.attach is AttachKind.INLINE:
                # TVM's schedule_primitives tutorial: the parameter stays, nothing writes it
                warnings.warn(
                    f"stage '{st.name}' is inlined into its consumers but is also a function "
                    "argument: as in TVM, its buffer is a parameter the function never writes",
                    stacklevel=4,
                )
            buf = decl_lanes(t.shape, t.dtype, t.name)
            self.set_buffer(st, t.value_index, buf)
            self.params.append(buf)
            arg_stages.add(id(st))
        self.arg_stages = arg_stages
        self.root_scratch: list[Buffer] = []  # unpassed outputs of a multi-output argument
        alias_scan_buffers(self)  # a scan's state, init and update live in its buffer
        for st in sch.stages:
            # an output left out of the arguments is computed into a buffer of its own and
            # dropped, as TVM does (its intro_topi tutorial lowers ``[A]`` alone)
            if isinstance(st.op, PlaceholderOp) and id(st) not in arg_stages:
                if self._is_read(st):
                    raise LoweringError(
                        f"input tensor '{st.name}' is read but not in the argument list"
                    )
        check_attach_tree(sch)
        (seeds, fixed), (e_seeds, e_fixed) = scan_bounds(self), extern_bounds(self)
        seeds.update(e_seeds)
        fixed.update(e_fixed)
        self.bounds = infer_bounds(sch, self.bodies, arg_stages, seeds, fixed)
        for st in sch.stages:
            if id(st) not in self.bounds:
                continue
            for k in range(num_outputs(st)):
                if self.buffer_of(st, k) is not None:
                    continue
                t = st.op.output(k)
                if id(st) in arg_stages:
                    self.root_scratch.append(decl_lanes(t.shape, t.dtype, t.name))
                    self.set_buffer(st, k, self.root_scratch[-1])
                elif isinstance(st.op, ExternOp):  # each output its own shape, whole
                    self.set_buffer(st, k, decl_lanes(t.shape, t.dtype, t.name))
                else:
                    self.set_buffer(st, k, scratch_buffer(st, self.bounds[id(st)].alloc_shape, k))

    def buffer_of(self, st: Stage, k: int = 0) -> Buffer | None:
        """The buffer of the stage's ``k``-th output (None before it is made); a scan or an
        extern op keeps all its outputs in one buffer (see :mod:`.scan_lower`)."""
        if k == 0 or num_outputs(st) == 1:
            return self.buffers.get(id(st))
        return self.more_buffers.get((id(st), k))

    def set_buffer(self, st: Stage, k: int, buf: Buffer) -> None:
        if k == 0 or num_outputs(st) == 1:
            self.buffers[id(st)] = buf
        else:
            self.more_buffers[(id(st), k)] = buf

    def stage_buffers(self, st: Stage) -> list[Buffer]:
        """One buffer per output of the stage, in output order."""
        return [self.buffer_of(st, k) for k in range(num_outputs(st))]  # type: ignore[misc]

    def allocate(self, st: Stage, body: S.Stmt) -> S.Stmt:
        """``body`` inside the allocations of every output of a stage that is no argument."""
        for buf in reversed(self.stage_buffers(st)):
            body = S.Allocate(buf, body)
        return body

    def _is_read(self, st: Stage) -> bool:
        for other in self.sch.stages:
            if any(self.sch.stage_of(t.op) is st for t in other.op.input_tensors):
                return True
        return False

    # -- statements ---------------------------------------------------------------------------
    def run(self) -> S.Stmt:
        roots = [
            st for st in self.sch.stages if st.attach is AttachKind.ROOT and id(st) in self.bounds
        ]
        body = S.seq(*[self.stage_nest(st) for st in roots])
        for st in reversed(roots):
            if id(st) not in self.arg_stages:
                body = self.allocate(st, body)
        for buf in self.root_scratch:
            body = S.Allocate(buf, body)
        return body

    def attached_at(self, parent: Stage, iv: IterVar) -> list[Stage]:
        return [
            st
            for st in self.sch.stages
            if st.attach is AttachKind.SCOPE and st.attach_stage is parent and st.attach_ivar is iv
        ]

    def stage_nest(self, st: Stage) -> S.Stmt:
        """The stage's loops in leaf order around its store, with attached stages inside."""
        if isinstance(st.op, ScanOp):
            return scan_nest(self, st)
        if isinstance(st.op, ExternOp):
            return extern_nest(self, st)
        sb = self.bounds[id(st)]
        if thread_reduce_leaves(st):
            return cross_thread_nest(self, st, sb)
        update, init, first_red = self.stage_body(st, sb)
        leaves = st.leaf_iter_vars
        pos = tensorized_leaf(st)
        if pos is not None:
            update, init, leaves = tensorized_stage(self, st, sb, pos, init)
        if init is not None:
            data = data_derived(st)
            for iv in reversed(leaves[first_red:]):
                if iv.kind is not IterKind.REDUCE or iv in data:
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
        reduction leaf: the init goes just outside that loop. A multi-output stage stores
        every output in the same iteration."""
        op = st.op
        assert isinstance(op, ComputeOp)
        bodies = inlined_bodies(self.sch, st, self.bodies)
        loads = LoadRewriter(self)
        root_vars = {iv.var: sb.root_value[iv] for iv in list(op.axis) + list(op.reduce_axis)}
        bufs = self.stage_buffers(st)
        index = tuple(self.store_index(st, iv) for iv in op.axis)
        store_idx = [lane_index(buf, index) for buf in bufs]
        guards_all, guards_data = self.guards(st, sb)
        pred, outer_threads = self.store_predicate(st)
        if pred is not None:  # set_store_predicate: around every store
            guards_all, guards_data = [*guards_all, pred], [*guards_data, pred]
        red = bodies[0]
        if not isinstance(red, E.Reduce):
            stores = [
                S.BufferStore(buf, loads.visit(substitute(body, root_vars)), idx)
                for body, buf, idx in zip(bodies, bufs, store_idx)
            ]
            update = _guard(S.seq(*stores), guards_all)
            return in_threads(update, outer_threads), None, len(st.leaf_iter_vars)
        update = self.reduce_updates(st, sb, red, bufs, store_idx)
        starts = []
        for body, identity in zip(bodies, red.identities):
            assert isinstance(body, E.Reduce)  # te.sum(..., init=X): X at the output's indices
            init = body.init
            starts.append(identity if init is None else loads.visit(substitute(init, root_vars)))
        inits = [S.BufferStore(b, v, idx) for b, v, idx in zip(bufs, starts, store_idx)]
        first_red = next(
            (n for n, iv in enumerate(st.leaf_iter_vars) if iv.kind is IterKind.REDUCE),
            len(st.leaf_iter_vars),
        )
        update, init_stmt = _guard(update, guards_all), _guard(S.seq(*inits), guards_data)
        return in_threads(update, outer_threads), in_threads(init_stmt, outer_threads), first_red

    def reduce_updates(
        self,
        st: Stage,
        sb: StageBounds,
        red: E.Reduce,
        bufs: Sequence[Buffer],
        indices: Sequence[tuple[E.PrimExpr, ...]],
    ) -> S.Stmt:
        """Every value of ``bufs[k][indices[k]] = combine(acc, sources)``, under the
        reduction's ``where`` condition (not yet the split and region guards); a tuple
        reducer's values all at once (:mod:`.tuple_update`)."""
        if len(bufs) == 1:
            acc = E.BufferLoad(red.dtype, bufs[0], indices[0])
            return self.reduce_update(st, sb, red, bufs[0], indices[0], acc)
        op = st.op
        assert isinstance(op, ComputeOp)
        loads = LoadRewriter(self)
        root_vars = {iv.var: sb.root_value[iv] for iv in list(op.axis) + list(op.reduce_axis)}
        return tuple_update(red, bufs, indices, lambda x: loads.visit(substitute(x, root_vars)))

    def reduce_update(
        self,
        st: Stage,
        sb: StageBounds,
        red: E.Reduce,
        buf: Buffer,
        index: tuple[E.PrimExpr, ...],
        acc: E.PrimExpr,
    ) -> S.Stmt:
        """``buf[index] = combine(acc, source)`` at the leaves' values, under the reduction's
        ``where`` condition (not yet the split and region guards)."""
        op = st.op
        assert isinstance(op, ComputeOp)
        loads = LoadRewriter(self)
        root_vars = {iv.var: sb.root_value[iv] for iv in list(op.axis) + list(op.reduce_axis)}
        src = loads.visit(substitute(red.source, root_vars))
        update: S.Stmt = S.BufferStore(buf, red.combine((acc,), (src,))[0], index)
        if red.condition is not None:
            update = S.IfThenElse(loads.visit(substitute(red.condition, root_vars)), update)
        return update

    def store_predicate(self, st: Stage) -> tuple[E.PrimExpr | None, list[tuple[E.Var, IterVar]]]:
        """``set_store_predicate``'s condition and the thread loops it needs around the
        store (:func:`.store_predicate.store_predicate`)."""
        return store_predicate(self, st)

    def inlined(self, st: Stage) -> E.PrimExpr:
        """The stage's body with inlined producers substituted."""
        return inlined_bodies(self.sch, st, self.bodies)[0]

    in_threads = staticmethod(in_threads)

    @staticmethod
    def guarded(body: S.Stmt, conds: list[E.PrimExpr]) -> S.Stmt:
        return _guard(body, conds)

    def with_attached(self, st: Stage, iv: IterVar, inner: S.Stmt) -> S.Stmt:
        """Prepend the stages computed at loop ``iv`` of ``st`` to ``inner``."""
        attached = self.attached_at(st, iv)
        if not attached:
            return inner
        body = S.seq(*[self.stage_nest(p) for p in attached], inner)
        for p in reversed(attached):
            buf = self.buffers[id(p)]
            if id(p) in self.arg_stages:
                continue  # an argument computed here writes into its parameter buffer
            stages = max(p.pipeline_stages, 2 if p.double_buffered else 1)
            if stages > 1:  # a fact for the GPU's inject_pipeline; CPU code ignores it
                body = S.AttrStmt(buf.data, "pipeline_stages", E.const(stages), body)
            body = self.allocate(p, body)
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
        body = prefetch_nest(self, st, iv, body)
        return S.For(iv.var, E.const(0, iv.var.dtype), ext, kind, body, tag, ann)

    def store_index(self, st: Stage, iv: IterVar) -> E.PrimExpr:
        sb = self.bounds[id(st)]
        whole = sb.full or id(st) in self.arg_stages  # its buffer spans the whole tensor
        return sb.root_value[iv] if whole else sb.root_offset[iv]

    def guards(self, st: Stage, sb: StageBounds) -> tuple[list[E.PrimExpr], list[E.PrimExpr]]:
        """Guards for every update, and the subset that also applies to a reduction's init.

        A split that does not divide its parent keeps the parent below its extent; a
        region that may reach past the tensor (an edge tile) keeps the axis inside it.
        """
        leaf_vals = {iv: iv.var for iv in st.leaf_iter_vars}
        values = pass_up_values(st.relations, leaf_vals, sb.extents)
        reduce_g: list[E.PrimExpr] = []
        data_g: list[E.PrimExpr] = []
        data = data_derived(st)
        for rel in st.relations:
            if isinstance(rel, Split) and split_needs_guard(rel, sb.extents):
                cond = values[rel.parent] < sb.extents[rel.parent]
                (data_g if rel.parent in data else reduce_g).append(cond)
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


def schedule_to_primfunc(sch: Schedule, args: Sequence[Tensor], name: str) -> S.PrimFunc:
    """Loop nests for the whole schedule, before any optimisation pass."""
    lw = _Lowering(sch, args)
    body = lw.run()
    attrs: tuple[tuple[str, object], ...] = (("global_symbol", name),)
    divisors = symbolic_split_amounts(sch)
    if divisors:  # the runtime refuses a call where one of these is below 1
        attrs += (("positive_vars", divisors),)
    params, body = box_float_scalars(lw.params, body)
    func = S.PrimFunc(name, params, body, attrs)
    missing = undefined_vars(func)
    if missing:
        names = ", ".join(f"'{v.name}'" for v in missing)
        raise LoweringError(
            f"'{name}' uses the variable(s) {names}, which no argument defines; pass each one "
            "in the argument list (ember.build(s, [A, B, n])) or use it in an argument's shape; "
            "a te.reduce_axis must be used inside a reducer (te.sum(..., axis=k))"
        )
    return func
