"""The ``wmma`` fragment API (m16n16k16) in the SIMT emulator.

A fragment allocated in a ``wmma.matrix_a``/``wmma.matrix_b``/``wmma.accumulator``
scope is opaque in CUDA: which lane holds which element is unspecified, so a kernel may
touch it only through ``tvm_fill_fragment``, ``tvm_load_matrix_sync``, ``tvm_mma_sync``
and ``tvm_store_matrix_sync``. :class:`FragmentStorage` keeps each warp's 16 x 16 tiles
whole and refuses element loads and stores. The calls are warp-collective (every lane of
a warp that runs one takes part, with the same fragment index and memory tile); memory
traffic goes through the global/shared storage of :mod:`.memory`, so it is bounds-,
race- and profile-checked, with element ``e`` of a tile attributed to lane ``e % 32``
(a fixed choice: the GPU's is unspecified). Values are rounded to the fragment's type
when written; ``mma_sync`` multiplies exactly and sums in float32, as the tensor cores.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.codegen_cuda.emulator.grid import CHUNK, MASK, Chunk
from ember.codegen_cuda.emulator.mma import in_warp
from ember.codegen_cuda.emulator.warps import WARP, check_whole_warps
from ember.errors import ArgumentError, InternalError
from ember.tir.bf16 import bf16_to_float32, float32_to_bf16
from ember.tir.interp.closures import Env
from ember.tir.tensor_core import WMMA_ELEMS

TILE = 16
PER_LANE = WMMA_ELEMS // WARP  # elements of a tile each lane carries to or from memory


def round_to(dtype: str, x: np.ndarray) -> np.ndarray:
    """``x`` rounded to ``dtype``, kept in float32."""
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        return bf16_to_float32(float32_to_bf16(x))
    return x.astype(np.float32)


class FragmentStorage:
    """The fragments of one ``wmma.*`` allocation: ``(count, 16, 16, warps)`` float32 values."""

    def __init__(self, name: str, dtype: str, size: int, scope: str, chunk: Chunk) -> None:
        if size % WMMA_ELEMS:
            raise ArgumentError(
                f"{scope} fragment array '{name}' has {size} elements; a 16 x 16 wmma "
                f"fragment has {WMMA_ELEMS}, so the size must be a multiple of it"
            )
        self.name, self.dtype, self.scope = name, dtype, scope
        self.count = size // WMMA_ELEMS
        self.data = np.zeros((self.count, TILE, TILE, -(-chunk.lanes // WARP)), np.float32)

    def load(self, idx: Any, env: Env, site: int, kind: str = "load") -> Any:
        self._opaque("read")

    def store(self, idx: Any, value: Any, env: Env, site: int) -> None:
        self._opaque("written")

    def _opaque(self, how: str) -> None:
        raise ArgumentError(
            f"{self.scope} fragment '{self.name}' is {how} element by element; a wmma fragment's "
            "lane layout is opaque, so use tvm_fill_fragment, tvm_load_matrix_sync, "
            "tvm_mma_sync and tvm_store_matrix_sync"
        )

    def fragment(self, index: Any, what: str) -> np.ndarray:
        """The ``(16, 16, warps)`` view of fragment ``index`` (a warp-uniform integer)."""
        k = int(index)
        if not 0 <= k < self.count:
            raise ArgumentError(
                f"{what}: fragment index {k} of '{self.name}', which holds {self.count}"
            )
        return self.data[k]


def _uniform(x: Any, env: Env, what: str) -> int:
    """A value every active lane must agree on (a fragment index)."""
    if np.ndim(x) == 0:
        return int(x)
    mask = env[MASK]
    vals = np.asarray(x) if mask is None else np.asarray(x)[mask]
    if vals.size and (vals != vals[0]).any():
        raise ArgumentError(f"{what}: the fragment index differs between the lanes of a warp")
    return int(vals[0]) if vals.size else 0


def _frag(x: Any, what: str) -> FragmentStorage:
    if not isinstance(x, FragmentStorage):
        raise InternalError(f"{what} is not a wmma fragment")
    return x


def _active_warps(chunk: Chunk, mask: np.ndarray | None) -> np.ndarray:
    if mask is None:
        return np.ones(chunk.lanes // WARP, dtype=bool)
    return mask.reshape(-1, WARP).all(axis=1)


def _tile_addresses(env: Env, mem: Any, off: Any, stride: int, layout: str, what: str) -> tuple:
    """Per lane: the memory index, row and column of its 8 tile elements, and its warp.

    CUDA requires a 256-bit aligned tile and a stride of a multiple of 16 bytes."""
    chunk: Chunk = env[CHUNK]
    off = np.broadcast_to(np.asarray(off, dtype=np.int64), (chunk.lanes,))
    per_warp = off.reshape(-1, WARP)
    active = _active_warps(chunk, env[MASK])
    first = per_warp[active][:, :1]
    if (per_warp[active] != first).any():
        raise ArgumentError(f"{what}: the tile address differs between the lanes of a warp")
    if (first * mem.elem_bytes % 32).any() or stride * mem.elem_bytes % 16:
        raise ArgumentError(
            f"{what}: the tile at element {int(first[0, 0])} of '{mem.name}' with stride "
            f"{stride} is not 32-byte aligned with a 16-byte multiple stride, as wmma requires"
        )
    e = in_warp(chunk)[:, None] + WARP * np.arange(PER_LANE)
    row, col = e // TILE, e % TILE
    rel = row * stride + col if layout == "row_major" else row + col * stride
    return off[:, None] + rel, row, col, (chunk.lane_ids // WARP)[:, None]


def run_fill(env: Env, frag: Any, index: Any, value: Any, text: str) -> None:
    """Emulates ``wmma::fill_fragment`` for the warps of the current chunk."""
    chunk: Chunk = env[CHUNK]
    check_whole_warps(chunk, env[MASK], text, "wmma::fill_fragment")
    f = _frag(frag, "tvm_fill_fragment's fragment")
    tile = f.fragment(_uniform(index, env, text), text)
    active = _active_warps(chunk, env[MASK])
    v = np.broadcast_to(np.asarray(value, dtype=np.float32), (chunk.lanes,))
    tile[:, :, active] = round_to(f.dtype, v.reshape(-1, WARP)[active, 0])


def run_load(env: Env, args: list[Any], site: int, text: str) -> None:
    """Emulates ``wmma::load_matrix_sync``: a warp loads a tile from memory into a fragment."""
    frag, index, src, off, stride, layout = args
    chunk: Chunk = env[CHUNK]
    check_whole_warps(chunk, env[MASK], text, "wmma::load_matrix_sync")
    f = _frag(frag, "tvm_load_matrix_sync's fragment")
    tile = f.fragment(_uniform(index, env, text), text)
    addr, row, col, warp = _tile_addresses(env, src, off, _uniform(stride, env, text), layout, text)
    values = np.broadcast_to(src.load(addr, env, site), addr.shape).astype(np.float32)
    active = _active_warps(chunk, env[MASK])[warp[:, 0]]
    tile[row[active], col[active], warp[active]] = round_to(f.dtype, values[active])


def run_store(env: Env, args: list[Any], site: int, text: str) -> None:
    """Emulates ``wmma::store_matrix_sync``: a warp writes a fragment's tile to memory."""
    frag, index, dst, off, stride, layout = args
    chunk: Chunk = env[CHUNK]
    check_whole_warps(chunk, env[MASK], text, "wmma::store_matrix_sync")
    tile = _frag(frag, "tvm_store_matrix_sync's fragment").fragment(
        _uniform(index, env, text), text
    )
    addr, row, col, warp = _tile_addresses(env, dst, off, _uniform(stride, env, text), layout, text)
    dst.store(addr, tile[row, col, warp], env, site)


def run_mma_sync(env: Env, args: list[Any], text: str) -> None:
    """``D = A @ B + C`` per active warp: exact products, float32 sums, rounded to D's type."""
    chunk: Chunk = env[CHUNK]
    check_whole_warps(chunk, env[MASK], text, "wmma::mma_sync")
    tiles = []
    for k, name in enumerate(("D", "A", "B", "C")):
        frag = _frag(args[2 * k], f"tvm_mma_sync's {name}")
        tiles.append((frag, frag.fragment(_uniform(args[2 * k + 1], env, text), text)))
    (d_frag, d), (_, a), (_, b), (_, c) = tiles
    result = np.einsum("ikw,kjw->ijw", a, b, dtype=np.float32) + c
    active = _active_warps(chunk, env[MASK])
    d[:, :, active] = round_to(d_frag.dtype, result[:, :, active])


__all__ = ["FragmentStorage", "run_fill", "run_load", "run_mma_sync", "run_store"]
