"""Schedule steps: a small, versioned language that records how a schedule was built.

An auto-scheduled kernel (:mod:`ember.tuner.auto`) is not a template's config but the
list of schedule primitives that builds it, as Ansor records its ``TransformStep`` s.
Each step is a frozen dataclass that writes itself as a JSON list (``["split", "C", 0,
[8, 4]]``) and names

- a stage by its operation's name, with ``#k`` for the k-th stage of a repeated name
  in the schedule's stage order (``"compute#1"``): names survive a rebuild of the same
  compute DAG, while objects do not;
- an axis by its index among the stage's current loops (``leaf_iter_vars``), outer
  first, at the moment the step runs.

:func:`apply_steps` replays a list on a fresh schedule of a DAG through Ember's schedule
API (:mod:`ember.tir.schedule.schedule`), so replaying a record rebuilds the same
schedule and therefore the same TIR. A step that does not fit the schedule raises
:class:`~ember.errors.ScheduleError` naming the step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from ember.errors import ScheduleError
from ember.tir.schedule.relations import Fuse as FuseRel
from ember.tir.schedule.relations import Singleton
from ember.tir.schedule.relations import Split as SplitRel
from ember.tir.schedule.schedule import Schedule, Stage, create_schedule
from ember.tir.stmt import ForKind
from ember.tir.te.tensor import ComputeOp, IterVar, PlaceholderOp, Tensor

STEPS_VERSION = 1  # bump when a step's meaning changes: old records then no longer replay

ANNOTATIONS = ("parallel", "vectorize", "unroll")


@dataclass(frozen=True)
class Step:
    """One schedule primitive; ``kind`` is its first JSON element."""

    kind: ClassVar[str] = ""

    def to_json(self) -> list[Any]:
        """``[kind, field, ...]`` in field order; tuples become lists."""
        return [self.kind, *(_jsonable(getattr(self, f.name)) for f in fields(self))]

    def apply(self, state: ReplayState) -> None:
        """Run the primitive on ``state``'s schedule."""
        raise NotImplementedError


@dataclass(frozen=True)
class Split(Step):
    """Split loop ``axis`` into ``len(factors) + 1`` loops; ``factors`` are the inner
    loops' extents, outer first. Only the outermost loop is guarded when the product of
    the factors does not divide the extent."""

    kind: ClassVar[str] = "split"
    stage: str
    axis: int
    factors: tuple[int, ...]

    def apply(self, state: ReplayState) -> None:
        st = state.stage(self.stage)
        iv = state.axis(st, self.axis)
        if not self.factors or any(not isinstance(f, int) or f < 1 for f in self.factors):
            raise ScheduleError(f"{self}: factors must be positive ints")
        for k in range(len(self.factors)):
            _, iv = st.split(iv, factor=math.prod(self.factors[k:]))


@dataclass(frozen=True)
class Reorder(Step):
    """Put the stage's loops in ``order`` (a permutation of the current loop indices)."""

    kind: ClassVar[str] = "reorder"
    stage: str
    order: tuple[int, ...]

    def apply(self, state: ReplayState) -> None:
        st = state.stage(self.stage)
        if sorted(self.order) != list(range(len(st.leaf_iter_vars))):
            raise ScheduleError(f"{self}: not a permutation of the {len(st.leaf_iter_vars)} loops")
        st.reorder(*[st.leaf_iter_vars[i] for i in self.order])


@dataclass(frozen=True)
class Fuse(Step):
    """Fuse the adjacent loops ``axes`` (consecutive indices, outer first) into one."""

    kind: ClassVar[str] = "fuse"
    stage: str
    axes: tuple[int, ...]

    def apply(self, state: ReplayState) -> None:
        st = state.stage(self.stage)
        st.fuse(*[state.axis(st, i) for i in self.axes])


@dataclass(frozen=True)
class ComputeAt(Step):
    """Compute ``stage`` inside loop ``axis`` of its consumer ``target``."""

    kind: ClassVar[str] = "compute_at"
    stage: str
    target: str
    axis: int

    def apply(self, state: ReplayState) -> None:
        parent = state.stage(self.target)
        state.stage(self.stage).compute_at(parent, state.axis(parent, self.axis))


@dataclass(frozen=True)
class ComputeInline(Step):
    """Substitute ``stage`` into its consumers."""

    kind: ClassVar[str] = "compute_inline"
    stage: str

    def apply(self, state: ReplayState) -> None:
        state.stage(self.stage).compute_inline()


@dataclass(frozen=True)
class ComputeRoot(Step):
    """Compute ``stage`` at the root (its own loop nest)."""

    kind: ClassVar[str] = "compute_root"
    stage: str

    def apply(self, state: ReplayState) -> None:
        state.stage(self.stage).compute_root()


@dataclass(frozen=True)
class CacheWrite(Step):
    """``s.cache_write``: ``stage`` computes into a ``scope`` buffer (a new stage named
    ``<stage>.<scope>``) and becomes the copy out of it."""

    kind: ClassVar[str] = "cache_write"
    stage: str
    scope: str

    def apply(self, state: ReplayState) -> None:
        st = state.stage(self.stage)
        state.schedule.cache_write(st.op.output(0), self.scope)


@dataclass(frozen=True)
class CacheRead(Step):
    """``s.cache_read``: a ``scope`` copy of ``stage``'s output that ``readers`` read."""

    kind: ClassVar[str] = "cache_read"
    stage: str
    scope: str
    readers: tuple[str, ...]

    def apply(self, state: ReplayState) -> None:
        st = state.stage(self.stage)
        readers = [state.stage(r) for r in self.readers]
        state.schedule.cache_read(st.op.output(0), self.scope, readers)


@dataclass(frozen=True)
class Rfactor(Step):
    """``s.rfactor``: the reduction loop ``axis`` becomes data axis ``factor_axis`` of a
    new stage ``<stage>.rf``; ``stage`` then reduces over it."""

    kind: ClassVar[str] = "rfactor"
    stage: str
    axis: int
    factor_axis: int

    def apply(self, state: ReplayState) -> None:
        st = state.stage(self.stage)
        state.schedule.rfactor(st.op.output(0), state.axis(st, self.axis), self.factor_axis)


@dataclass(frozen=True)
class Annotate(Step):
    """Run loop ``axis`` in ``how``: ``parallel``, ``vectorize`` or ``unroll``."""

    kind: ClassVar[str] = "annotate"
    stage: str
    axis: int
    how: str

    def apply(self, state: ReplayState) -> None:
        if self.how not in ANNOTATIONS:
            raise ScheduleError(f"{self}: unknown annotation; use one of {ANNOTATIONS}")
        st = state.stage(self.stage)
        getattr(st, self.how)(state.axis(st, self.axis))


@dataclass(frozen=True)
class Pragma(Step):
    """A loop pragma. ``auto_unroll_max_step`` (TVM's) is applied here, since Ember's
    lowering has no pass for it: the innermost loops under ``axis`` whose extents
    multiply to at most ``value`` are unrolled (constant extents only); other keys go
    to the loop's annotations. A vectorized innermost loop counts as one step, as in
    TVM, whose ``UnrollLoop`` runs after ``VectorizeLoop`` has made it vector
    statements: the register tile around it unrolls (a local accumulator then lives in
    registers; it did not, and a 3x3 conv's cache-write sketches ran 3-60x slower)."""

    kind: ClassVar[str] = "pragma"
    stage: str
    axis: int
    key: str
    value: int

    def apply(self, state: ReplayState) -> None:
        st = state.stage(self.stage)
        iv = state.axis(st, self.axis)
        if self.key != "auto_unroll_max_step":
            st.pragma(iv, self.key, self.value)
            return
        budget = self.value
        inner_loops = list(reversed(st.leaf_iter_vars[self.axis + 1 :]))
        if inner_loops and _kind(st, inner_loops[0]) == ForKind.VECTORIZED:
            inner_loops = inner_loops[1:]  # one vector step: the loops around it may unroll
        for inner in inner_loops:
            extent = state.extent(st, inner)
            if extent is None or extent > budget or _kind(st, inner) != ForKind.SERIAL:
                break
            budget //= extent
            st.unroll(inner)


def _kind(stage: Any, iv: Any) -> ForKind:
    """The loop kind an annotation gave ``iv`` (serial without one)."""
    attr = stage.iter_attrs.get(iv)
    return ForKind.SERIAL if attr is None else attr.kind


@dataclass(frozen=True)
class Bind(Step):
    """Bind loop ``axis`` to GPU thread index ``thread`` (``"blockIdx.x"``...)."""

    kind: ClassVar[str] = "bind"
    stage: str
    axis: int
    thread: str

    def apply(self, state: ReplayState) -> None:
        st = state.stage(self.stage)
        st.bind(state.axis(st, self.axis), self.thread)


STEP_KINDS: dict[str, type[Step]] = {
    cls.kind: cls
    for cls in (
        Split,
        Reorder,
        Fuse,
        ComputeAt,
        ComputeInline,
        ComputeRoot,
        CacheWrite,
        CacheRead,
        Rfactor,
        Annotate,
        Pragma,
        Bind,
    )
}


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, (tuple, list)) else value


def step_from_json(data: Any) -> Step:
    """The step of one JSON list; ``ScheduleError`` for an unknown or malformed one."""
    if not isinstance(data, (list, tuple)) or not data or data[0] not in STEP_KINDS:
        raise ScheduleError(f"not a schedule step: {data!r}; kinds are {sorted(STEP_KINDS)}")
    cls = STEP_KINDS[data[0]]
    names = [f.name for f in fields(cls)]
    if len(data) - 1 != len(names):
        raise ScheduleError(f"step {data!r}: '{cls.kind}' takes fields {names}")
    values = [tuple(v) if isinstance(v, list) else v for v in data[1:]]
    return cls(*values)


def steps_to_json(steps: Sequence[Step]) -> dict[str, Any]:
    """``{"version": STEPS_VERSION, "steps": [[kind, ...], ...]}``: what records hold."""
    return {"version": STEPS_VERSION, "steps": [s.to_json() for s in steps]}


def steps_from_json(data: Any) -> list[Step]:
    """The steps of :func:`steps_to_json`'s output; a record of another version raises."""
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise ScheduleError(f"schedule steps must be {{'version', 'steps'}}, got {data!r}")
    if data.get("version") != STEPS_VERSION:
        raise ScheduleError(
            f"schedule steps of version {data.get('version')!r}; this Ember replays version "
            f"{STEPS_VERSION} (retune the task)"
        )
    return [step_from_json(s) for s in data["steps"]]


def format_steps(steps: Sequence[Step]) -> str:
    """One line per step, as ``ember records show`` prints them."""
    return "\n".join(" ".join(str(x).replace(" ", "") for x in s.to_json()) for s in steps)


class ReplayState:
    """A schedule being built by steps: finds stages by name and loops by index, and
    keeps the constant extent of every loop the steps made (for ``auto_unroll``)."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule

    def stage(self, ref: str) -> Stage:
        """The stage ``ref`` names (``"C"``, ``"compute#1"``)."""
        for name, st in stage_names(self.schedule).items():
            if name == ref:
                return st
        known = ", ".join(stage_names(self.schedule))
        raise ScheduleError(f"no stage '{ref}' in the schedule; its stages: {known}")

    def axis(self, st: Stage, index: int) -> IterVar:
        """Loop ``index`` of ``st``, outer first."""
        loops = st.leaf_iter_vars
        if not isinstance(index, int) or not 0 <= index < len(loops):
            raise st._error(f"a step names loop #{index}; the stage has {len(loops)} loops")
        return loops[index]

    def extent(self, st: Stage, iv: IterVar) -> int | None:
        """The constant extent of loop ``iv`` from its root axes and the stage's relations
        (before bound inference: an attached stage's loops may run shorter)."""
        return loop_extents(st).get(iv)


def loop_extents(st: Stage) -> dict[IterVar, int]:
    """Constant extents of every loop of ``st`` that has one, following splits and fuses."""
    out: dict[IterVar, int] = {}
    for iv in st.all_iter_vars:
        ext = getattr(getattr(iv.dom, "extent", None), "value", None)
        if isinstance(ext, int):
            out[iv] = ext
    for rel in st.relations:
        if isinstance(rel, SplitRel) and rel.parent in out:
            n = out[rel.parent]
            if isinstance(rel.factor, int):
                out[rel.inner], out[rel.outer] = rel.factor, -(-n // rel.factor)
            elif isinstance(rel.nparts, int):
                out[rel.outer], out[rel.inner] = rel.nparts, -(-n // rel.nparts)
        elif isinstance(rel, FuseRel) and rel.outer in out and rel.inner in out:
            out[rel.fused] = out[rel.outer] * out[rel.inner]
        elif isinstance(rel, Singleton):
            out[rel.iv] = 1
    return out


def stage_names(s: Schedule) -> dict[str, Stage]:
    """Every stage by its step name: the name of the op it was made for, ``#k`` for the
    k-th stage of a repeated name."""
    seen: dict[str, int] = {}
    out: dict[str, Stage] = {}
    for st in s.stages:
        name = st.origin_op.name  # rfactor renames a stage's op (``B.repl``), not the stage
        k = seen.get(name, 0)
        seen[name] = k + 1
        out[name if k == 0 else f"{name}#{k}"] = st
    return out


def dag_outputs(tensors: Sequence[Tensor]) -> list[Tensor]:
    """The computed tensors of a workload's tensor list (inputs are placeholders)."""
    outs = [t for t in tensors if isinstance(t.op, ComputeOp)]
    others = [t for t in tensors if not isinstance(t.op, (ComputeOp, PlaceholderOp))]
    if others or not outs:
        raise ScheduleError(
            "an auto-scheduled workload returns its input placeholders and its computed "
            f"outputs (te.compute); got {[t.op for t in tensors]}"
        )
    return outs


def apply_steps(tensors: Sequence[Tensor], steps: Sequence[Step]) -> tuple[Schedule, list[Tensor]]:
    """A fresh schedule of the DAG whose tensors (inputs and outputs) are ``tensors``,
    with ``steps`` applied in order; returns it with the tensor list, ready for
    ``ember.build(s, tensors)``."""
    s = create_schedule([t.op for t in dag_outputs(tensors)])
    state = ReplayState(s)
    for k, step in enumerate(steps):
        try:
            step.apply(state)
        except ScheduleError as e:
            e.add_context(f"while replaying schedule step #{k} {step.to_json()}")
            raise
    return s, list(tensors)
