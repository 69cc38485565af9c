"""Sketches: schedule step lists whose tile sizes and annotations are still symbols.

A sketch is what Ansor's sketch rules make of a compute DAG before any parameter is
chosen: the *structure* of a schedule (which stages are inlined, tiled, cached, fused,
factored) as a list of :mod:`~ember.tuner.auto.steps` whose split factors, annotation
kinds and unroll depths are :class:`Sym` s naming a tuner knob. The rules
(:mod:`ember.tuner.auto.rules`) write sketches through a :class:`SketchBuilder`, which
keeps a live schedule of the DAG and applies every step to it with placeholder values,
so that each step names the stages and loop indices that exist at that point (the
structure does not depend on the values). :func:`concretize` turns a sketch and a
config's knob values into the plain step list that :func:`~ember.tuner.auto.steps.
apply_steps` replays and records store.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ember.tir.schedule.schedule import Schedule, Stage, create_schedule
from ember.tir.te.tensor import IterVar, Tensor
from ember.tuner.auto import steps as st
from ember.tuner.auto.dag import DagInfo, analyze
from ember.tuner.auto.steps import ReplayState, dag_outputs, stage_names


@dataclass(frozen=True)
class Sym:
    """A value chosen by knob ``knob``: for a split knob, the product of its factors
    ``[lo:hi]`` (outer factor first); for a plain knob (``lo < 0``), its value."""

    knob: str
    lo: int = -1
    hi: int | None = None

    def resolve(self, values: Callable[[str], Any]) -> Any:
        value = values(self.knob)
        if self.lo < 0:
            return value
        return math.prod(value[self.lo : self.hi])


@dataclass(frozen=True)
class Prod:
    """The product of several symbols (a GPU block's thread count across its axes)."""

    parts: tuple[Sym, ...]

    def resolve(self, values: Callable[[str], Any]) -> Any:
        return math.prod(p.resolve(values) for p in self.parts)


Symbol = (Sym, Prod)


@dataclass(frozen=True)
class KnobDecl:
    """A knob a sketch needs: ``split`` (``extent`` into ``parts`` factors, each inner
    factor at most ``max_factor``) or ``choice`` (one of ``candidates``, first default)."""

    name: str
    kind: str
    extent: int = 0
    parts: int = 2
    max_factor: int | None = None
    candidates: tuple[Any, ...] = ()


@dataclass
class Sketch:
    """A named symbolic step list and the knobs its symbols name."""

    name: str
    steps: list[st.Step] = field(default_factory=list)
    knobs: dict[str, KnobDecl] = field(default_factory=dict)
    # (description, symbol, limit): a config of this sketch needs symbol <= limit
    limits: list[tuple[str, Sym | Prod, int]] = field(default_factory=list)

    def describe(self) -> str:
        """The steps, one per line, symbols shown as ``$knob``."""
        return "\n".join(" ".join(_show(x) for x in s.to_json()) for s in self.steps)


def _show(x: Any) -> str:
    if isinstance(x, Prod):
        return "*".join(_show(p) for p in x.parts)
    if isinstance(x, Sym):
        return f"${x.knob}" + ("" if x.lo < 0 else f"[{x.lo}:{'' if x.hi is None else x.hi}]")
    if isinstance(x, (list, tuple)):
        return "[" + ",".join(_show(v) for v in x) + "]"
    return str(x)


DROPPED = ("none", 0)  # an annotation or pragma whose knob chose these is left out


def concretize(sketch: Sketch, values: Callable[[str], Any]) -> list[st.Step]:
    """The plain steps of ``sketch`` for the knob values ``values(name)`` gives (a split
    knob's factor list, a choice knob's value); annotations chosen ``"none"`` and
    pragmas chosen ``0`` are left out (they change no loop structure)."""
    out: list[st.Step] = []
    for step in sketch.steps:
        changes = {}
        for f in fields(step):
            v = getattr(step, f.name)
            if isinstance(v, Symbol):
                changes[f.name] = v.resolve(values)
            elif isinstance(v, tuple) and any(isinstance(x, Symbol) for x in v):
                changes[f.name] = tuple(
                    x.resolve(values) if isinstance(x, Symbol) else x for x in v
                )
        step = replace(step, **changes) if changes else step
        if isinstance(step, st.Annotate) and step.how in DROPPED:
            continue
        if isinstance(step, st.Pragma) and step.value in DROPPED:
            continue
        out.append(step)
    return out


def _placeholder(v: Any, knobs: dict[str, KnobDecl]) -> Any:
    """A stand-in for a symbol while the builder applies a step: factor 1, first choice."""
    if isinstance(v, Prod):
        return 1
    if not isinstance(v, Sym):
        return v
    decl = knobs[v.knob]
    return 1 if v.lo >= 0 else decl.candidates[0]


class SketchBuilder:
    """Writes one sketch: each method records a (symbolic) step and applies it to a live
    schedule of the DAG, so later steps see the stages and loops it made."""

    def __init__(self, tensors: Sequence[Tensor], name: str, prefix: str = "") -> None:
        self.tensors = list(tensors)
        self.schedule: Schedule = create_schedule([t.op for t in dag_outputs(tensors)])
        self.state = ReplayState(self.schedule)
        self.sketch = Sketch(name)
        self.prefix = prefix
        self.done: set[str] = set()  # stages a rule has scheduled

    # -- stages, loops, knobs -----------------------------------------------------------
    def stage(self, name: str) -> Stage:
        return self.state.stage(name)

    def name_of(self, stage: Stage) -> str:
        return next(n for n, s in stage_names(self.schedule).items() if s is stage)

    def loops(self, name: str) -> list[IterVar]:
        return list(self.stage(name).leaf_iter_vars)

    def index(self, name: str, iv: IterVar) -> int:
        return self.stage(name).leaf_iter_vars.index(iv)

    def split_knob(self, what: str, extent: int, parts: int, max_factor: int | None = 64) -> str:
        name = self.prefix + what
        self.sketch.knobs[name] = KnobDecl(name, "split", extent, parts, max_factor)
        return name

    def choice_knob(self, what: str, candidates: Sequence[Any]) -> str:
        name = self.prefix + what
        self.sketch.knobs[name] = KnobDecl(name, "choice", candidates=tuple(candidates))
        return name

    # -- steps ------------------------------------------------------------------------
    def add(self, step: st.Step) -> None:
        """Record ``step`` and apply it (symbols replaced by placeholders)."""
        self.sketch.steps.append(step)
        if isinstance(step, (st.Annotate, st.Pragma)):
            return  # no structural effect; the placeholder kind might not fit the loop
        changes = {}
        for f in fields(step):
            v = getattr(step, f.name)
            if isinstance(v, tuple):
                changes[f.name] = tuple(_placeholder(x, self.sketch.knobs) for x in v)
            else:
                changes[f.name] = _placeholder(v, self.sketch.knobs)
        replace(step, **changes).apply(self.state)

    def split(self, stage: str, iv: IterVar, factors: Sequence[Any]) -> list[IterVar]:
        """Split loop ``iv`` by ``factors`` (inner extents, symbols allowed); the new loops."""
        pos = self.index(stage, iv)
        self.add(st.Split(stage, pos, tuple(factors)))
        return self.loops(stage)[pos : pos + len(factors) + 1]

    def reorder(self, stage: str, order: Sequence[IterVar]) -> None:
        loops = self.loops(stage)
        rest = [iv for iv in loops if iv not in order]
        full = list(order) + rest if rest else list(order)
        self.add(st.Reorder(stage, tuple(loops.index(iv) for iv in full)))

    def fuse(self, stage: str, ivs: Sequence[IterVar]) -> IterVar:
        """Fuse adjacent loops; no loops make a new outer loop of extent 1."""
        if not ivs:
            self.add(st.Fuse(stage, ()))
            return self.loops(stage)[0]
        if len(ivs) == 1:
            return ivs[0]
        first = self.index(stage, ivs[0])
        self.add(st.Fuse(stage, tuple(self.index(stage, iv) for iv in ivs)))
        return self.loops(stage)[first]

    def annotate(self, stage: str, iv: IterVar, how: Any) -> None:
        self.add(st.Annotate(stage, self.index(stage, iv), how))

    def pragma(self, stage: str, iv: IterVar, key: str, value: Any) -> None:
        self.add(st.Pragma(stage, self.index(stage, iv), key, value))

    def bind(self, stage: str, iv: IterVar, thread: str) -> None:
        self.add(st.Bind(stage, self.index(stage, iv), thread))

    def limit(self, what: str, symbol: Sym | Prod, most: int) -> None:
        """Configs of this sketch must keep ``symbol`` at most ``most``."""
        self.sketch.limits.append((what, symbol, most))

    def cache_read(self, tensor_stage: str, scope: str, readers: Sequence[str]) -> str:
        """A ``scope`` copy of ``tensor_stage``'s output for ``readers``; its stage name."""
        before = set(map(id, self.schedule.stages))
        self.add(st.CacheRead(tensor_stage, scope, tuple(readers)))
        new = next(x for x in self.schedule.stages if id(x) not in before)
        return self.name_of(new)

    def compute_at(self, stage: str, target: str, iv: IterVar) -> None:
        self.add(st.ComputeAt(stage, target, self.index(target, iv)))

    def inline(self, stage: str) -> None:
        self.add(st.ComputeInline(stage))

    def cache_write(self, stage: str, scope: str) -> str:
        """Cache ``stage`` in ``scope``; the cache stage's name (``stage`` is the copy)."""
        self.add(st.CacheWrite(stage, scope))
        cache = self.schedule.stages[self.schedule.stages.index(self.stage(stage)) - 1]
        return self.name_of(cache)

    def rfactor(self, stage: str, iv: IterVar, factor_axis: int = 0) -> str:
        """Factor ``stage``'s reduction over loop ``iv``; the new ``.rf`` stage's name."""
        self.add(st.Rfactor(stage, self.index(stage, iv), factor_axis))
        rf = self.schedule.stages[self.schedule.stages.index(self.stage(stage)) - 1]
        return self.name_of(rf)


Rule = Callable[[SketchBuilder, DagInfo, str], "list[Variant] | None"]
Variant = tuple[str, Callable[[SketchBuilder], None]]


def dag_info(tensors: Sequence[Tensor]) -> DagInfo:
    """The :class:`DagInfo` of a workload's tensors, stages named as steps name them."""
    s = create_schedule([t.op for t in dag_outputs(tensors)])
    return analyze(tensors, {n: stg.op for n, stg in stage_names(s).items()})


def generate_sketches(
    tensors: Sequence[Tensor], rules: Sequence[Rule], max_sketches: int = 8
) -> list[Sketch]:
    """Every combination of the rules' variants, stage by stage from the outputs back
    (Ansor's order), up to ``max_sketches``. For each stage the first rule that applies
    (returns variants) decides; a rule may schedule other stages too (a fused epilogue),
    which then match a rule that leaves them alone."""
    info = dag_info(tensors)
    order = list(reversed(info.stages))
    combos: list[list[int]] = [[]]
    sketches: list[Sketch] = []
    while combos and len(sketches) < max_sketches:
        picks = combos.pop(0)
        k = len(sketches)
        b = SketchBuilder(tensors, "", prefix=f"s{k}.")
        labels: list[str] = []
        depth = 0
        for name in order:
            if name in b.done:
                continue
            for rule in rules:
                variants = rule(b, info, name)
                if variants is None:
                    continue
                if len(variants) > 1:
                    if depth >= len(picks):  # a new branch point: queue the other variants
                        for alt in range(1, len(variants)):
                            combos.append([*picks, alt])
                        picks = [*picks, 0]
                    label, build = variants[picks[depth]]
                    depth += 1
                else:
                    label, build = variants[0]
                build(b)
                b.done.add(name)
                labels.append(label)
                break
        name = "+".join(x for x in labels if x) or "default"
        taken = {sk.name for sk in sketches}
        b.sketch.name = name if name not in taken else f"{name}#{k}"
        sketches.append(b.sketch)
    return sketches
