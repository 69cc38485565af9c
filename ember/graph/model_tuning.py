"""``ember.extract_tasks``: the tuning tasks behind a model's graph kernels.

Sits on top, beside ``ember.compile``: it runs the compile driver's first two steps
(import, the backend's graph passes: ``compile.py``) and asks the target's backend
(its strategy) which template task each node's kernel takes:
convolutions the conv strategy takes become ``conv2d_nchw.llvm`` tasks, ``dense_packed``
GEMMs ``dense_packed.llvm`` tasks (the graph's kernel over its packed weights), fp16/bf16
GEMMs on CUDA ``matmul_tensorcore.cuda`` ones.
A blocked convolution's task (``conv2d_NCHWc.llvm``) holds the channel blocks the untuned
graph gives that node fixed: the graph can run no other, so no trial is spent on them,
and one workload at two places with other blocks is two tasks. The tuner
cannot do this itself (it never imports the graph compiler or a code generator), so
the result is a plain list that :func:`ember.tuner.tune_tasks` takes.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.backend import Backend, get_backend
from ember.errors import ArgumentError, ConfigError, EmberError
from ember.frontend.graph import SHAPES_HINT, Graph
from ember.graph.compile import compile as compile_model
from ember.graph.compile import import_model, optimize
from ember.graph.group_tasks import auto_schedulable, group_task
from ember.graph.groups import fused_groups, group_io, group_spec
from ember.target import Target
from ember.tuner.records import move_records, read_records
from ember.tuner.retime import Retimed
from ember.tuner.task import create_task, workload_key


@dataclass
class ModelTask:
    """A distinct tuning task of a model and how many of its kernels use it. ``nodes``:
    the names of the graph nodes it covers (the summary's label); ``wheres``: how those
    nodes name themselves in a step's ``where`` (names alone are ambiguous: a layout
    transform the layout pass adds for a conv keeps the conv's name)."""

    task: Any
    weight: int
    nodes: list[str]
    wheres: list[str] = field(default_factory=list)


SEARCHES = ("templates", "auto", "both")


def extract_tasks(
    model: Any,
    target: str | Target | Backend = "llvm",
    shapes: Any = None,
    graph_passes: Sequence[Any] | None = None,
    search: str = "templates",
) -> list[ModelTask]:
    """The distinct tuning tasks behind ``model``'s kernels for ``target``, in graph
    order, each with its weight (the number of nodes or groups that run it).

    ``search``: ``"templates"`` (the template task of each node a strategy takes),
    ``"auto"`` (every fused group as an auto-scheduling task, :mod:`.group_tasks`) or
    ``"both"``. A target whose backend has no tuning tasks gives ``ArgumentError``."""
    if search not in SEARCHES:
        raise ArgumentError(f"extract_tasks: search must be one of {SEARCHES}, got {search!r}")
    backend = get_backend(target)
    if not _has_tasks(backend):
        raise ArgumentError(f"extract_tasks: target {backend.target} has no tunable graph kernels")
    graph = import_model(model, shapes)  # 1. import
    _require_static_inputs(graph)
    graph = optimize(graph, backend, graph_passes)  # 2. the same graph passes as compile
    found: dict[tuple[str, ...], ModelTask | None] = {}
    if search in ("templates", "both"):
        for node, name, args, fixed in _node_tasks(graph, backend):
            _count(
                found,
                (name, workload_key(name, args), json.dumps(sorted(fixed.items()))),
                [node],
                functools.partial(create_task, name, args, backend.target, fixed),
            )
    if search in ("auto", "both"):
        for nodes in fused_groups(graph):
            if any(n.subgraphs for n in nodes):
                continue  # If/Loop bodies are compiled on their own; not tuned here
            io = group_io(graph, nodes)
            key = ("auto", group_spec(io))
            if key not in found:
                if not auto_schedulable(io, backend):
                    continue
                try:
                    found[key] = ModelTask(group_task(io, backend), 0, [])
                except EmberError:  # no sketch fits (an extern kernel): the group stays untuned
                    continue
            _count(found, key, nodes, lambda: None)
    return [mt for mt in found.values() if mt is not None]


def weight_bytes(model: Any, shapes: Any = None) -> int:
    """Bytes of ``model``'s constants (weights, biases, tables) as imported."""
    return sum(int(a.nbytes) for a in import_model(model, shapes).params.values())


def _count(
    found: dict[tuple[str, ...], ModelTask | None],
    key: tuple[str, ...],
    nodes: list[Any],
    make: Callable[[], Any],
) -> None:
    """Count ``nodes`` for the task ``key``, made the first time; a task whose fixed knob
    values its template does not offer is left out (None): no config of it could run
    there, so no trial is spent on it and its nodes run the template's fallback."""
    if key not in found:
        try:
            found[key] = ModelTask(make(), 0, [])
        except ConfigError:
            found[key] = None
    mt = found[key]
    if mt is not None:
        mt.weight += 1
        mt.nodes.extend(n.name for n in nodes)
        mt.wheres.extend(n.where() for n in nodes)


def _has_tasks(backend: Backend) -> bool:
    """Whether the backend names tuning tasks at all (a target without any is refused,
    rather than reported as a model with nothing to tune)."""
    return backend.strategy is not None or type(backend).task_for is not Backend.task_for


def _require_static_inputs(graph: Graph) -> None:
    """Tasks are per shape: a symbolic input would leave its kernels out unseen."""
    loose = [f"'{v.name}' {v.type}" for v in graph.inputs if not v.type.is_static]
    if loose:
        raise ArgumentError(
            f"extract_tasks: input {', '.join(loose)} has symbolic dims; tuning needs the "
            f"shapes the model will run at {SHAPES_HINT}"
        )


def _node_tasks(
    graph: Graph, backend: Backend
) -> list[tuple[Any, str, tuple[Any, ...], dict[str, Any]]]:
    """``(node, template name, args, fixed knobs)`` of each node a strategy names a task
    for; the fixed knobs (a blocked conv's channel blocks in this graph) are what the node
    can run, so its task searches only configs with them."""
    out = []
    for node in graph.nodes:
        if node.subgraphs:
            continue  # If/Loop bodies are compiled on their own; not tuned here
        in_types = [graph.values[i].type for i in node.inputs]
        if any(not t.is_static for t in in_types):
            continue
        hit = backend.task_for(node.op, in_types, node.attrs)
        if hit is not None:
            name, args, *fixed = hit
            out.append((node, name, args, dict(fixed[0]) if fixed else {}))
    return out


# -- keeping only the records that make the whole model faster -----------------------------
#
# A kernel tuned alone can slow the model it runs in: its records may change a layout that
# its neighbours then pay for, or win on warm caches what it loses with the model's cold
# weights (apache/tvm#9269). So after tuning, the model is compiled with and without the
# records and timed by turns, and a task's records that make it slower are dropped.

Timer = Callable[[frozenset[str]], float]


@dataclass
class RecordChoice:
    """Which tasks' records :func:`drop_slow_records` kept, and the model time (in the
    timer's units) of every set of kept tasks it timed: ``times[frozenset()]`` is the
    untuned model, ``times[all]`` the model with every record."""

    kept: frozenset[str]
    dropped: list[str]
    times: dict[frozenset[str], float]
    confirmed: float | None = None  # the longer timer's ratio of the kept set to none

    @property
    def untuned(self) -> float:
        return self.times[frozenset()]

    @property
    def final(self) -> float:
        return self.times[self.kept]


def drop_slow_records(
    keys: Sequence[str],
    timer: Timer,
    tolerance: float = 0.03,
    passes: int = 2,
    on_time: Callable[[frozenset[str], float], None] | None = None,
    suspects: Collection[str] | None = None,
    confirm: Timer | None = None,
) -> RecordChoice:
    """Greedily drop the tasks (``keys``, most suspect first) whose records slow the model.

    ``timer(kept)`` is the model's time with the records of the ``kept`` tasks only. Each
    task in turn is left out; where that makes the model faster by more than
    ``tolerance`` (a fraction: the noise), its records are dropped for good. Up to
    ``passes`` rounds over the tasks still kept. Last, should the kept records still leave
    the model slower than none by more than ``tolerance``, all are dropped: the result is
    never slower than the untuned model beyond noise. ``on_time(kept, time)`` is called
    after each timing (progress).

    Each timing compiles the model anew, so with ``suspects`` (tasks whose kernels ran
    slower in the tuned model's profile) only those are tried while the kept records
    make the model no slower than none; every task is tried once they do.

    ``confirm`` (a longer timer): a drop must be seen again by it, both sets timed anew.
    Leaving each of thirty tasks out in turn, the fastest-looking timing is the lowest of
    thirty noisy ones; on ResNet-18 such one-off timings dropped records that helped.
    It also has the last word on the set kept (:func:`_confirmed`): on the BERT encoder
    the short timings kept eight tasks' records that the longer timer put at 1.065x, and
    they were kept."""
    times: dict[frozenset[str], float] = {}

    def time_of(kept: frozenset[str]) -> float:
        if kept not in times:
            times[kept] = timer(kept)
            if on_time is not None:
                on_time(kept, times[kept])
        return times[kept]

    def seen_again(without: frozenset[str], kept: frozenset[str]) -> bool:
        if confirm is None:
            return True
        return confirm(without) < confirm(kept) * (1 - tolerance)

    def worth_trying(key: str) -> bool:
        slower = time_of(kept) > untuned * (1 + tolerance)
        return key in kept and (suspects is None or key in suspects or slower)

    untuned = time_of(frozenset())
    kept = frozenset(keys)
    current = time_of(kept)
    for _ in range(passes):
        changed = False
        for key in keys:
            if not worth_trying(key):
                continue
            without = kept - {key}
            if time_of(without) < current * (1 - tolerance) and seen_again(without, kept):
                kept, current, changed = without, time_of(without), True
        if not changed:
            break
    if current > untuned * (1 + tolerance):
        kept = frozenset()
    confirmed = None
    if kept and confirm is not None:
        kept, confirmed = _confirmed(kept, keys, confirm, tolerance)
    return RecordChoice(kept, [k for k in keys if k not in kept], times, confirmed)


def _confirmed(
    kept: frozenset[str], keys: Sequence[str], confirm: Timer, tolerance: float
) -> tuple[frozenset[str], float]:
    """``kept`` if the longer timer finds the model with it no slower than with no records
    (beyond ``tolerance``); else the tasks left out one at a time, most suspect first,
    keeping each removal that makes it faster, until it is; else no records at all. With
    the longer timer's ratio of the set returned to no records."""
    base = confirm(frozenset())
    current = confirm(kept)
    for key in [k for k in keys if k in kept]:
        if current <= base * (1 + tolerance):
            break
        without = kept - {key}
        t = confirm(without) if without else base
        if t < current:
            kept, current = without, t
    if current > base * (1 + tolerance):
        return frozenset(), 1.0
    return kept, current / base


class ModelTimer:
    """Times a model compiled with the records of some tasks against the untuned model, by
    turns: ``blocks`` alternating blocks of ``number`` runs each, with a pause between
    them, so load from elsewhere falls on both alike. A call gives the ratio of the two
    fastest blocks (the untuned model is 1.0); ``spread[kept]`` keeps the quartiles of the
    ratios of a block of the set's to the untuned block timed beside it, in its last
    call: the middle half of what the noise lets that ratio read, for a prediction to be
    held against (the extremes are one stalled block each: on a loaded host MobileNetV2's
    ran from -9.4% to +17.6%)."""

    def __init__(
        self,
        model: Any,
        records: dict[str, list[Any]],
        target: str | Target | Backend = "llvm",
        shapes: Any = None,
        blocks: int = 5,
        block_s: float = 0.1,
        pause_s: float = 0.02,
    ) -> None:
        self.model, self.records, self.target, self.shapes = model, records, target, shapes
        self.blocks, self.block_s, self.pause_s = blocks, block_s, pause_s
        self._compiled: dict[frozenset[str], Any] = {}
        self.seconds = 0.0  # the untuned model's fastest block in the last call
        self.spread: dict[frozenset[str], tuple[float, float]] = {}
        self._dir = tempfile.TemporaryDirectory(prefix="ember-model-check-")
        self.inputs = self.compiled(frozenset())._example(None)

    def compiled(self, kept: frozenset[str]) -> Any:
        """The model compiled with the records of the ``kept`` tasks (cached)."""
        if kept not in self._compiled:
            path = None
            if kept:
                path = Path(self._dir.name) / f"kept{len(self._compiled)}.jsonl"
                lines = [r.to_line() for k in sorted(kept) for r in self.records[k]]
                path.write_text("\n".join(lines) + "\n")
            # a path keeps apply_history_best's host-device filter (records are this host's)
            self._compiled[kept] = compile_model(
                self.model, self.target, records=None if path is None else str(path),
                shapes=self.shapes,
            )  # fmt: skip
        return self._compiled[kept]

    def forget(self, kept: frozenset[str]) -> None:
        """Let go of the model compiled for ``kept`` (its weights and workspace): a timer
        that compiles one model per task would otherwise hold them all."""
        self._compiled.pop(kept, None)

    def __call__(self, kept: frozenset[str], blocks: int | None = None) -> float:
        """The ratio for ``kept`` over ``blocks`` blocks of each (default: the timer's)."""
        if not kept:
            return 1.0
        base = self.compiled(frozenset())
        try:
            cand = self.compiled(kept)
        except EmberError:  # records the model cannot compile with are as bad as can be
            return math.inf
        base.run(self.inputs), cand.run(self.inputs)  # warm-up
        start = time.perf_counter()
        base.run(self.inputs)
        number = max(1, int(self.block_s / max(time.perf_counter() - start, 1e-6)))
        best = {id(base): math.inf, id(cand): math.inf}
        pairs = []
        for k in range(self.blocks if blocks is None else blocks):
            block = {}
            for m in (base, cand) if k % 2 == 0 else (cand, base):
                start = time.perf_counter()
                for _ in range(number):
                    m.run(self.inputs)
                block[id(m)] = (time.perf_counter() - start) / number
                best[id(m)] = min(best[id(m)], block[id(m)])
                time.sleep(self.pause_s)
            pairs.append(block[id(cand)] / block[id(base)])
        self.seconds = best[id(base)]
        q1, _, q3 = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else pairs * 3
        self.spread[kept] = (q1, q3)
        return best[id(cand)] / best[id(base)]

    def close(self) -> None:
        self._dir.cleanup()


@dataclass
class ModelCheck:
    """What timing the whole model with and without its tuning records found.

    ``untuned_s``: seconds per run of the model without records (its fastest block);
    ``tuned`` and ``final``: the model with every record, and with the kept ones, as a
    ratio to the untuned model; ``task_s``: the untuned model's seconds in each task's
    kernels (its profile, summed over the task's nodes; a kernel that a template task
    and an auto task both cover counts for each); ``untuned_groups``: the kernels no
    task covers (no template), ``(ops, seconds)``, slowest first; ``kernels``: each
    covered kernel's seconds with the keys of the tasks covering it; ``tuned_kernels``:
    the same kernels' seconds in the profile of the model with every record (empty where
    that model did not compile), to show what each tuned kernel saved where it runs;
    ``final_spread``: the quartiles of the ratios of the kept records' blocks to the
    untuned blocks beside them in the timing that gave ``final`` (None: nothing kept)."""

    choice: RecordChoice
    untuned_s: float
    tuned: float
    final: float
    task_s: dict[str, float]
    untuned_groups: list[tuple[str, float]]
    profile_s: float
    moved: int = 0
    kernels: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)
    tuned_kernels: list[float] = field(default_factory=list)
    final_spread: tuple[float, float] | None = None


def task_times(
    profile: Any, tasks: Sequence[ModelTask]
) -> tuple[dict[str, float], list, list[tuple[float, tuple[str, ...]]]]:
    """Seconds of each task's kernels in ``profile`` (a ``ModelProfile``), by task key;
    the ``(ops, seconds)`` of the steps no task covers; and each covered step's
    ``(seconds, keys of the tasks covering it)``. With ``--search both`` a conv's kernel
    is covered by its template task and its group's auto task, and either's record
    would replace it, so each is given the step's time."""
    spent: dict[str, float] = {mt.task.key: 0.0 for mt in tasks}
    rest, kernels = [], []
    for step in profile.steps:
        owners = [mt for mt in tasks if any(w in step.where for w in mt.wheres)]
        if not owners:
            if step.seconds > 0:  # else a step with nothing to run (a reshape's view)
                rest.append((step.ops, step.seconds))
            continue
        for mt in owners:
            spent[mt.task.key] += step.seconds
        kernels.append((step.seconds, tuple(dict.fromkeys(mt.task.key for mt in owners))))
    return spent, sorted(rest, key=lambda r: -r[1]), kernels


def retime_in_model(
    model: Any,
    log: str | Path,
    tasks: Sequence[ModelTask],
    target: str | Target | Backend = "llvm",
    shapes: Any = None,
    rounds: int = 3,
    number: int = 10,
    on_task: Callable[[str, Retimed], None] | None = None,
) -> dict[str, Retimed]:
    """Each task's pick against the kernel the untuned model runs, timed in the model: the
    model compiled with that task's records alone, both models profiled by turns over
    ``rounds`` rounds of ``number`` runs, the task's kernels' seconds summed per profile
    (a :class:`ember.tuner.retime.Retimed` of their medians, as a pick re-timed alone).

    Why not the kernel alone, even with the caches flushed: in the model its input was
    just written by the kernel before it, on the cores that will read it, its weights
    come from wherever the rest of the model left them, and which of those a schedule
    handles better is what decides. On the BERT encoder the picks for a 256x256 GEMM and
    the layer norm, re-timed alone at 1.36x and 1.06x their fallbacks, predicted -8.3% of
    the model's time; its profile showed -1.7%, and timed whole it moved -0.1%. Tasks
    whose records do not compile, or whose kernels the profile does not show, get no
    figure (the model check deals with them)."""
    by_task = records_by_task(log, {mt.task.key for mt in tasks})
    timer = ModelTimer(model, by_task, target, shapes)
    found: dict[str, Retimed] = {}
    try:
        base = timer.compiled(frozenset())
        for mt in tasks:
            key = mt.task.key
            if key not in by_task:
                continue
            try:
                cand = timer.compiled(frozenset({key}))
            except EmberError:
                continue
            times: dict[int, list[float]] = {id(base): [], id(cand): []}
            for r in range(rounds):
                for m in (base, cand) if r % 2 == 0 else (cand, base):
                    spent, _, _ = task_times(m.profile(timer.inputs, number), [mt])
                    times[id(m)].append(spent[key])
            before, after = (statistics.median(times[id(m)]) for m in (base, cand))
            timer.forget(frozenset({key}))  # one model a task held at once: ResNet-50's is 0.1 GB
            if before > 0 and after > 0:
                found[key] = Retimed(before, after, rounds)
                if on_task is not None:
                    on_task(key, found[key])
    finally:
        timer.close()
    return found


def records_by_task(log: str | Path, keys: set[str]) -> dict[str, list[Any]]:
    """The valid records of ``log`` for the tasks ``keys``, by task key."""
    by_task: dict[str, list[Any]] = {}
    for rec in read_records(log):
        if rec.task_key in keys and rec.ok:
            by_task.setdefault(rec.task_key, []).append(rec)
    return by_task


def check_records(
    model: Any,
    log: str | Path,
    tasks: Sequence[ModelTask],
    target: str | Target | Backend = "llvm",
    shapes: Any = None,
    tolerance: float = 0.03,
    on_time: Callable[[frozenset[str], float], None] | None = None,
    confirm_blocks: int = 15,
    **timing: Any,
) -> ModelCheck:
    """Time ``model`` with and without the records ``log`` holds for ``tasks``, drop (by
    :func:`drop_slow_records`) the tasks' records that slow it, and move their lines out
    of ``log`` into ``<log>.dropped``. Tasks are tried most suspect first: by how much
    their kernels slowed down in the model's profile with every record; while the model
    is no slower with the records, only the tasks whose kernels slowed down are tried.
    ``on_time``: see :func:`drop_slow_records`. ``timing``: :class:`ModelTimer`'s
    ``blocks``, ``block_s``, ``pause_s``. The kept records are timed once more at the end
    over ``confirm_blocks`` blocks, for the reported change and the last word on keeping
    them (slower than none: fewer, or none), and a drop is confirmed over as many
    (``drop_slow_records``' ``confirm``): a choice's own timing is the lowest of several
    noisy ones, as a search's best is (one ResNet-18 check read -8.8% for the
    records it kept, where timed alone afterwards they gave +0.6% and +1.6%)."""
    by_task = records_by_task(log, {mt.task.key for mt in tasks})
    timer = ModelTimer(model, by_task, target, shapes, **timing)
    try:
        untuned = timer.compiled(frozenset()).profile(timer.inputs)
        spent, rest, kernels = task_times(untuned, tasks)
        every = frozenset(by_task)
        try:
            after, _, tuned = task_times(timer.compiled(every).profile(timer.inputs), tasks)
        except EmberError:  # the timer finds which records break the compile
            after, tuned = spent, []
        if [keys for _, keys in tuned] != [keys for _, keys in kernels]:
            tuned = []  # the tuned model's steps are not the untuned one's: nothing to pair
        order = sorted(every, key=lambda k: spent[k] - after[k])  # slowed down most first
        suspects = {k for k in every if after[k] > spent[k] * (1 + tolerance)}

        def longer(kept: frozenset[str]) -> float:
            return timer(kept, confirm_blocks)

        choice = drop_slow_records(
            order, timer, tolerance, on_time=on_time, suspects=suspects, confirm=longer
        )
        final = 1.0 if choice.confirmed is None else choice.confirmed
        spread = timer.spread.get(choice.kept) if choice.confirmed is not None else None
    finally:
        timer.close()
    moved = move_records(log, set(choice.dropped)) if choice.dropped else 0
    return ModelCheck(
        choice, timer.seconds or untuned.total, choice.times[every], final,
        spent, rest, untuned.total, moved, kernels, [t for t, _ in tuned], spread,
    )  # fmt: skip
