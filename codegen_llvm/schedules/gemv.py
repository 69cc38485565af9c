"""The streaming GEMV schedule of ``matmul.llvm``: B read row after row, K split across threads.

Used by :mod:`ember.codegen_llvm.schedules.matmul` for one-row products (``M == 1``).
The tiled GEMM schedule reads B in ``nr``-wide column strips, each strip down all
K rows: 1 KB pieces 16 KB apart for a 4096-wide B, which the prefetchers follow less
well than one long run. A GEMV is bound by reading B once, so the streaming order
reads it in memory order instead: for each group of ``ku`` rows of B, the whole row
of C (it stays in L1) is updated with ``nr``-lane vectors. To use every core, the K
rows are split into ``k_split`` contiguous blocks (``rfactor``), each summed into its
own partial row by one thread; the partial rows are added up at the end (``k_split``
rows of N, small beside B).

Knobs (defined only for ``M == 1``): ``gemv`` picks ``"tile"`` (the GEMM schedule,
the default) or ``"stream"``; ``k_split`` the number of K blocks. ``stream`` reuses
the GEMM's ``nr`` (vector width of the update) and ``ku`` (rows per step, unrolled);
the knobs it ignores are held at one value by constraints, so the space has no
duplicate programs.
"""

from __future__ import annotations

from ember.tir.schedule.schedule import Schedule
from ember.tir.te.tensor import Tensor
from ember.tuner.template import get_config

K_SPLITS = [1, 2, 4, 8]


def define_gemv_knobs(M: int) -> tuple[bool, int]:
    """Define the GEMV knobs when ``M == 1``; (stream?, k_split)."""
    if M != 1:
        return False, 1
    cfg = get_config()
    cfg.define_knob("gemv", ["tile", "stream"], default="tile")
    cfg.define_knob("k_split", K_SPLITS, default=1)
    cfg.add_constraint(
        lambda c: c["gemv"].val == "stream" or c["k_split"].val == 1,
        "k_split is a knob of the streaming GEMV",
    )
    cfg.add_constraint(
        lambda c: (
            c["gemv"].val == "tile"
            or (c["mr"].val == 1 and c["nc_panels"].val == 1 and c["pack"].val == "none")
        ),
        "the streaming GEMV has no row tile, column panels or packing",
    )
    return cfg["gemv"].val == "stream", cfg["k_split"].val


def schedule_gemv_stream(s: Schedule, C: Tensor, nr: int, ku: int, k_split: int) -> None:
    """Schedule ``C[0, j] = sum_k A[0, k] * B[k, j]`` (unpacked B) in streaming order."""
    (k,) = s[C].op.reduce_axis
    ko, _ = s[C].split(k, nparts=k_split)
    partial = s.rfactor(C, ko)  # partial[f, 0, j]: the sum over K block f
    f, i, j = s[partial].op.axis
    (r,) = s[partial].op.reduce_axis
    ro, ri = s[partial].split(r, factor=ku)
    jo, ji = s[partial].split(j, factor=nr)
    s[partial].reorder(f, i, ro, jo, ri, ji)
    s[partial].unroll(ri)
    s[partial].vectorize(ji)
    s[partial].parallel(f)
    _, cj = s[C].op.axis
    s[C].vectorize(s[C].split(cj, factor=64)[1])
