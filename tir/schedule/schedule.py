"""Schedules: how each stage of a tensor-expression program is computed.

``create_schedule(C.op)`` makes one :class:`Stage` per operation reachable from
the outputs. Primitives on a stage rearrange its loops (``split``, ``fuse``,
``reorder``, ``tile``), say how a loop runs (``vectorize``, ``unroll``,
``parallel``, ``bind``), and where the stage is computed (``compute_at``,
``compute_inline``, ``compute_root``). ``cache_read``/``cache_write`` add
staging copies in another storage scope. Every primitive checks its arguments
and raises :class:`ScheduleError` naming the stage and the axis, with the
stage's current loop nest, so an illegal schedule fails where it is written
rather than as wrong code. The schedule object is mutable — it is the builder
users drive — while the operations it refers to are immutable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ember.errors import ScheduleError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.schedule.attach import AttachKind
from ember.tir.schedule.cache import cache_read, cache_write
from ember.tir.schedule.graph import legalize_attach
from ember.tir.schedule.relations import Fuse, Relation, Singleton, Split
from ember.tir.schedule.rfactor import rfactor
from ember.tir.schedule.scan_lower import attach_scan_stages
from ember.tir.scopes import STORAGE_SCOPES
from ember.tir.stmt import ForKind
from ember.tir.te.operation import thread_axis
from ember.tir.te.tensor import ComputeOp, IterKind, IterVar, Operation, Tensor
from ember.tir.te.tensor_intrin import TensorIntrin


@dataclass(frozen=True)
class Prefetch:
    """One ``Stage.prefetch`` request at a loop: the hints for ``tensor`` ``offset``
    iterations ahead, dealt out over loop ``spread`` (None: all at the top), kept at cache
    level ``locality``."""

    tensor: Tensor
    offset: E.PrimExpr
    spread: IterVar | None = None
    locality: int = 3


@dataclass
class IterAttr:
    """What primitives set on one loop; TVM reads it as ``s[T].iter_var_attrs[iv]``."""

    kind: ForKind = ForKind.SERIAL
    bind: IterVar | None = None
    pragmas: list[tuple[str, Any]] = field(default_factory=list)
    tensor_intrin: Any = None  # a TensorIntrin that replaces the loops from here inward
    prefetches: list[Prefetch] = field(default_factory=list)

    @property
    def prefetch_data(self) -> list[Tensor]:
        """TVM's name: the tensors ``prefetch`` asked for at this loop."""
        return [p.tensor for p in self.prefetches]

    @property
    def prefetch_offset(self) -> list[E.PrimExpr]:
        """TVM's name: how many iterations ahead each of ``prefetch_data`` is fetched."""
        return [p.offset for p in self.prefetches]

    @property
    def iter_type(self) -> int:
        """TVM's annotation type: ``IterVar.Unrolled``, ``Vectorized``, ``Parallelized``,
        ``Tensorized``, ``ThreadIndex`` for a bound loop, else ``DataPar``."""
        if self.tensor_intrin is not None:
            return IterVar.Tensorized
        if self.bind is not None:
            return IterVar.ThreadIndex
        return {
            ForKind.UNROLLED: IterVar.Unrolled,
            ForKind.VECTORIZED: IterVar.Vectorized,
            ForKind.PARALLEL: IterVar.Parallelized,
        }.get(self.kind, IterVar.DataPar)

    @property
    def bind_thread(self) -> IterVar | None:
        return self.bind

    @property
    def pragma_keys(self) -> list[E.StringImm]:
        return [E.StringImm(k) for k, _ in self.pragmas]

    @property
    def pragma_values(self) -> list[Any]:
        return [E.convert(v) if isinstance(v, (int, float)) else v for _, v in self.pragmas]


class Stage:
    """One operation's place in the schedule: its loops and where it is computed."""

    def __init__(self, op: Operation, schedule: Schedule) -> None:
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self._scope: str | None = None  # None: inferred where the stage is computed
        self.is_output = False
        self.attach = AttachKind.ROOT
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self._reset_axes()
        self.storage_align_: dict[int, tuple[int, int]] = {}
        self.double_buffered = False
        self.store_predicate: E.PrimExpr | None = None
        self.pipeline_stages = 1

    def _reset_axes(self) -> None:
        if isinstance(self.op, ComputeOp):
            self.all_iter_vars = list(self.op.axis) + list(self.op.reduce_axis)
        else:  # a scan's time axis, which the stages it runs are computed inside
            self.all_iter_vars = list(getattr(self.op, "schedule_axes", ()))
        self.leaf_iter_vars: list[IterVar] = list(self.all_iter_vars)
        self.relations: list[Relation] = []
        self.iter_attrs: dict[IterVar, IterAttr] = {}

    def __repr__(self) -> str:
        return f"stage({self.op.name})"

    @property
    def iter_var_attrs(self) -> dict[IterVar, IterAttr]:
        """TVM's name for the annotations of each loop (``iter_type``, ``pragma_keys``...)."""
        return self.iter_attrs

    @property
    def scope(self) -> str:
        """The storage scope: the one ``set_scope`` gave, else TVM's default for where the
        stage is computed: ``local`` inside a loop bound to ``threadIdx`` (or a vthread),
        ``shared`` inside one bound to ``blockIdx`` only, ``global`` elsewhere."""
        if self._scope is not None:
            return self._scope
        rank = -1  # 0: blockIdx, 1: threadIdx (TVM's thread ranks)
        st: Stage | None = self
        seen: set[int] = set()  # compute_at(self) or a cycle is refused later, by lower
        while st is not None and st.attach is AttachKind.SCOPE and st.attach_stage is not None:
            if id(st) in seen:
                break
            seen.add(id(st))
            parent, ivar = st.attach_stage, st.attach_ivar
            upto = parent.leaf_iter_vars.index(ivar) + 1 if ivar in parent.leaf_iter_vars else 0
            for iv in parent.leaf_iter_vars[:upto]:
                attr = parent.iter_attrs.get(iv)
                tag = attr.bind.thread_tag if attr is not None and attr.bind is not None else ""
                if tag:
                    rank = max(rank, 0 if tag.startswith("blockIdx") else 1)
            st = parent
        return ("global", "shared", "local")[rank + 1]

    @scope.setter
    def scope(self, value: str) -> None:
        self._scope = value

    # -- helpers ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.op.name

    def _error(self, msg: str, axis: IterVar | None = None) -> ScheduleError:
        nest = []
        for depth, iv in enumerate(self.leaf_iter_vars):
            mark = "   <-- here" if iv is axis else ""
            nest.append("  " * (depth + 1) + f"for {iv.var.name}{mark}")
        text = f"stage '{self.name}': {msg}"
        if nest:
            text += "\n  loop nest of the stage:\n" + "\n".join(nest)
        return ScheduleError(text)

    def _leaf(self, axis: Any, what: str) -> IterVar:
        if not isinstance(self.op, ComputeOp):
            raise self._error(
                f"{what} applies to compute stages; schedule the stages that '{self.name}' "
                "runs instead (a scan's init and update)"
            )
        if not isinstance(axis, IterVar):
            raise self._error(f"{what} expects an axis (IterVar) of this stage, got {axis!r}")
        if axis in self.leaf_iter_vars:
            return axis
        if axis in self.all_iter_vars:
            raise self._error(
                f"axis '{axis.name}' was already split or fused; {what} takes a current loop "
                "(one of the stage's leaf_iter_vars)",
                axis,
            )
        raise self._error(f"axis '{axis.name}' does not belong to stage '{self.name}'")

    def _attr(self, iv: IterVar) -> IterAttr:
        return self.iter_attrs.setdefault(iv, IterAttr())

    def _compute_only(self, what: str) -> ComputeOp:
        if not isinstance(self.op, ComputeOp):
            raise self._error(f"{what} applies to compute stages; '{self.name}' is an input")
        return self.op

    # -- loop structure ------------------------------------------------------------------
    def split(
        self,
        axis: IterVar,
        factor: E.ExprLike | None = None,
        nparts: E.ExprLike | None = None,
        disable_predication: bool = False,
    ) -> tuple[IterVar, IterVar]:
        """``for i in range(n)`` -> ``for i_outer: for i_inner in range(factor)``.

        With ``nparts`` the outer loop has that extent instead. A factor that does
        not divide the extent is allowed; lowering guards the tail iterations unless
        ``disable_predication=True`` (TVM's flag: the user promises the tail
        iterations are harmless, e.g. the buffers are padded, and gets no guard). The
        amount may be symbolic (a ``te.var`` the function takes as an argument); an
        integral float (``64 / 2``) counts as that integer, as in TVM.
        """
        iv = self._leaf(axis, "split")
        if (factor is None) == (nparts is None):
            raise self._error("split takes exactly one of factor= or nparts=", iv)
        value = _split_amount(factor if factor is not None else nparts)
        if value is None:
            which = "factor" if factor is not None else "nparts"
            given = factor if factor is not None else nparts
            raise self._error(
                f"split of axis '{iv.name}': {which} must be a positive integer (or an integer "
                f"variable passed as an argument), got {given!r}",
                iv,
            )
        kind = iv.kind if iv.kind is IterKind.REDUCE else IterKind.DATA_PAR
        outer = IterVar(E.Var(f"{iv.name}_outer"), None, kind)
        inner = IterVar(E.Var(f"{iv.name}_inner"), None, kind)
        rel = Split(
            iv,
            outer,
            inner,
            value if factor is not None else None,
            value if nparts is not None else None,
            bool(disable_predication),
        )
        self._replace_leaf(iv, [outer, inner], rel)
        return outer, inner

    def fuse(self, *axes: IterVar) -> IterVar:
        """Merge adjacent loops (outer first) into one loop over their product.

        As in TVM: one axis is returned unchanged; no axes make a new outermost loop
        of extent 1 (``singleton``); two neighbours given inner first are fused in
        loop order. A data axis fused with a reduction axis is a reduction loop, as in TVM.
        """
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        if not axes:
            unit = IterVar(E.Var("singleton"), E.Range.from_extent(1), IterKind.DATA_PAR)
            self.relations.append(Singleton(unit))
            self.all_iter_vars.append(unit)
            self.leaf_iter_vars.insert(0, unit)
            return unit
        ivs = [self._leaf(a, "fuse") for a in axes]
        result = ivs[0]
        for nxt in ivs[1:]:
            outer, inner = result, nxt
            pos_a = self.leaf_iter_vars.index(outer)
            pos_b = self.leaf_iter_vars.index(inner)
            if pos_b + 1 == pos_a:  # given inner first: TVM fuses them in loop order
                outer, inner, pos_a, pos_b = inner, outer, pos_b, pos_a
            if pos_b != pos_a + 1:
                raise self._error(
                    f"fuse: axes '{outer.name}' and '{inner.name}' are not adjacent loops "
                    "(outer first); reorder them first",
                    inner,
                )
            # as TVM: a data axis fused with a reduction axis makes a reduction loop, whose
            # init runs over it too (the identity is stored once per reduction step)
            kind = IterKind.REDUCE if IterKind.REDUCE in (outer.kind, inner.kind) else outer.kind
            fused = IterVar(E.Var(f"{outer.name}_{inner.name}_fused"), None, kind)
            self.relations.append(Fuse(outer, inner, fused))
            self.all_iter_vars.append(fused)
            self.leaf_iter_vars[pos_a : pos_b + 1] = [fused]
            result = fused
        return result

    def _replace_leaf(self, iv: IterVar, new: list[IterVar], rel: Relation) -> None:
        pos = self.leaf_iter_vars.index(iv)
        self.leaf_iter_vars[pos : pos + 1] = new
        self.all_iter_vars.extend(new)
        self.relations.append(rel)

    def reorder(self, *axes: IterVar) -> None:
        """Put the given loops in this order, in the positions they occupied together.

        As in TVM, the axes need not be adjacent or complete (the others keep their
        places), no axes or one axis change nothing, and an axis given twice is an error.
        """
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        ivs = [self._leaf(a, "reorder") for a in axes]
        if len({id(iv) for iv in ivs}) != len(ivs):
            raise self._error("reorder: an axis appears twice")
        positions = sorted(self.leaf_iter_vars.index(iv) for iv in ivs)
        for pos, iv in zip(positions, ivs):
            self.leaf_iter_vars[pos] = iv

    def tile(
        self, x: IterVar, y: IterVar, x_factor: int, y_factor: int
    ) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        """Split two loops and order them ``x_outer, y_outer, x_inner, y_inner``."""
        xo, xi = self.split(x, factor=x_factor)
        yo, yi = self.split(y, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # -- loop annotations -------------------------------------------------------------------
    def _annotate(self, axis: IterVar, kind: ForKind, what: str) -> None:
        iv = self._leaf(axis, what)
        attr = self._attr(iv)
        if attr.bind is not None:
            raise self._error(f"{what}: axis '{iv.name}' is bound to a thread axis", iv)
        if kind is ForKind.PARALLEL and iv.kind is IterKind.REDUCE:
            raise self._error(
                f"parallel: axis '{iv.name}' is a reduction axis; its iterations race", iv
            )
        if kind is ForKind.VECTORIZED and iv.kind is IterKind.REDUCE:
            # TVM: "Cannot vectorize on CommReduce"; the lanes would all write one output
            raise self._error(
                f"vectorize: axis '{iv.name}' is a reduction axis, whose lanes would all "
                "update the same output; vectorize a data axis (the reduction inside it "
                "becomes vector code), or rfactor the reduction first",
                iv,
            )
        attr.kind = kind

    def vectorize(self, axis: IterVar) -> None:
        """Run the loop as SIMD lanes; its extent must be a constant."""
        self._annotate(axis, ForKind.VECTORIZED, "vectorize")

    def unroll(self, axis: IterVar) -> None:
        self._annotate(axis, ForKind.UNROLLED, "unroll")

    def parallel(self, axis: IterVar) -> None:
        """Run the loop's iterations on the thread pool."""
        self._annotate(axis, ForKind.PARALLEL, "parallel")

    def pragma(self, axis: IterVar, key: str, value: Any = 1) -> None:
        iv = self._leaf(axis, "pragma")
        self._attr(iv).pragmas.append((key, value))

    def prefetch(
        self,
        tensor: Tensor,
        var: IterVar,
        offset: E.ExprLike,
        *,
        spread: IterVar | None = None,
        locality: int = 3,
    ) -> None:
        """At each iteration of loop ``var``, ask the cache for the region of ``tensor`` that
        iteration ``var + offset`` reads (TVM's ``s[C].prefetch``), so the memory arrives
        while this iteration computes. A hint only: results never change, and every
        address it names lies inside the tensor (:mod:`ember.tir.schedule.prefetch`). CPU
        code issues ``llvm.prefetch``; CUDA code emits nothing for it.

        Two keywords TVM does not have. ``spread``, a loop inside ``var``: the region's
        hints are dealt out over that loop's iterations (and those of the loops between
        it and ``var``) instead of issued in one burst at the top of ``var``'s body, which
        stalls on the core's few outstanding-miss slots as an ordinary cold read would.
        ``locality`` is ``llvm.prefetch``'s: 3 into L1 (TVM's), 2 into L2, 1 into L3, 0
        non-temporal; a region as large as what the body re-reads from L1 belongs in L2."""
        iv = self._leaf(var, "prefetch")
        if spread is not None:
            self._leaf(spread, "prefetch")
        if locality not in (0, 1, 2, 3):
            raise self._error(f"prefetch: locality must be 0-3, got {locality!r}", iv)
        if not isinstance(tensor, Tensor):
            raise self._error(f"prefetch expects a tensor, got {tensor!r}", iv)
        producer = self.schedule.stage_of(tensor.op)
        if producer is None or not self.schedule._reads(self, producer):
            raise self._error(f"prefetch: stage '{self.name}' does not read '{tensor.name}'", iv)
        k = E.convert(offset)
        if not dt.is_int(k.dtype):
            raise self._error(f"prefetch: the offset must be an integer, got {offset!r}", iv)
        attr = self._attr(iv)
        if attr.kind is ForKind.VECTORIZED:
            raise self._error(
                f"prefetch: axis '{iv.name}' is vectorized; prefetch at an outer loop", iv
            )
        attr.prefetches.append(Prefetch(tensor, k, spread, locality))

    def bind(self, axis: IterVar, thread: IterVar | str) -> None:
        """Map a loop to a GPU block or thread index."""
        iv = self._leaf(axis, "bind")
        if isinstance(thread, str):
            try:
                thread = thread_axis(thread)
            except ScheduleError as e:
                raise self._error(f"bind: {e.message}", iv) from e
        if not isinstance(thread, IterVar) or thread.kind is not IterKind.THREAD:
            raise self._error(f"bind: expected a thread axis (te.thread_axis), got {thread!r}", iv)
        for other, attr in self.iter_attrs.items():
            if (
                attr.bind is not None
                and other is not iv
                and attr.bind.thread_tag == thread.thread_tag
                and thread.thread_tag != "vthread"
            ):
                raise self._error(
                    f"bind: '{thread.thread_tag}' is already bound to axis '{other.name}'", iv
                )
        attr = self._attr(iv)
        attr.kind = ForKind.THREAD_BINDING
        attr.bind = thread

    def tensorize(self, axis: IterVar, intrin: Any) -> None:
        """Replace the loops from ``axis`` inward by the tensor intrinsic ``intrin``
        (``te.decl_tensor_intrin``); lowering checks that they compute what it does
        (:mod:`ember.tir.schedule.tensorize`)."""
        iv = self._leaf(axis, "tensorize")
        if not isinstance(intrin, TensorIntrin):
            raise self._error(
                f"tensorize expects a te.decl_tensor_intrin result, got {intrin!r}", iv
            )
        attr = self._attr(iv)
        if attr.bind is not None:
            raise self._error(f"tensorize: axis '{iv.name}' is bound to a thread axis", iv)
        attr.tensor_intrin = intrin

    # -- where the stage is computed ------------------------------------------------------------
    def compute_at(self, parent: Stage, axis: IterVar) -> None:
        """Compute this stage inside ``parent``'s loop ``axis``, just the region needed there."""
        self._compute_only("compute_at")
        if not isinstance(parent, Stage):
            raise self._error(f"compute_at expects a stage (s[T]), got {parent!r}")
        if parent is self and axis in self.leaf_iter_vars:
            # TVM accepts this and refuses it when lowering (test_te_schedule's
            # invalid_compute_at_self); so does Ember (check_attach_tree)
            self.attach, self.attach_stage, self.attach_ivar = AttachKind.SCOPE, self, axis
            return
        if axis not in parent.leaf_iter_vars:
            raise parent._error(
                f"compute_at of '{self.name}': axis {getattr(axis, 'name', axis)!r} is not a "
                f"current loop of stage '{parent.name}'",
                axis if isinstance(axis, IterVar) else None,
            )
        if not self.schedule._reads(parent, self):
            raise self._error(
                f"compute_at: stage '{parent.name}' does not consume '{self.name}'; a stage can "
                "only be computed inside one of its consumers"
            )
        if self.is_output:
            raise self._error("compute_at: an output stage is computed at the root")
        self.attach, self.attach_stage, self.attach_ivar = AttachKind.SCOPE, parent, axis

    def compute_inline(self) -> None:
        """Substitute this stage's expression into its consumers; it gets no loops or buffer."""
        op = self._compute_only("compute_inline")
        if op.reduce_axis:
            raise self._error("compute_inline: a reduction cannot be inlined; use compute_at")
        if self.is_output:
            raise self._error("compute_inline: an output stage cannot be inlined")
        self.attach, self.attach_stage, self.attach_ivar = AttachKind.INLINE, None, None

    def compute_root(self) -> None:
        self._compute_only("compute_root")
        self.attach, self.attach_stage, self.attach_ivar = AttachKind.ROOT, None, None

    def set_store_predicate(self, predicate: E.ExprLike) -> None:
        """Store the stage's values only where ``predicate`` holds (TVM's primitive; its
        tutorial writes ``tx.var.equal(0)`` after a cross-thread reduction, where Ember
        already lets one thread store)."""
        self.store_predicate = E._as_bool(predicate)

    def set_scope(self, scope: str) -> None:
        """Store the stage in ``scope`` (:data:`ember.tir.scopes.STORAGE_SCOPES`: ``global``,
        ``shared``, ``warp``, ``local``, or a ``wmma`` fragment)."""
        if scope not in STORAGE_SCOPES:
            names = ", ".join(repr(x) for x in STORAGE_SCOPES)
            raise self._error(f"unknown storage scope {scope!r}; use one of {names}")
        self.scope = scope

    def storage_align(self, axis: IterVar, factor: int, offset: int) -> None:
        """Pad the row stride of ``axis`` to ``k*factor + offset`` elements (bank conflicts)."""
        op = self._compute_only("storage_align")
        if axis not in op.axis:
            raise self._error(
                f"storage_align: '{getattr(axis, 'name', axis)}' is not a data axis of the stage"
            )
        if factor <= 0 or not 0 <= offset < factor:
            raise self._error(
                f"storage_align: need factor > 0 and 0 <= offset < factor, got {factor}, {offset}"
            )
        self.storage_align_[op.axis.index(axis)] = (factor, offset)

    def double_buffer(self) -> None:
        """``pipeline(2)``: fill the next tile of this shared stage while computing on this one."""
        self._compute_only("double_buffer")
        self.double_buffered = True

    def pipeline(self, stages: int) -> None:
        """Keep ``stages`` tiles of this shared stage in flight over the loop it is computed at.

        The stage must be a copy from global memory, ``compute_at`` the loop whose
        iterations each fill one tile (a reduction's outer loop); on CUDA the loop
        is rewritten so that the copies of the next ``stages - 1`` tiles overlap
        the compute on the current one (``cp.async`` on sm_80+). CPU code ignores it.
        """
        self._compute_only("pipeline")
        if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
            raise self._error(f"pipeline: stages must be an integer >= 1, got {stages!r}")
        self.pipeline_stages = stages


class Schedule:
    """All stages of a program, in an order where producers come before consumers."""

    def __init__(self, outputs: Sequence[Operation]) -> None:
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self._by_op: dict[int, Stage] = {}
        for op in _topo_order(self.outputs):
            st = Stage(op, self)
            self.stages.append(st)
            self._by_op[id(op)] = st
        for op in self.outputs:
            self._by_op[id(op)].is_output = True
        attach_scan_stages(self)

    def __getitem__(self, key: Tensor | Operation) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        st = self._by_op.get(id(op))
        if st is None:
            raise ScheduleError(f"'{getattr(op, 'name', op)}' is not part of this schedule")
        return st

    def stage_of(self, op: Operation) -> Stage | None:
        return self._by_op.get(id(op))

    def _reads(self, consumer: Stage, producer: Stage) -> bool:
        """Does ``consumer`` depend on ``producer``'s output, directly or through other stages?

        Any path counts (``C`` reads ``A.local`` reads ``A.shared``): where the stages
        in between are computed is checked when bounds are inferred.
        """
        todo = [consumer.op]
        seen: set[int] = set()
        while todo:
            op = todo.pop()
            for t in op.input_tensors:
                st = self.stage_of(t.op)
                if st is producer:
                    return True
                if st is not None and id(st) not in seen:
                    seen.add(id(st))
                    todo.append(st.op)
        return False

    # -- staging copies -------------------------------------------------------------------
    def cache_read(
        self, tensor: Tensor, scope: str, readers: Sequence[Tensor | Operation | Stage]
    ) -> Tensor:
        """A copy of ``tensor`` in ``scope`` that ``readers`` read instead of the original."""
        stages = [r if isinstance(r, Stage) else self[r] for r in readers]
        return cache_read(self, tensor, scope, stages)

    def cache_write(self, tensor: Tensor | Sequence[Tensor], scope: str) -> Any:
        """Compute ``tensor`` into a ``scope`` buffer, then copy it out; returns the cache tensor
        (a list of them for the list of a multi-output compute's outputs).

        As in TVM, ``tensor``'s stage becomes the copy and keeps ``tensor.op.axis``; the
        cache stage gets fresh data axes and the reduce axes (see :mod:`.cache`).
        """
        return cache_write(self, tensor, scope)

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Any:
        """Factor ``tensor``'s reduction over the loop ``axis`` into a new stage (TVM's
        ``rfactor``); returns its tensor, or a list for a tuple reduction (see :mod:`.rfactor`).

        ``ko, ki = s[B].split(k, factor=32); BF = s.rfactor(B, ki)``: ``BF[ki, i]`` sums over
        ``ko``, and ``s[B]`` sums ``BF`` over its new ``op.reduce_axis[0]``.
        """
        return rfactor(self, tensor, axis, factor_axis)

    def normalize(self) -> Schedule:
        """TVM's ``normalize``: attach points whose loop was split or fused afterwards move
        to the loop that replaced it (see :func:`.graph.legalize_attach`). TVM returns a
        normalized copy; Ember normalizes this schedule (lowering would do the same) and
        returns it. Inlining and loop rebasing, TVM's other steps, lowering does anyway."""
        legalize_attach(self)
        return self

    def _insert_stage(
        self, op: Operation, after: Stage | None = None, before: Stage | None = None
    ) -> Stage:
        st = Stage(op, self)
        pos = self.stages.index(after) + 1 if after is not None else self.stages.index(before)  # type: ignore[arg-type]
        self.stages.insert(pos, st)
        self._by_op[id(op)] = st
        return st

    def _rewrite_op(self, st: Stage, new_op: Operation) -> None:
        """Give stage ``st`` a new operation; the old one still finds the stage."""
        st.op = new_op
        self._by_op[id(new_op)] = st


def _topo_order(outputs: Sequence[Operation]) -> list[Operation]:
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op: Operation) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for op in outputs:
        visit(op)
    return order


def create_schedule(ops: Operation | Tensor | Sequence[Operation | Tensor]) -> Schedule:
    """A schedule with every stage computed at the root in its default loop order."""
    if not isinstance(ops, (list, tuple)):
        ops = [ops]
    out = []
    for o in ops:
        op = o.op if isinstance(o, Tensor) else o
        if not isinstance(op, Operation):
            raise ScheduleError(f"create_schedule expects tensors or operations, got {o!r}")
        out.append(op)
    return Schedule(out)


def _split_amount(value: object) -> int | E.PrimExpr | None:
    """A split factor or part count: a positive int, or an integer expression; None if bad."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, E.FloatImm) and value.value == int(value.value):
        value = int(value.value)
    if isinstance(value, E.IntImm):
        value = value.value
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, E.PrimExpr) and dt.is_int(value.dtype) and dt.lanes_of(value.dtype) == 1:
        return value
    return None
