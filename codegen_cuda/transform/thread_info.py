"""Thread-binding facts of a device function: which loops are bound, to what extents.

A loop bound to ``threadIdx.x`` is not a loop on the GPU: its variable *is* the
hardware index. Several loops may bind the same tag (a cooperative fetch and the
compute loop); the launch extent of a tag is their common extent.
"""

from __future__ import annotations

from ember.errors import LoweringError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import post_order_stmts
from ember.tir.structural import structural_equal

TAGS = tuple(f"{p}.{a}" for p in ("blockIdx", "threadIdx") for a in "xyz")


def thread_loops(node: S.Stmt) -> list[S.For]:
    """The loops of ``node`` bound to GPU thread axes, outermost first."""
    loops: list[S.For] = []

    def visit(n: object) -> None:
        if isinstance(n, S.For) and n.kind is S.ForKind.THREAD_BINDING:
            loops.append(n)

    post_order_stmts(node, visit)
    return loops


def launch_extents(node: S.Stmt, where: str) -> dict[str, int | E.PrimExpr]:
    """Extent of every bound tag; the loops of one tag must agree (``verify_gpu``'s rule).

    A ``blockIdx`` extent may be symbolic (``ceil(n / 64)``): the host computes the grid
    from the sizes of each call. Block dimensions stay constant.
    """
    extents: dict[str, int | E.PrimExpr] = {}
    for loop in thread_loops(node):
        if loop.thread_tag not in TAGS:
            raise LoweringError(f"{where}: unsupported thread tag '{loop.thread_tag}'")
        symbolic_ok = loop.thread_tag.startswith("blockIdx")
        if not isinstance(loop.extent, E.IntImm) and not symbolic_ok:
            raise LoweringError(
                f"{where}: loop '{loop.loop_var.name}' bound to {loop.thread_tag} has a "
                f"non-constant extent ({loop.extent!r}); split it by a constant first"
            )
        ext: int | E.PrimExpr = (
            loop.extent.value if isinstance(loop.extent, E.IntImm) else loop.extent
        )
        old = extents.setdefault(loop.thread_tag, ext)
        same = (
            old == ext
            if isinstance(old, int) or isinstance(ext, int)
            else structural_equal(old, ext, map_free_vars=False)
        )
        if not same:
            raise LoweringError(
                f"{where}: {loop.thread_tag} is bound twice with different extents "
                f"({old} and {ext}, loop '{loop.loop_var.name}'); bind loops of equal extent"
            )
    return extents


def launch_dims(
    extents: dict[str, int | E.PrimExpr],
) -> tuple[tuple[int | E.PrimExpr, ...], tuple[int | E.PrimExpr, ...]]:
    """The grid and block dimensions (x, y, z) from the extents bound to each thread axis."""
    grid = tuple(extents.get(f"blockIdx.{a}", 1) for a in "xyz")
    block = tuple(extents.get(f"threadIdx.{a}", 1) for a in "xyz")
    return grid, block  # type: ignore[return-value]
