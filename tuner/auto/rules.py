"""Ansor's sketch rules for the CPU, each a small function of one stage.

A rule looks at one stage of the DAG (:class:`~ember.tuner.auto.dag.DagInfo`) and either
does not apply (None) or returns its variants: ``(label, build)`` pairs, each writing
the stage's steps through a :class:`~ember.tuner.auto.sketch.SketchBuilder`. The
generator (:func:`~ember.tuner.auto.sketch.generate_sketches`) walks the stages from the
outputs back and lets the first rule that applies decide; several variants make several
sketches. The rules, in priority order (:data:`CPU_RULES`):

- :func:`rule_padding`: a padding stage read by a stage with data reuse (a convolution)
  is inlined, or computed whole first (two sketches; see the rule: where Ember departs
  from Ansor);
- :func:`rule_inline`: an injective stage that is not an output is inlined, unless it is
  expensive and inlining would repeat it (``DagInfo.should_inline``);
- :func:`rule_fused_consumer`: an elementwise epilogue another stage's tile is fused into
  is scheduled by that stage's rule;
- :func:`rule_tile_with_fusion`: a stage with data reuse (matmul-, conv-like) is tiled
  ``SSRSRS`` and computed inside the tiles of its elementwise consumer (at the first or
  the second spatial level: two sketches);
- :func:`rule_cache_write`: a stage with data reuse but no such consumer accumulates into
  a ``local`` cache, tiled and fused into the copy out of it; or is tiled alone;
- :func:`rule_reduce_at_rows`: an output whose reductions (and kept stages) are read
  row by row (softmax, layer norm) computes them at its parallel row loop, each row's
  data still in cache; plainly, or each reduction ``rfactor`` ed over a vector-wide inner
  split (partial sums in vector lanes);
- :func:`rule_rfactor`: a reduction over few outputs (too few to fill the cores)
  factors its reduction with ``rfactor`` so that the partial sums run in parallel; or not;
- :func:`rule_reduction` and :func:`rule_elementwise`: the rest (a reduction whose
  outputs give no vector loop, global pooling's, may also sum in vector lanes).

Annotations are parameters: each rule asks :func:`parallel`, :func:`vectorize` and
:func:`auto_unroll` for the fused outer loop, the innermost spatial loop and the
stage's unroll depth, which become choice knobs (``"none"`` and ``0`` drop the step).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ember.tir import expr as E
from ember.tir.te.tensor import IterKind, IterVar
from ember.tuner.auto.dag import DagInfo
from ember.tuner.auto.sketch import Rule, SketchBuilder, Sym, Variant

MAX_TILE = 64  # the largest inner tile factor (a vector loop LLVM still compiles quickly)
UNROLL_STEPS = (0, 16, 64)  # auto_unroll_max_step choices
RFACTOR_MAX_SPATIAL = 16  # fewer outputs than this leave cores idle ...
RFACTOR_MIN_REDUCE = 64  # ... when each sums at least this many values


def _extent(iv: IterVar) -> int:
    return int(iv.dom.extent.value)  # type: ignore[union-attr,attr-defined]


# -- annotations ---------------------------------------------------------------------------
def parallel(b: SketchBuilder, stage: str, iv: IterVar) -> None:
    """Run ``iv`` (the fused outer spatial loops) on the thread pool, or not (a knob)."""
    if iv.kind is IterKind.REDUCE:
        return
    knob = b.choice_knob(f"{stage}.parallel", ["parallel", "none"])
    b.annotate(stage, iv, Sym(knob))


def vectorize(b: SketchBuilder, stage: str, iv: IterVar) -> None:
    """Vectorize the innermost spatial loop ``iv``, or not (a knob)."""
    if iv.kind is IterKind.REDUCE:
        return
    knob = b.choice_knob(f"{stage}.vectorize", ["vectorize", "none"])
    b.annotate(stage, iv, Sym(knob))


def auto_unroll(b: SketchBuilder, stage: str) -> None:
    """TVM's ``auto_unroll_max_step`` pragma on the stage's outer loop: its innermost
    loops are unrolled up to that many steps (a knob: 0 unrolls nothing)."""
    loops = b.loops(stage)
    if loops:
        knob = b.choice_knob(f"{stage}.unroll", UNROLL_STEPS)
        b.pragma(stage, loops[0], "auto_unroll_max_step", Sym(knob))


# -- the tiling structure ---------------------------------------------------------------------
def tile_ssrsrs(b: SketchBuilder, stage: str) -> tuple[list[list[IterVar]], list[str]]:
    """Split each spatial loop in 4 and each reduction loop in 2 and order them
    ``S0 S1 R0 S2 R1 S3`` (Ansor's CPU structure); the spatial levels and the knobs."""
    op = b.stage(stage).op
    levels: list[list[IterVar]] = [[], [], [], [], [], []]  # S0 S1 R0 S2 R1 S3
    knobs = []
    for d, iv in enumerate(op.axis):  # type: ignore[attr-defined]
        k = b.split_knob(f"{stage}.tile{d}", _extent(iv), 4, MAX_TILE)
        knobs.append(k)
        s0, s1, s2, s3 = b.split(stage, iv, [Sym(k, 1, 2), Sym(k, 2, 3), Sym(k, 3, 4)])
        for lvl, loop in zip((0, 1, 3, 5), (s0, s1, s2, s3)):
            levels[lvl].append(loop)
    for d, iv in enumerate(op.reduce_axis):  # type: ignore[attr-defined]
        k = b.split_knob(f"{stage}.rtile{d}", _extent(iv), 2, MAX_TILE)
        r0, r1 = b.split(stage, iv, [Sym(k, 1, 2)])
        levels[2].append(r0)
        levels[4].append(r1)
    b.reorder(stage, [iv for lvl in levels for iv in lvl])
    return [levels[0], levels[1], levels[3], levels[5]], knobs


def schedule_tiled(b: SketchBuilder, stage: str) -> None:
    """A tiled stage at the root: outer tiles in parallel, inner vectorized, unrolled."""
    spatial, _ = tile_ssrsrs(b, stage)
    if spatial[0]:
        parallel(b, stage, b.fuse(stage, spatial[0]))
        vectorize(b, stage, spatial[3][-1])
    auto_unroll(b, stage)


def fuse_into_consumer(b: SketchBuilder, producer: str, consumer: str, level: int) -> None:
    """Tile ``producer`` and compute it inside ``consumer``'s tile loops, the consumer's
    spatial loops split by the same knobs (Ansor's follow split) down to ``level``."""
    spatial, knobs = tile_ssrsrs(b, producer)
    axes = list(b.stage(consumer).op.axis)  # type: ignore[attr-defined]
    if len(axes) != len(knobs):  # rule_tile_with_fusion checked the shapes match
        raise ValueError(f"consumer '{consumer}' of '{producer}' has another rank")
    cuts = [[Sym(k, 1, 3), Sym(k, 3, 4)] if level == 1 else
            [Sym(k, 1, 2), Sym(k, 2, 3), Sym(k, 3, 4)] for k in knobs]  # fmt: skip
    levels: list[list[IterVar]] = [[] for _ in range(len(cuts[0]) + 1)] if cuts else []
    for iv, factors in zip(axes, cuts):
        for lvl, loop in enumerate(b.split(consumer, iv, factors)):
            levels[lvl].append(loop)
    b.reorder(consumer, [iv for lvl in levels for iv in lvl])
    outer = b.fuse(consumer, levels[0])
    parallel(b, consumer, outer)
    vectorize(b, consumer, levels[-1][-1])
    b.compute_at(producer, consumer, outer if level == 1 else levels[1][-1])
    vectorize(b, producer, spatial[3][-1])
    auto_unroll(b, producer)


# -- the rules ---------------------------------------------------------------------------------
def rule_padding(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """A padding stage (tag ``"pad"``) read by a stage with data reuse: inlined into it
    (Ansor's only choice), or computed whole at the root first, its outer loops fused and
    parallel (a padded copy, a few percent of a convolution's memory traffic).

    Ember departs from Ansor here because its inlined padding reads the input through a
    clamped index (``max(min(...))``, so that the select never reads out of bounds),
    which is not affine in a vector lane: a convolution's innermost loop over output
    pixels then runs as scalar copies. On ResNet-18's 64->64 3x3 conv at 56x56 (NCHW, one
    core of a Zen 4 guest) the auto search's best inlined config ran 4.05 ms against the
    NCHWc template's 2.0; that config with the padding apart, vectorized, 2.65 ms."""
    s = info.stages[name]
    if not _is_padding(s.op) or s.is_output or not s.injective:
        return None
    if not any(info.stages[c].has_reuse for c in s.consumers):
        return None
    return [("", lambda b: b.inline(name)), ("pad", lambda b: _padded_copy(b, name))]


def _is_padding(op: Any) -> bool:
    """Tagged ``pad`` (Ember's and TVM's topi, whose tag is ``"injective,pad"``), or a
    bounds choice between one value and a constant (a hand-written pad)."""
    if "pad" in str(getattr(op, "tag", "")).split(","):
        return True
    body = None if getattr(op, "extra_bodies", ()) else op.body
    if isinstance(body, E.Call) and body.op == E.Intrinsic.IF_THEN_ELSE:
        branches = body.args[1:]
    elif isinstance(body, E.Select):
        branches = (body.true_value, body.false_value)
    else:
        return False
    return any(isinstance(x, (E.FloatImm, E.IntImm)) for x in branches)


def _padded_copy(b: SketchBuilder, name: str) -> None:
    """The padding stage at the root: every loop but the last fused and run in parallel."""
    loops = b.loops(name)
    if len(loops) > 1:
        b.annotate(name, b.fuse(name, loops[:-1]), "parallel")


def rule_inline(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """An injective stage that is not an output: inline it into its consumers."""
    if not info.should_inline(name):
        return None
    return [("", lambda b: b.inline(name))]


def rule_fused_consumer(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """An elementwise consumer of a tiled stage: its producer's rule schedules it."""
    for other, s in info.stages.items():
        if s.has_reuse and info.elementwise_consumer(other) == name:
            return [("", lambda b: None)]
    return None


def rule_tile_with_fusion(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """Data reuse and an elementwise consumer: ``SSRSRS`` tiles fused into the consumer."""
    s = info.stages[name]
    consumer = info.elementwise_consumer(name) if s.has_reuse else None
    if consumer is None:
        return None
    return [(f"tile+fuse{lvl}", _fusing(name, consumer, lvl)) for lvl in (1, 2)]


def _fusing(producer: str, consumer: str, level: int) -> Callable[[SketchBuilder], None]:
    def build(b: SketchBuilder) -> None:
        fuse_into_consumer(b, producer, consumer, level)

    return build


def _cached(b: SketchBuilder, name: str, level: int) -> None:
    cache = b.cache_write(name, "local")
    fuse_into_consumer(b, cache, name, level)


def rule_cache_write(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """Data reuse without an elementwise consumer: accumulate in a ``local`` cache whose
    tiles the copy out fuses (two levels), or tile the stage alone."""
    s = info.stages[name]
    if not s.has_reuse or s.op.num_outputs != 1:
        return None
    return [
        ("cache+fuse1", lambda b: _cached(b, name, 1)),
        ("cache+fuse2", lambda b: _cached(b, name, 2)),
        ("tile", lambda b: schedule_tiled(b, name)),
    ]


VECTOR_WIDTHS = (16, 8, 32, 4)  # vector loop widths of a row, the default first


def _lanes_knob(b: SketchBuilder, what: str, extent: int) -> Sym:
    """The width of a row's vector loop: a choice of the ``VECTOR_WIDTHS`` dividing
    ``extent`` (a few, the likely best first, rather than every factorization: a row
    has little else to tune), or an inner split factor where none divides."""
    widths = [w for w in VECTOR_WIDTHS if extent % w == 0]
    if widths:
        return Sym(b.choice_knob(what, widths))
    return Sym(b.split_knob(what, extent, 2, MAX_TILE), 1, 2)


def _split_last_vectorized(b: SketchBuilder, name: str) -> IterVar | None:
    """Split the stage's last data axis by a knob and vectorize the inner part; the outer
    part (None where the axis has extent 1)."""
    axis = list(b.stage(name).op.axis)[-1]  # type: ignore[attr-defined]
    if _extent(axis) < 2:
        return None
    outer, inner = b.split(name, axis, [_lanes_knob(b, f"{name}.vec", _extent(axis))])
    vectorize(b, name, inner)
    return outer


def _reduce_across_row(b: SketchBuilder, name: str) -> None:
    """A reduction with a row of outputs (a depthwise conv's): the row split by a vector
    width, the reduction loops between its parts (unrolled by a knob), the inner part
    vectorized, so each lane accumulates its own output."""
    loops = b.loops(name)
    n_red = len(b.stage(name).op.reduce_axis)  # type: ignore[attr-defined]
    spatial, red = loops[: len(loops) - n_red], loops[len(loops) - n_red :]
    width = _lanes_knob(b, f"{name}.vec", _extent(spatial[-1]))
    outer, inner = b.split(name, spatial[-1], [width])
    b.reorder(name, [*spatial[:-1], outer, *red, inner])
    vectorize(b, name, inner)
    knob = b.choice_knob(f"{name}.unroll", ["unroll", "none"])
    for iv in red:  # (auto_unroll stops at the vector loop, innermost here)
        b.annotate(name, iv, Sym(knob))


def _vector_rfactor(b: SketchBuilder, name: str) -> str:
    """Fuse the stage's reduction loops, split off a vector-wide inner part and
    ``rfactor`` it as the last data axis of ``<name>.rf``, whose sums run over the outer
    part with that axis innermost and vectorized (lane-wise partial sums); the stage
    then adds the lanes up. The ``.rf`` stage's name."""
    op = b.stage(name).op
    red = list(op.reduce_axis)  # type: ignore[attr-defined]
    total = math.prod(_extent(iv) for iv in red)
    fused = b.fuse(name, red)
    _, inner = b.split(name, fused, [_lanes_knob(b, f"{name}.lanes", total)])
    rf = b.rfactor(name, inner, len(op.axis))  # type: ignore[attr-defined]
    *spatial, lanes, outer = b.loops(rf)
    b.reorder(rf, [*spatial, outer, lanes])
    vectorize(b, rf, lanes)
    return rf


def schedule_rows(b: SketchBuilder, name: str, producers: Sequence[str], rf: bool) -> None:
    """``name``'s leading axes fused into a parallel row loop, its last axis split and
    vectorized; every producer (``DagInfo.row_producers``, producers first) computed at
    the row loop, its own last axis vectorized, each reduction ``rfactor`` ed over vector
    lanes where ``rf``."""
    sp = list(b.stage(name).op.axis)  # type: ignore[attr-defined]
    _split_last_vectorized(b, name)
    row = b.fuse(name, sp[:-1])
    parallel(b, name, row)
    for p in producers:
        op = b.stage(p).op
        own_row = _has_row([_extent(iv) for iv in op.axis], len(sp))  # type: ignore[attr-defined]
        if op.reduce_axis and own_row:  # type: ignore[attr-defined]
            _reduce_across_row(b, p)  # a stencil's outputs along the row: vector lanes
        elif op.reduce_axis and rf:  # type: ignore[attr-defined]
            b.compute_at(_vector_rfactor(b, p), name, row)
        elif own_row:
            _split_last_vectorized(b, p)  # softmax's exp: its row computed once
        b.compute_at(p, name, row)
        b.done.add(p)


def _has_row(spatial: Sequence[int], rank: int) -> bool:
    """Whether a stage of extents ``spatial`` has a row of its own under an output of
    rank ``rank`` (softmax's exp, a depthwise conv), not one value per row (a sum)."""
    return len(spatial) >= rank and spatial[-1] > 1


def rule_reduce_at_rows(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """An output whose kept producers are each read within one of its rows (softmax's
    max and sum, layer norm's mean, variance and reciprocal deviation): computed at its
    row loop, with plain reductions or vector-lane ``rfactor`` ed ones."""
    producers = info.row_producers(name)
    if producers is None:
        return None
    variants: list[Variant] = [("rows", lambda b: schedule_rows(b, name, producers, False))]
    rank = len(info.stages[name].spatial)
    if any(info.stages[p].reduce and not _has_row(info.stages[p].spatial, rank) for p in producers):
        variants.append(("rows+rf", lambda b: schedule_rows(b, name, producers, True)))
    return variants


def schedule_rfactor(b: SketchBuilder, name: str) -> None:
    """Fuse the reduction loops, split them, and ``rfactor`` the inner part: the partial
    sums (``<name>.rf``) run in parallel over it, the stage adds them up."""
    op = b.stage(name).op
    red = list(op.reduce_axis)  # type: ignore[attr-defined]
    total = math.prod(_extent(iv) for iv in red)
    fused = b.fuse(name, red)
    k = b.split_knob(f"{name}.rfactor", total, 2, None)
    _, inner = b.split(name, fused, [Sym(k, 1, 2)])
    rf = b.rfactor(name, inner, 0)
    parallel(b, rf, b.fuse(rf, list(b.stage(rf).op.axis)))  # type: ignore[attr-defined]
    auto_unroll(b, rf)


def rule_rfactor(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """A reduction over fewer outputs than cores, each of many values: ``rfactor`` it,
    or schedule it as a plain reduction."""
    s = info.stages[name]
    if (
        not s.reduce
        or s.has_reuse
        or s.op.num_outputs != 1
        or s.spatial_size >= RFACTOR_MAX_SPATIAL
        or s.reduce_size < RFACTOR_MIN_REDUCE
    ):
        return None
    return [
        ("rfactor", lambda b: schedule_rfactor(b, name)),
        ("reduce", lambda b: _reduce(b, name)),
    ]


def _reduce(b: SketchBuilder, name: str) -> None:
    op = b.stage(name).op
    sp = list(op.axis)  # type: ignore[attr-defined]
    if sp:
        k = b.split_knob(f"{name}.vec", _extent(sp[-1]), 2, MAX_TILE)
        outer, inner = b.split(name, sp[-1], [Sym(k, 1, 2)])
        b.reorder(name, [*sp[:-1], outer, *b.loops(name)[len(sp) + 1 :], inner])
        parallel(b, name, b.fuse(name, [*sp[:-1], outer]))
        vectorize(b, name, inner)
    auto_unroll(b, name)


LANES_MIN_REDUCE = 8  # a reduction over fewer values gains nothing from vector lanes


def _reduce_in_lanes(b: SketchBuilder, name: str) -> None:
    """Partial sums in vector lanes (``_vector_rfactor``) computed at the stage's fused,
    parallel output loop, then added up: a reduction whose outputs give no vector loop."""
    rank = len(b.stage(name).op.axis)  # type: ignore[attr-defined]
    rf = _vector_rfactor(b, name)
    outer = b.fuse(name, b.loops(name)[:rank])  # rfactor gave the stage new loops
    parallel(b, name, outer)
    b.compute_at(rf, name, outer)


def rule_reduction(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """Any other reduction: the last spatial loop split, its inner part innermost
    (vectorized across outputs), the outer spatial loops fused and parallel. Where the
    last spatial loop is too short to vectorize (global pooling's 1 x 1) and the
    reduction is long enough, also partial sums in vector lanes."""
    s = info.stages[name]
    if not s.reduce:
        return None
    variants: list[Variant] = [("reduce", lambda b: _reduce(b, name))]
    short = not s.spatial or s.spatial[-1] < min(VECTOR_WIDTHS)
    if short and s.reduce_size >= LANES_MIN_REDUCE and s.op.num_outputs == 1:
        variants.append(("reduce+lanes", lambda b: _reduce_in_lanes(b, name)))
    return variants


def _elementwise(b: SketchBuilder, name: str) -> None:
    sp = list(b.stage(name).op.axis)  # type: ignore[attr-defined]
    if not sp:
        return
    k = b.split_knob(f"{name}.vec", _extent(sp[-1]), 2, MAX_TILE)
    outer, inner = b.split(name, sp[-1], [Sym(k, 1, 2)])
    parallel(b, name, b.fuse(name, [*sp[:-1], outer]))
    vectorize(b, name, inner)


def rule_elementwise(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """An injective output: outer loops fused and parallel, an inner split of the last
    loop vectorized (kept apart so broadcast reads stay affine in the lane)."""
    if info.stages[name].reduce:
        return None
    return [("", lambda b: _elementwise(b, name))]


CPU_RULES: Sequence[Rule] = (
    rule_padding,
    rule_inline,
    rule_fused_consumer,
    rule_tile_with_fusion,
    rule_cache_write,
    rule_reduce_at_rows,
    rule_rfactor,
    rule_reduction,
    rule_elementwise,
)
