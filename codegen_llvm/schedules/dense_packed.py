"""CPU template ``dense_packed.llvm``: the GEMM a graph runs over weights packed at
compile time.

A constant-weight ``MatMul``/``Gemm`` runs as ``dense_packed(A, P)``, ``P`` the weights
rearranged once into ``[ceil(N/nr), K, nr]`` panels (``frontend/passes/pack_dense_weights.py``),
with ``matmul.llvm``'s register-blocked micro-kernel (``schedule_gemm``). Such a node
used to be tuned as ``matmul.llvm`` of ``(M, N, K)``, whose candidates pack B inside
every call (or read it in place, or in panels of another width): none of them is the
kernel the graph runs, and a pick that streamed B or packed 32-wide panels could not
apply to 64-wide ones at all. This template is that kernel: the graph's A shape, its
panels (their width ``nr`` fixed by the graph) and its output width, with the tiles
the graph may still choose as knobs (``mr`` rows, ``k`` unrolled by ``ku``,
``nc_panels`` panels per parallel column block). Its fallback is the graph's default
tiles, so a task's baseline is the kernel the untuned graph runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.codegen_llvm.schedules.generic import (
    dense_packed_tiles,
    schedule_group,
    whole_panels_pay,
)
from ember.codegen_llvm.schedules.matmul import GemmTiles
from ember.errors import ArgumentError
from ember.tir.schedule.schedule import Schedule
from ember.tir.te import operation as te
from ember.tir.topi.linalg import dense_packed
from ember.tuner.knob import is_int
from ember.tuner.space import ConfigEntity
from ember.tuner.template import config_for_direct_call, get_config, template, using_config

TEMPLATE = "dense_packed.llvm"
ROW_TILES = (1, 2, 4, 6, 8, 12)
K_UNROLLS = (1, 2, 4, 8)
PANELS_PER_BLOCK = (1, 2, 4, 8)


def task_args(a_shape: Sequence[int], n: int, nr: int) -> tuple[Any, ...]:
    """The template's arguments for a node whose input A has ``a_shape`` (leading axes,
    rows, K), ``n`` output columns and ``nr``-lane panels."""
    *lead, rows, k = (int(d) for d in a_shape)
    return (rows, int(n), k, int(nr), tuple(lead), "float32")


def _define_knobs(rows: int, n: int, k: int, nr: int, lead: Sequence[int]) -> GemmTiles:
    default = dense_packed_tiles((*lead, rows, n), nr, k)
    cfg = get_config()
    cfg.define_knob("mr", sorted({default.mr, *ROW_TILES}), default=default.mr)
    cfg.define_knob("ku", list(K_UNROLLS), default=default.ku)
    cfg.define_knob("nc_panels", list(PANELS_PER_BLOCK), default=default.nc_panels)
    return GemmTiles(cfg["mr"].val, nr, cfg["ku"].val, cfg["nc_panels"].val)


def _reference(a: np.ndarray, panels: np.ndarray, workload: tuple[Any, ...]) -> np.ndarray:
    """``A @ W`` with W unpacked from its panels, its first N columns (the task's
    ``workload`` says N: the panels are padded past it)."""
    p, k, nr = panels.shape
    w = panels.transpose(1, 0, 2).reshape(k, p * nr)[:, : workload[1]]
    return (a.astype(np.float64) @ w.astype(np.float64)).astype(a.dtype)


@template(TEMPLATE, reference=_reference)
def dense_packed_llvm(
    M: int, N: int, K: int, nr: int, lead: Sequence[int] = (), dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """``C = A @ W`` with A of shape ``(*lead, M, K)`` and W given as ``[ceil(N/nr), K,
    nr]`` panels; C is ``(*lead, M, N)``, or as wide as the panels where the graph's
    compute spans them (:func:`whole_panels_pay`)."""
    lead = _checked(M, N, K, nr, lead)
    tiles = _define_knobs(M, N, K, nr, lead)
    A = te.placeholder((*lead, M, K), dtype, name="A")
    P = te.placeholder((-(-N // nr), K, nr), dtype, name="P")
    whole = whole_panels_pay((*lead, M, N), nr, K)
    C = dense_packed(A, P, N, whole_panels=whole, attrs=tile_attrs(tiles))
    return schedule_group([C]), [A, P, C]  # the graph's own schedule of the node


def _checked(M: Any, N: Any, K: Any, nr: Any, lead: Any) -> tuple[int, ...]:
    """``lead`` as a tuple, after an ``ArgumentError`` for any size that is not a positive
    integer (a task is made from a user's arguments too)."""
    if not isinstance(lead, (list, tuple)):
        raise ArgumentError(f"{TEMPLATE}: lead must be a list of sizes, got {lead!r}")
    sizes = {"M": M, "N": N, "K": K, "nr": nr, **{f"lead[{i}]": d for i, d in enumerate(lead)}}
    for name, value in sizes.items():
        if not is_int(value) or value < 1:
            raise ArgumentError(f"{TEMPLATE}: {name} must be a positive integer, got {value!r}")
    return tuple(int(d) for d in lead)


def tile_attrs(tiles: GemmTiles) -> dict[str, int]:
    """The tiles as the ``dense_packed`` compute's attrs, which the generic schedule reads
    (``schedules/generic.py``)."""
    return {"mr": tiles.mr, "ku": tiles.ku, "nc_panels": tiles.nc_panels}


def graph_tiles(a_shape: Sequence[int], n: int, nr: int) -> GemmTiles:
    """The tiles the graph's ``dense_packed`` kernel for A of ``a_shape`` runs: those of
    this template's best record in an enclosing ``apply_history_best`` block, else of a
    ``matmul.llvm`` record that fits (:func:`legacy_matmul_tiles`), else the defaults."""
    args = task_args(a_shape, n, nr)
    rows, _, k, _, lead, _ = args
    cfg = config_for_direct_call(TEMPLATE, args)
    if isinstance(cfg, ConfigEntity):
        with using_config(cfg):
            return _define_knobs(rows, n, k, nr, lead)
    default = dense_packed_tiles((*lead, rows, n), nr, k)
    return legacy_matmul_tiles((math.prod(lead) * rows, n, k, "float32"), default)


def legacy_matmul_tiles(args: tuple[Any, ...], default: GemmTiles) -> GemmTiles:
    """The tiles of a ``matmul.llvm`` record for ``args`` (``(M, N, K, dtype)``), as such
    nodes were tuned before this template: taken where the record packs B in panels of
    the width the weights were packed with (a record that streams B or packs other
    panels does not apply), else ``default``."""
    cfg = config_for_direct_call("matmul.llvm", args)
    if not isinstance(cfg, ConfigEntity):
        return default
    values: dict[str, Any] = {name: getattr(cfg[name], "val", None) for name in cfg.choices}
    if values.get("pack", "none") == "none" or values.get("gemv", "tile") != "tile":
        return default
    if values.get("nr") != default.nr:
        return default
    return GemmTiles(values["mr"], default.nr, values["ku"], values["nc_panels"])


__all__ = [
    "TEMPLATE",
    "dense_packed_llvm",
    "graph_tiles",
    "legacy_matmul_tiles",
    "task_args",
    "tile_attrs",
]
