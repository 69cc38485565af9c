"""Operator strategies: for an op and its workload, the implementations that apply, best first.

An :class:`Implementation` pairs a ``tir/topi`` compute with the schedule of the stages
that compute makes (and, where it has one, the tuning task whose records set its knobs),
as TVM's ``OpStrategy`` pairs ``fcompute`` with ``fschedule``. Each backend keeps one
:class:`StrategyTable` (``codegen_llvm/strategy.py``, ``codegen_cuda/strategy.py``), so the
compute and its schedule are named together in one place and nothing looks a schedule up
by a tag string. The model compiler asks the table for the implementations of a node,
takes the first whose compute applies, and later hands the group's outputs and the
implementations it took (its *anchors*) to the backend's group schedule, which runs each
anchor's schedule and the generic schedule over the stages left.

The vocabulary lives here, below the code generators, because it is the tuner's business
too: an implementation names the task that ``ember.graph.model_tuning.extract_tasks``
lists for tuning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ember.target import Target
from ember.tir.schedule.schedule import Schedule, Stage
from ember.tir.te.tensor import ComputeOp, Operation, Tensor

if TYPE_CHECKING:  # types only: the graph's value types belong to the frontend, above
    from ember.frontend.graph import TensorType

Compute = Callable[[Sequence[Tensor], dict[str, Any]], "list[Tensor] | None"]
"""``(input tensors, node attrs) -> output tensors``, or None where the implementation does
not take this workload (a dtype, a layout, a geometry it has no template for)."""

AnchorSchedule = Callable[[Schedule, list[Tensor]], "set[int]"]
"""``(schedule, group outputs) -> ids of the ops it scheduled``: the template's schedule of
the stages its compute made, with the group's elementwise tail as its epilogue where the
template allows it. It schedules nothing (an empty set) where the group's shape does not
fit (several outputs, a reduction after it); the generic schedule then takes every stage."""

Task = Callable[[Sequence["TensorType"], dict[str, Any]], "tuple[Any, ...] | None"]
"""``(input types with .shape and .dtype, node attrs) -> (template name, template args)``:
the tuning task whose records the compute reads, or None where it does not apply. A third
element, ``{knob: value}``, names knobs the node's kernel can only run at one value (a
blocked convolution's channel blocks, which its neighbours fix): its task holds them fixed
(``create_task(..., fixed=)``) and searches only the rest."""

TargetTest = Callable[["Target | None"], bool]
"""Whether an implementation may run on a parsed target (a CPU feature, a GPU arch)."""


def _always(target: Target | None) -> bool:
    return True


def no_schedule(s: Schedule, outputs: list[Tensor]) -> set[int]:
    """The anchor schedule of an implementation whose stages the generic schedule takes."""
    return set()


@dataclass(frozen=True)
class Implementation:
    """One way to compute an op: a compute, the schedule of its stages, its tuning task.

    ``name`` is the template's task name where there is one (``conv2d_nchw.llvm``); a
    higher ``priority`` is tried first; ``supports`` says on which targets it may run."""

    name: str
    compute: Compute
    schedule: AnchorSchedule = no_schedule
    task: Task | None = None
    priority: int = 0
    supports: TargetTest = _always


class OpStrategy:
    """The implementations of one op, best (highest priority) first; ties keep the order
    they were added in."""

    def __init__(self, op: str) -> None:
        self.op = op
        self._impls: list[Implementation] = []

    def add(self, impl: Implementation) -> None:
        """Add ``impl`` in its place by priority."""
        self._impls.append(impl)
        self._impls.sort(key=lambda i: -i.priority)  # stable: ties keep insertion order

    def remove(self, name: str) -> None:
        """Drop the implementation called ``name`` (a test's registration, undone)."""
        self._impls = [i for i in self._impls if i.name != name]

    @property
    def implementations(self) -> list[Implementation]:
        """Every implementation, best first."""
        return list(self._impls)


class StrategyTable:
    """A backend's strategies, by op name. An entry is one call: :meth:`add` or the
    :meth:`register` decorator on a compute function."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._ops: dict[str, OpStrategy] = {}

    def add(self, op: str, impl: Implementation) -> Implementation:
        """Register ``impl`` for ``op``; returns it."""
        self._ops.setdefault(op, OpStrategy(op)).add(impl)
        return impl

    def register(
        self,
        op: str,
        name: str,
        *,
        schedule: AnchorSchedule = no_schedule,
        task: Task | None = None,
        priority: int = 0,
        supports: TargetTest = _always,
    ) -> Callable[[Compute], Compute]:
        """Decorate a compute function to register it for ``op`` (returned unchanged)."""

        def wrap(compute: Compute) -> Compute:
            self.add(op, Implementation(name, compute, schedule, task, priority, supports))
            return compute

        return wrap

    @contextmanager
    def registered(self, op: str, impl: Implementation) -> Iterator[Implementation]:
        """``impl`` registered for ``op`` inside the block only."""
        self.add(op, impl)
        try:
            yield impl
        finally:
            self._ops[op].remove(impl.name)

    def strategy(self, op: str) -> OpStrategy | None:
        """The :class:`OpStrategy` of ``op``, None where no implementation is registered."""
        return self._ops.get(op)

    def implementations(self, op: str, target: Target | None = None) -> list[Implementation]:
        """The implementations of ``op`` that may run on ``target``, best first."""
        strat = self._ops.get(op)
        if strat is None:
            return []
        return [i for i in strat.implementations if i.supports(target)]

    def compute(
        self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any], target: Target | None = None
    ) -> tuple[list[Tensor], Implementation] | None:
        """The outputs of the first implementation of ``op`` that takes the workload, and
        that implementation (the group's anchor); None where none does."""
        for impl in self.implementations(op, target):
            outs = impl.compute(inputs, attrs)
            if outs is not None:
                return outs, impl
        return None

    def task(
        self,
        op: str,
        in_types: Sequence[TensorType],
        attrs: dict[str, Any],
        target: Target | None = None,
    ) -> tuple[Any, ...] | None:
        """The tuning task of the first implementation of ``op`` that names one for the
        workload (``(name, args)`` or ``(name, args, fixed knobs)``, see :data:`Task`), in
        the order :meth:`compute` tries them; None where none does."""
        for impl in self.implementations(op, target):
            hit = impl.task(in_types, attrs) if impl.task is not None else None
            if hit is not None:
                return hit
        return None


def schedule_anchors(
    s: Schedule, outputs: list[Tensor], anchors: Sequence[Implementation]
) -> set[int]:
    """Run each anchor's schedule on ``s`` once (it looks for every stage of its own, so
    two nodes on one template, or two implementations sharing a schedule, need one run);
    the ids of every op they scheduled."""
    done: set[int] = set()
    for schedule in dict.fromkeys(impl.schedule for impl in anchors):
        done |= schedule(s, outputs)
    return done


def output_ops(outputs: Sequence[Tensor]) -> list[Operation]:
    """The operations behind ``outputs``, each once (a tuple reduction has several outputs)."""
    ops: dict[int, Operation] = {}
    for t in outputs:
        ops.setdefault(id(t.op), t.op)
    return list(ops.values())


def inline_injective(
    s: Schedule, outputs: Sequence[Tensor], done: AbstractSet[int] = frozenset()
) -> list[Stage]:
    """Inline every compute without a reduction that is not an output; return the stages
    left for a generic schedule. Stages an anchor scheduled (``done``) are left as they are.

    Padding stages stay: a reduction reading a padded copy indexes it affinely and
    vectorizes, where an inlined bounds test per tap would not."""
    out_ops = {id(t.op) for t in outputs}
    kept = []
    for st in s.stages:
        if not isinstance(st.op, ComputeOp) or id(st.op) in done:
            continue
        if id(st.op) in out_ops or st.op.reduce_axis or st.op.tag == "pad":
            kept.append(st)
        else:
            st.compute_inline()
    return kept
