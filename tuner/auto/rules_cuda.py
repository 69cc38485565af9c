"""Ansor's sketch rules for CUDA: thread-bound tiles, shared-memory staging, cross-thread
reductions.

Same walk and the same DAG facts as the CPU rules (:mod:`.rules`, whose inlining and
epilogue rules are shared); what differs is the structure every kernel needs on a GPU,
every loop that runs in parallel bound to ``blockIdx.x`` or ``threadIdx.x``:

- :func:`rule_tile_gpu`: a stage with data reuse is tiled ``SSRRSRS`` (block, thread,
  two outer reduction levels, a per-thread spatial level, the inner reduction, the
  innermost spatial level: Ansor's ``SSSRRSRS`` without its virtual-thread level), and
  computed per thread inside its elementwise consumer, or inside the copy out of a
  ``local`` cache (``cache_write``) where it has none; each input it reads is staged in
  shared memory (``cache_read``) at the outer reduction level and fetched by all the
  block's threads together (cooperative fetching). A block has at most 1024 threads.
- :func:`rule_reduction_gpu`: any other reduction either runs one output per thread or
  binds its (fused, split) reduction loop to ``threadIdx.x``: a cross-thread reduction
  (Ansor's ``CrossThreadReduction``).
- :func:`rule_elementwise_gpu`: an injective output is fused and split over blocks and
  threads.

The thread counts and tile sizes are knobs as on the CPU; unrolling is the
``auto_unroll_max_step`` pragma.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.tir.te.tensor import IterVar
from ember.tuner.auto.dag import DagInfo
from ember.tuner.auto.rules import auto_unroll, rule_fused_consumer, rule_inline
from ember.tuner.auto.sketch import Prod, Rule, SketchBuilder, Sym, Variant

THREADS = (32, 64, 128, 256)  # threads per block of the untiled kernels
MAX_THREADS = 1024
MAX_TILE = 32  # the largest factor of one tile level
MAX_THREAD_TILE = 64  # outputs one thread accumulates in registers


def _extent(iv: IterVar) -> int:
    return int(iv.dom.extent.value)  # type: ignore[union-attr,attr-defined]


def bind_flat(b: SketchBuilder, stage: str, loops: Sequence[IterVar], what: str) -> None:
    """Fuse ``loops`` (none: a new unit loop) and spread them over blocks of a knob's
    number of threads."""
    fused = b.fuse(stage, list(loops))
    knob = b.choice_knob(f"{stage}.{what}", THREADS)
    blocks, threads = b.split(stage, fused, [Sym(knob)])
    b.bind(stage, blocks, "blockIdx.x")
    b.bind(stage, threads, "threadIdx.x")


def tile_gpu(b: SketchBuilder, producer: str, consumer: str) -> None:
    """``producer`` tiled ``SSRRSRS``, computed per thread of ``consumer``'s tiles, its
    inputs staged in shared memory (see the module docstring)."""
    op = b.stage(producer).op
    spatial: list[list[IterVar]] = [[], [], [], []]
    red: list[list[IterVar]] = [[], [], []]
    knobs = []
    for d, iv in enumerate(op.axis):  # type: ignore[attr-defined]
        k = b.split_knob(f"{producer}.tile{d}", _extent(iv), 4, MAX_TILE)
        knobs.append(k)
        for lvl, loop in enumerate(
            b.split(producer, iv, [Sym(k, 1, 2), Sym(k, 2, 3), Sym(k, 3, 4)])
        ):
            spatial[lvl].append(loop)
    for d, iv in enumerate(op.reduce_axis):  # type: ignore[attr-defined]
        k = b.split_knob(f"{producer}.rtile{d}", _extent(iv), 3, MAX_TILE)
        for lvl, loop in enumerate(b.split(producer, iv, [Sym(k, 1, 2), Sym(k, 2, 3)])):
            red[lvl].append(loop)
    s0, s1, s2, s3 = spatial
    b.reorder(producer, [*s0, *s1, *red[0], *red[1], *s2, *red[2], *s3])
    threads = Prod(tuple(Sym(k, 1, 2) for k in knobs))
    b.limit("threads per block", threads, MAX_THREADS)
    b.limit("outputs per thread", Prod(tuple(Sym(k, 2, 4) for k in knobs)), MAX_THREAD_TILE)

    levels: list[list[IterVar]] = [[], [], []]
    for iv, k in zip(list(b.stage(consumer).op.axis), knobs):  # type: ignore[attr-defined]
        for lvl, loop in enumerate(b.split(consumer, iv, [Sym(k, 1, 2), Sym(k, 2, 4)])):
            levels[lvl].append(loop)
    b.reorder(consumer, [iv for lvl in levels for iv in lvl])
    b.bind(consumer, b.fuse(consumer, levels[0]), "blockIdx.x")
    thread = b.fuse(consumer, levels[1])
    b.bind(consumer, thread, "threadIdx.x")
    b.compute_at(producer, consumer, thread)

    readers = [b.name_of(b.schedule[t]) for t in b.stage(producer).op.input_tensors]
    outer_reduce = red[0][-1] if red[0] else None
    for name in readers:
        shared = b.cache_read(name, "shared", [producer])
        if outer_reduce is None:
            continue  # no reduction loop to stage at: the copy stays at the root
        b.compute_at(shared, producer, outer_reduce)
        loops = b.loops(shared)
        fused = b.fuse(shared, loops)
        _, inner = b.split(shared, fused, [threads])
        b.bind(shared, inner, "threadIdx.x")
    auto_unroll(b, producer)


def rule_tile_gpu(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """Data reuse: thread tiles fused into the elementwise consumer, or into the copy out
    of a ``local`` cache."""
    s = info.stages[name]
    if not s.has_reuse or s.op.num_outputs != 1:
        return None
    consumer = info.elementwise_consumer(name)
    if consumer is not None:
        return [("tile+fuse", _tiling(name, consumer, cache=False))]
    return [("cache+tile", _tiling(name, name, cache=True))]


def _tiling(producer: str, consumer: str, cache: bool) -> Callable[[SketchBuilder], None]:
    def build(b: SketchBuilder) -> None:
        tile_gpu(b, b.cache_write(producer, "local") if cache else producer, consumer)

    return build


def _per_thread(b: SketchBuilder, name: str) -> None:
    op = b.stage(name).op
    bind_flat(b, name, list(op.axis), "threads")  # type: ignore[attr-defined]
    auto_unroll(b, name)


def _cross_thread(b: SketchBuilder, name: str) -> None:
    op = b.stage(name).op
    spatial, red = list(op.axis), list(op.reduce_axis)  # type: ignore[attr-defined]
    fused_r = b.fuse(name, red)
    knob = b.choice_knob(f"{name}.reduce_threads", THREADS)
    _, inner = b.split(name, fused_r, [Sym(knob)])
    b.bind(name, inner, "threadIdx.x")
    b.bind(name, b.fuse(name, spatial), "blockIdx.x")


def rule_reduction_gpu(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """A reduction without reuse: one output per thread, or a cross-thread reduction."""
    if not info.stages[name].reduce or info.stages[name].op.num_outputs != 1:
        return None
    return [
        ("cross-thread", lambda b: _cross_thread(b, name)),
        ("thread-per-output", lambda b: _per_thread(b, name)),
    ]


def rule_elementwise_gpu(b: SketchBuilder, info: DagInfo, name: str) -> list[Variant] | None:
    """Anything else (an injective output): fused, spread over blocks and threads."""
    return [("", lambda b: bind_flat(b, name, b.loops(name), "threads"))]


CUDA_RULES: Sequence[Rule] = (
    rule_inline,
    rule_fused_consumer,
    rule_tile_gpu,
    rule_reduction_gpu,
    rule_elementwise_gpu,
)
