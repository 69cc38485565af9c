"""What the sketch rules need to know about a compute DAG, read once from its TE ops.

For every compute stage of a workload (the tensors a workload function returns):
whether it is injective (no reduction: elementwise, broadcast, padding, reshapes,
which are inlined into their consumers), whether it reduces with *data reuse* (some
input is read without some spatial loop's variable, so the loop re-reads it: matmul
and convolution, which are tiled), its spatial and reduction extents (a reduction
over few outputs is factored with ``rfactor``), its consumers, and whether its one
consumer reads it elementwise (``out[i, j] = f(C[i, j], ...)``: an epilogue that can
be fused into its tile). Ansor asks the same questions of its ``ComputeDAG``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ember.errors import ConfigError
from ember.tir import expr as E
from ember.tir.functor import post_order_visit
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


def _const(x: E.PrimExpr) -> int:
    value = getattr(x, "value", None)
    if not isinstance(value, int):
        raise ConfigError(
            f"auto-scheduling needs constant loop extents; an axis has extent {x} "
            "(build the workload for one shape)"
        )
    return value


def _loads(op: ComputeOp) -> list[E.ProducerLoad]:
    found: list[E.ProducerLoad] = []

    def visit(node: object) -> None:
        if isinstance(node, E.ProducerLoad):
            found.append(node)

    for body in op.bodies:
        post_order_visit(body, visit)
    return found


def _vars(e: E.PrimExpr) -> set[E.Var]:
    out: set[E.Var] = set()
    post_order_visit(e, lambda n: out.add(n) if isinstance(n, E.Var) else None)
    return out


def _has_reuse(op: ComputeOp) -> bool:
    """A reduction some input of which misses a (non-unit) spatial loop's variable."""
    if not op.reduce_axis:
        return False
    spatial = {iv.var for iv in op.axis if _const(iv.dom.extent) > 1}  # type: ignore[union-attr]
    for load in _loads(op):
        used: set[E.Var] = set()
        for idx in load.indices:
            used |= _vars(idx)
        if spatial - used:
            return True
    return False


def _reads_elementwise(reader: ComputeOp, producer: Operation) -> bool:
    loads = [ld for ld in _loads(reader) if ld.producer.op is producer]
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
        )
    for name, info in stages.items():
        for t in info.op.input_tensors:
            prod = by_op.get(id(t.op))
            if prod in stages and name not in stages[prod].consumers:
                stages[prod].consumers.append(name)
    return DagInfo(stages)
