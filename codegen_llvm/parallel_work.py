"""How much work one iteration of a parallel loop does, to decide whether it pays to fork.

Opening a parallel region costs a few microseconds when libgomp's threads spin and
60-80 us when they sleep (and far more when another process holds a core): a kernel
whose whole loop runs in less than that is faster on the calling thread alone, and
small models are made of such kernels. :func:`iteration_work` counts the IR nodes one
iteration of a loop's body evaluates, multiplying by the trip count of each inner loop,
as a rough operation count; :mod:`ember.codegen_llvm.parallel` runs the loop serially when
``extent * work`` is below :data:`MIN_PARALLEL_WORK` (decided at compile time where the
extent is a constant: such a loop is not outlined at all; a compare at run time
otherwise) and shares it out by :func:`partition`: each part at least
:data:`MIN_CHUNK_WORK`, the parts a multiple of the threads that take them and equal to
an iteration, so that two threads get the same work (chunks of a fixed size left 3
chunks for 2 threads, or a 17th short one for 16). A body with an inner loop of symbolic
trip count has unknown work and always runs in parallel, as before.
"""

from __future__ import annotations

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Node, children

# Operations below which a parallel loop runs serially (about 10-30 us of scalar code on
# a 2-4 GHz core); see benchmarks/bench_contention.py for the figures behind it.
MIN_PARALLEL_WORK = 16_000
# Operations a thread's chunk of iterations does at least, so that taking a chunk (one
# atomic add on a shared counter) stays small beside running it.
MIN_CHUNK_WORK = 2_000
# Parts per thread when the loop is big: enough that a thread's siblings take over most
# of the work of one the OS preempted, few enough that the counter is not contended.
CHUNKS_PER_THREAD = 8
# Threads assumed where the runtime leaves the count to libgomp (``__ember_num_threads`` 0).
DEFAULT_TEAM = 8


def _work(node: Node, memo: dict[int, int | None]) -> int | None:
    """The count of :func:`iteration_work` below ``node``: a node met again (an expression
    read twice) counts again, as in the tree it stands for, but is counted once (``memo``,
    by id: every node stays alive in the loop being walked)."""
    key = id(node)
    if key not in memo:
        memo[key] = _count(node, memo)
    return memo[key]


def _count(node: Node, memo: dict[int, int | None]) -> int | None:
    if isinstance(node, S.For):
        if not isinstance(node.extent, E.IntImm):
            return None
        body = _work(node.body, memo)
        if body is None:
            return None
        trips = max(node.extent.value, 0)
        if node.kind is S.ForKind.VECTORIZED:
            trips = -(-trips // 8)  # one vector operation does several lanes' work
        return 1 + trips * body
    total = 1
    for child in children(node):
        part = _work(child, memo)
        if part is None:
            return None
        total += part
    return total


def iteration_work(loop: S.For) -> int | None:
    """Operations (IR nodes evaluated) in one iteration of ``loop``; ``None`` if unknown."""
    return _work(loop.body, {})


def min_chunk(work: int | None) -> int:
    """Fewest iterations a part holds, for iterations of ``work`` operations."""
    if work is None or work <= 0:
        return 1
    return max(1, -(-MIN_CHUNK_WORK // work))


def serial_below(work: int | None) -> int:
    """Extents below which the loop runs on the calling thread alone (0: never)."""
    if work is None or work <= 0:
        return 0
    return -(-MIN_PARALLEL_WORK // work)


def partition(extent: int, threads: int, least: int) -> tuple[int, int]:
    """How ``extent`` iterations are shared among up to ``threads`` threads (0: libgomp's
    default, taken as :data:`DEFAULT_TEAM`) with at least ``least`` iterations a part:
    ``(team, parts)``. ``team`` threads run (1: the caller alone, no region opened), taking
    ``parts`` parts from a shared counter; part ``p`` is iterations
    ``[p * extent // parts, (p + 1) * extent // parts)``, so parts differ by one iteration
    at most and each thread's fair share is a whole number of them. Fewer threads than
    asked run where the loop has too few iterations to give each its ``least``.

    :mod:`ember.codegen_llvm.parallel` computes the same in LLVM IR at run time (its
    ``emit_partition``; a test holds the two equal)."""
    team = threads if threads > 0 else DEFAULT_TEAM
    least = max(1, least)
    team = min(team, extent // least)
    if team <= 1:
        return 1, 1
    per = max(1, min(CHUNKS_PER_THREAD, extent // (team * least)))
    return team, team * per


def part_range(extent: int, parts: int, p: int) -> tuple[int, int]:
    """The iterations ``[begin, end)`` of part ``p`` of ``parts`` (see :func:`partition`)."""
    return p * extent // parts, (p + 1) * extent // parts
