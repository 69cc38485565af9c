"""``mma.sync`` and ``ldmatrix`` in the SIMT emulator, with the PTX ISA's per-lane layouts.

Both are warp-collective: every lane of each warp that executes one must take part
(:func:`.warps.check_whole_warps`). Fragments are the per-thread ``local`` arrays of
:mod:`.memory` (one column per lane); the emulator gathers each warp's registers into
whole matrices with the layouts of :mod:`ember.tir.tensor_core`, multiplies, and
scatters the result back the same way, so a kernel that puts an element in the wrong
lane or register computes a wrong product, as on the GPU. Arithmetic follows the
tensor cores: 16-bit and tf32 inputs are exact in float32 (tf32 keeps the top 19 bits
of a float32, the low 13 are dropped), products are exact, sums are float32, and a
float16 accumulator is rounded once per instruction. ``ldmatrix`` reads its rows
through the shared storage, so its reads are bounds-checked, race-checked (each
16-byte row as a read by the lane that gave its address) and profiled per 8-row phase.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.codegen_cuda.emulator.grid import CHUNK, MASK, Chunk
from ember.codegen_cuda.emulator.memory import BlockStorage
from ember.codegen_cuda.emulator.warps import WARP, check_whole_warps
from ember.errors import ArgumentError, InternalError
from ember.tir.interp.closures import Env
from ember.tir.tensor_core import MmaSpec, ldmatrix_layout, mma_layout

TF32_MASK = np.uint32(0xFFFFE000)  # sign, exponent and the top 10 mantissa bits


def in_warp(chunk: Chunk) -> np.ndarray:
    """Each lane's position in its warp."""
    return (chunk.lane_ids % chunk.threads) % WARP


def fragment_index(off: Any, n: int) -> np.ndarray:
    """Element indices of ``n`` consecutive registers from ``off``: ``(1, n)`` or ``(lanes, n)``."""
    if np.ndim(off) == 0:
        return (int(off) + np.arange(n)).reshape(1, n)
    return np.asarray(off, dtype=np.int64)[:, None] + np.arange(n)


def _local(storage: Any, what: str) -> BlockStorage:
    if not isinstance(storage, BlockStorage) or storage.scope != "local":
        raise InternalError(f"{what} is not a local fragment array")
    return storage


def _registers(storage: Any, off: Any, n: int, env: Env, site: int, what: str) -> np.ndarray:
    """Each lane's ``n`` registers from ``off``, as float32: ``(warps, 32, n)``."""
    values = _local(storage, what).load(fragment_index(off, n), env, site)
    values = np.broadcast_to(values, (env[CHUNK].lanes, n))
    return np.asarray(values, dtype=np.float32).reshape(-1, WARP, n)


def _gather(spec: MmaSpec, operand: str, regs: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    rows, cols = mma_layout(spec, operand)
    out = np.zeros((regs.shape[0], *shape), dtype=np.float32)
    out[:, rows, cols] = regs
    return out


def run_mma(env: Env, spec: MmaSpec, args: list[Any], site: int, text: str) -> None:
    """``C += A @ B`` for every active warp; ``args``: A, a_off, B, b_off, C, c_off values."""
    chunk: Chunk = env[CHUNK]
    check_whole_warps(chunk, env[MASK], text, "mma.sync")
    a_buf, a_off, b_buf, b_off, c_buf, c_off = args
    a = _registers(a_buf, a_off, spec.a_elems, env, site, "ptx_mma's A")
    b = _registers(b_buf, b_off, spec.b_elems, env, site, "ptx_mma's B")
    c = _registers(c_buf, c_off, spec.c_elems, env, site, "ptx_mma's C")
    if spec.in_dtype == "tf32":
        a, b = ((x.view(np.uint32) & TF32_MASK).view(np.float32) for x in (a, b))
    ma = _gather(spec, "a", a, (spec.m, spec.k))
    mb = _gather(spec, "b", b, (spec.k, spec.n))
    mc = _gather(spec, "c", c, (spec.m, spec.n))
    d = np.matmul(ma, mb) + mc  # float32: exact products, float32 sums
    rows, cols = mma_layout(spec, "c")
    out = d[:, rows, cols].reshape(chunk.lanes, spec.c_elems)
    c_buf.store(fragment_index(c_off, spec.c_elems), out, env, site)


def run_ldmatrix(env: Env, trans: bool, num: int, args: list[Any], site: int, text: str) -> None:
    """Lanes ``8i .. 8i+7`` address the rows of matrix ``i``; every lane receives its pairs."""
    chunk: Chunk = env[CHUNK]
    mask = env[MASK]
    check_whole_warps(chunk, mask, text, f"ldmatrix.x{num}")
    dst, dst_off, src, src_off = args
    if not isinstance(src, BlockStorage) or src.scope != "shared":
        raise InternalError("ptx_ldmatrix's source is not a shared array")
    giving = in_warp(chunk) < 8 * num
    giving = giving if mask is None else mask & giving
    rows_at = np.broadcast_to(np.asarray(src_off, dtype=np.int64), (chunk.lanes,))
    misaligned = giving & (rows_at * src.elem_bytes % 16 != 0)
    if misaligned.any():
        lane = int(np.argmax(misaligned))
        raise ArgumentError(
            f"ldmatrix row address {int(rows_at[lane])} of shared '{src.name}' given by "
            f"{chunk.describe(lane)} is not 16-byte aligned, as `{text}` requires"
        )
    env[MASK] = giving
    try:
        rows = src.load(rows_at[:, None] + np.arange(8), env, site, kind="ldmatrix")
    finally:
        env[MASK] = mask
    rows = np.asarray(rows).reshape(-1, WARP, 8)
    r, c = ldmatrix_layout(trans)
    out = np.empty((rows.shape[0], WARP, 2 * num), dtype=rows.dtype)
    for i in range(num):
        out[:, :, 2 * i : 2 * i + 2] = rows[:, 8 * i : 8 * i + 8][:, r, c]
    _local(dst, "ptx_ldmatrix's destination").store(
        fragment_index(dst_off, 2 * num), out.reshape(chunk.lanes, 2 * num), env, site
    )


__all__ = ["fragment_index", "in_warp", "run_ldmatrix", "run_mma"]
