"""What the sketch rules need to know about a compute DAG, read once from its TE ops.

For every compute stage of a workload (the tensors a workload function returns):
whether it is injective (no reduction: elementwise, broadcast, padding, reshapes,
which are inlined into their consumers), whether it reduces with *data reuse* (some
input is read without some spatial loop's variable, so the loop re-reads it: matmul
and convolution, which are tiled), its spatial and reduction extents (a reduction
over few outputs is factored with ``rfactor``), its consumers, and whether its one
consumer reads it elementwise (``out[i, j] = f(C[i, j], ...)``: an epilogue that can
be fused into its tile). Ansor asks the same questions of its ``ComputeDAG``.

Two more facts serve the row rules: whether an injective stage is worth inlining (not
when it calls an expensive intrinsic such as ``exp`` or ``rsqrt`` and inlining would
evaluate it more than once per element: several consumers, or a consumer that
broadcasts it), and an output's *row producers*: the stages kept apart (reductions, and
injective stages not inlined) that it depends on, when each is read only within one row
of the output (its leading indices the reader's leading axes), so that all of them can
be computed at the output's row loop (softmax's max and sum, layer norm's mean and
variance, a depthwise conv's 3x3 windows) while the row is in cache.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ember.errors import ConfigError
from ember.tir import expr as E
from ember.tir.functor import contains, post_order_visit
from ember.tir.te.reads import producer_loads
from ember.tir.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor


@dataclass
class StageInfo:
    """The facts of one compute stage (``name`` is its step name, see ``steps``)."""

    name: str
    op: ComputeOp
    is_output: bool
    spatial: tuple[int, ...]  # extents of the data axes
    reduce: tuple[int, ...]  # extents of the reduction axes
    has_reuse: bool
    consumers: list[str] = field(default_factory=list)
    producers: list[str] = field(default_factory=list)  # compute stages it reads
    expensive: bool = False  # calls an intrinsic that costs many instructions (exp, erf)

    @property
    def injective(self) -> bool:
        return not self.reduce

    @property
    def spatial_size(self) -> int:
        return math.prod(self.spatial)

    @property
    def reduce_size(self) -> int:
        return math.prod(self.reduce)


@dataclass
class DagInfo:
    """Every compute stage of a DAG in producer-before-consumer order."""

    stages: dict[str, StageInfo]

    def elementwise_consumer(self, name: str) -> str | None:
        """The stage that ``name``'s tile can be fused into: following its single
        consumers through inlinable (injective, non-output) stages, the first stage
        that is kept, provided every read on the way is elementwise (the same shape, the
        indices the reader's own axes in order). None where there is none."""
        info = self.stages[name]
        if info.is_output or len(info.consumers) != 1:
            return None
        producer = info
        while True:
            cons = self.stages[producer.consumers[0]]
            if (
                not cons.injective
                or cons.spatial != info.spatial  # a crop reads C[i, j] over fewer i
                or not _reads_elementwise(cons.op, producer.op)
            ):
                return None
            if cons.is_output or len(cons.consumers) != 1:
                return cons.name if cons.is_output else None
            producer = cons

    def should_inline(self, name: str) -> bool:
        """Inline an injective non-output stage, unless it is expensive and inlining would
        compute it more than once per element (Ansor inlines only what is cheap to repeat):
        several consumers, or a consumer with more elements than it (a broadcast read)."""
        s = self.stages[name]
        if not s.injective or s.is_output:
            return False
        if not s.expensive:
            return True
        cons = [self.stages[c] for c in s.consumers]
        return len(cons) == 1 and cons[0].spatial_size <= s.spatial_size

    def row_producers(self, name: str) -> list[str] | None:
        """The stages ``name`` (an injective output of rank >= 2) depends on that are
        kept (not inlined), when every one of them is read only inside one row of it:
        each read, on every path between them, indexes its leading ``rank - 1``
        dimensions by the reader's leading axes (through inlined stages too). None where
        there is no such stage, or one is read across rows (a transpose, a crop)."""
        out = self.stages[name]
        m = len(out.spatial) - 1
        if not out.injective or not out.is_output or m < 1 or out.spatial[-1] < 2:
            return None
        found: list[str] = []
        todo, seen = [name], {name}
        while todo:
            reader = self.stages[todo.pop()]
            for p in reader.producers:
                prod = self.stages[p]
                if not _row_local(reader, prod, m, out.spatial[:m]):
                    if self.should_inline(p) and not prod.producers:
                        continue  # a broadcast operand (gamma[c]) computed inline
                    return None
                if prod.is_output:
                    return None
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
                    if prod.has_reuse and prod.reduce_size > ROW_STENCIL_MAX:
                        return None  # a matmul or conv is tiled, not computed per row
                    if not self.should_inline(p):
                        found.append(p)
        order = list(self.stages)
        return sorted(found, key=order.index) or None


ROW_STENCIL_MAX = 25  # a reduction with reuse over at most this many values (a depthwise
# 3x3 or 5x5 window) may be computed row by row; a longer one (matmul, conv) is tiled


_EXPENSIVE = {
    E.Intrinsic.EXP,
    E.Intrinsic.EXP2,
    E.Intrinsic.EXP10,
    E.Intrinsic.LOG,
    E.Intrinsic.LOG2,
    E.Intrinsic.LOG10,
    E.Intrinsic.LOG1P,
    E.Intrinsic.SQRT,
    E.Intrinsic.RSQRT,
    E.Intrinsic.ERF,
    E.Intrinsic.SIGMOID,
    E.Intrinsic.TANH,
    E.Intrinsic.SIN,
    E.Intrinsic.COS,
}


def _is_expensive(op: ComputeOp) -> bool:
    return any(
        contains(body, lambda n: isinstance(n, E.Call) and n.op in _EXPENSIVE) for body in op.bodies
    )


def _row_local(reader: StageInfo, producer: StageInfo, m: int, rows: tuple[int, ...]) -> bool:
    """Whether ``reader`` reads ``producer`` only at its own row: both span the output's
    ``m`` leading (row) extents ``rows``, and every read's first ``m`` indices are the
    reader's first ``m`` axes."""
    if reader.spatial[:m] != rows or producer.spatial[:m] != rows:
        return False
    axes = [iv.var for iv in reader.op.axis[:m]]
    loads = [ld for ld in producer_loads(reader.op) if ld.producer.op is producer.op]
    return all(all(i is a for i, a in zip(ld.indices[:m], axes)) for ld in loads)


def _const(x: E.PrimExpr) -> int:
    value = getattr(x, "value", None)
    if not isinstance(value, int):
        raise ConfigError(
            f"auto-scheduling needs constant loop extents; an axis has extent {x} "
            "(build the workload for one shape)"
        )
    return value


def _vars(e: E.PrimExpr) -> set[E.Var]:
    out: set[E.Var] = set()
    post_order_visit(e, lambda n: out.add(n) if isinstance(n, E.Var) else None, once=True)
    return out


def _has_reuse(op: ComputeOp) -> bool:
    """A reduction some input of which misses a (non-unit) spatial loop's variable."""
    if not op.reduce_axis:
        return False
    spatial = {iv.var for iv in op.axis if _const(iv.dom.extent) > 1}  # type: ignore[union-attr]
    for load in producer_loads(op):
        used: set[E.Var] = set()
        for idx in load.indices:
            used |= _vars(idx)
        if spatial - used:
            return True
    return False


def _reads_elementwise(reader: ComputeOp, producer: Operation) -> bool:
    loads = [ld for ld in producer_loads(reader) if ld.producer.op is producer]
    axes = tuple(iv.var for iv in reader.axis)
    return bool(loads) and all(
        len(ld.indices) == len(axes) and all(i is a for i, a in zip(ld.indices, axes))
        for ld in loads
    )


def analyze(tensors: Sequence[Tensor], names: dict[str, Operation]) -> DagInfo:
    """The facts of the DAG whose stages ``names`` lists (step name -> op, in schedule
    order, as :func:`ember.tuner.auto.steps.stage_names` gives them); ``tensors`` are the
    workload's tensors, whose computed ones are the outputs."""
    outputs = {id(t.op) for t in tensors if isinstance(t.op, ComputeOp)}
    by_op = {id(op): n for n, op in names.items()}
    stages: dict[str, StageInfo] = {}
    for name, op in names.items():
        if isinstance(op, PlaceholderOp) or not isinstance(op, ComputeOp):
            continue
        stages[name] = StageInfo(
            name,
            op,
            id(op) in outputs,
            tuple(_const(iv.dom.extent) for iv in op.axis),  # type: ignore[union-attr]
            tuple(_const(iv.dom.extent) for iv in op.reduce_axis),  # type: ignore[union-attr]
            _has_reuse(op),
            expensive=_is_expensive(op),
        )
    for name, info in stages.items():
        for t in info.op.input_tensors:
            prod = by_op.get(id(t.op))
            if prod in stages and name not in stages[prod].consumers:
                stages[prod].consumers.append(name)
                info.producers.append(prod)
    return DagInfo(stages)
