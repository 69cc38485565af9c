"""Memory behaviour of an emulated kernel: coalescing of global accesses, shared bank conflicts.

With ``profile=True`` every load and store is also counted the way the hardware
serves it, per warp (32 consecutive threads of a block, ``threadIdx.x`` fastest):
a global access costs one request and as many 32-byte sectors as its active
lanes touch (4 for a coalesced warp reading 4-byte words, 32 for a stride of 32
words); a shared access costs one wavefront per distinct word in the most
loaded of the 32 four-byte banks (same word: a broadcast, no conflict), counted
per 128-byte phase for 8- and 16-byte accesses (half and quarter warps), so a
contiguous vector access is conflict-free.
The counts are kept per statement, so a report points at the access to fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

WARP = 32
# Blocks counted by a profile: a first row of tiles on most grids (its right edge too), few
# enough that profiling a large launch costs about what plain emulation does.
PROFILE_BLOCKS = 32
SECTOR_BYTES = 32
BANKS = 32
BANK_BYTES = 4


@dataclass
class AccessStats:
    """Counts for one statement: requests and sectors (global) or extra wavefronts (shared)."""

    requests: int = 0
    sectors: int = 0
    conflicts: int = 0


@dataclass
class KernelProfile:
    """Counts per statement. On a large grid only the first ``blocks_profiled`` of
    ``blocks_total`` blocks are counted (see ``PROFILE_BLOCKS``): every block of a
    launch runs the same accesses shifted, so the per-request ratios of a sample are
    those of the whole grid, and profiling all of a 1024^3 GEMM took 11 minutes."""

    kernel: str
    blocks_profiled: int = 0
    blocks_total: int = 0
    global_loads: dict[str, AccessStats] = field(default_factory=dict)
    global_stores: dict[str, AccessStats] = field(default_factory=dict)
    shared_loads: dict[str, AccessStats] = field(default_factory=dict)
    shared_stores: dict[str, AccessStats] = field(default_factory=dict)
    ldmatrix: dict[str, AccessStats] = field(default_factory=dict)  # warp instructions

    def _total(self, table: dict[str, AccessStats], what: str) -> int:
        return sum(getattr(s, what) for s in table.values())

    @property
    def global_load_requests(self) -> int:
        return self._total(self.global_loads, "requests")

    @property
    def global_load_sectors(self) -> int:
        return self._total(self.global_loads, "sectors")

    @property
    def global_store_requests(self) -> int:
        return self._total(self.global_stores, "requests")

    @property
    def global_store_sectors(self) -> int:
        return self._total(self.global_stores, "sectors")

    @property
    def sectors_per_request(self) -> float:
        req = self.global_load_requests + self.global_store_requests
        return (self.global_load_sectors + self.global_store_sectors) / req if req else 0.0

    @property
    def shared_load_requests(self) -> int:
        return self._total(self.shared_loads, "requests")

    @property
    def shared_store_requests(self) -> int:
        return self._total(self.shared_stores, "requests")

    @property
    def ldmatrix_bank_conflicts(self) -> int:
        """Extra wavefronts of ``ldmatrix`` row reads, counted per phase of 8 rows."""
        return self._total(self.ldmatrix, "conflicts")

    @property
    def shared_bank_conflicts(self) -> int:
        """Extra wavefronts over all shared requests, ``ldmatrix`` too (0 when conflict-free)."""
        return (
            self._total(self.shared_loads, "conflicts")
            + self._total(self.shared_stores, "conflicts")
            + self.ldmatrix_bank_conflicts
        )

    def __str__(self) -> str:
        lines = [
            f"kernel {self.kernel}: global {self.global_load_requests} load / "
            f"{self.global_store_requests} store requests, {self.sectors_per_request:.2f} "
            f"sectors per request; shared {self.shared_load_requests} load / "
            f"{self.shared_store_requests} store requests, {self.shared_bank_conflicts} "
            "extra wavefronts from bank conflicts"
        ]
        if self.blocks_profiled < self.blocks_total:
            lines[0] += f" (first {self.blocks_profiled} of {self.blocks_total} blocks counted)"
        for title, table, per in (
            ("global load", self.global_loads, "sectors"),
            ("global store", self.global_stores, "sectors"),
            ("shared load", self.shared_loads, "conflicts"),
            ("shared store", self.shared_stores, "conflicts"),
            ("ldmatrix", self.ldmatrix, "conflicts"),
        ):
            for site, st in table.items():
                ratio = getattr(st, per) / st.requests if st.requests else 0.0
                lines.append(f"  {title:<12} {ratio:6.2f} {per}/request  `{site}`")
        return "\n".join(lines)


class Profiler:
    """Collects a :class:`KernelProfile` from the emulator's storage accesses."""

    def __init__(self, kernel: str, sites: Sequence[str]) -> None:
        self.profile = KernelProfile(kernel)
        self.sites = sites

    def record(
        self, scope: str, kind: str, idx: Any, elem_bytes: int, env_chunk: Any, mask: Any, site: int
    ) -> None:
        lanes = env_chunk.lanes
        idx = np.asarray(idx, dtype=np.int64)
        if idx.ndim == 0:
            idx = np.broadcast_to(idx, (lanes,))
        width = idx.shape[1] if idx.ndim == 2 else 1
        idx = idx.reshape(lanes, width)
        warps_per_block = -(-env_chunk.threads // WARP)
        lane = env_chunk.lane_ids
        warp = (env_chunk.lane_block * warps_per_block + (lane % env_chunk.threads) // WARP).astype(
            np.int64
        )
        active = np.ones(lanes, bool) if mask is None else np.asarray(mask).reshape(lanes, -1)[:, 0]
        if not active.any():
            return
        w = np.broadcast_to(warp[:, None], idx.shape)[active]  # (active lanes, width)
        a = idx[active]
        # ldmatrix rows: 16 bytes per lane, so its phases are the 8-lane groups below
        table = getattr(self.profile, "ldmatrix" if kind == "ldmatrix" else f"{scope}_{kind}s")
        stats = table.setdefault(self.sites[site], AccessStats())
        stats.requests += int(np.unique(w[:, 0]).size)
        if scope == "global":
            sector = (a * elem_bytes) // SECTOR_BYTES
            stats.sectors += int(
                np.unique(np.stack([w.reshape(-1), sector.reshape(-1)]), axis=1).shape[1]
            )
        else:
            # A warp's wide accesses are served in phases of 128 bytes (8-byte accesses by
            # half-warps, 16-byte ones by quarter-warps); conflicts count within a phase.
            per_phase = max(1, min(WARP, BANKS * BANK_BYTES // (width * elem_bytes)))
            in_warp = (lane % env_chunk.threads) % WARP
            group = w[:, 0] * WARP + (in_warp[active] // per_phase)
            stats.conflicts += _extra_wavefronts(group, a, elem_bytes)


def _extra_wavefronts(warp: np.ndarray, index: np.ndarray, elem_bytes: int) -> int:
    """Sum over warps (or their phases) of (most distinct words in one bank) - 1."""
    warp = np.broadcast_to(warp.reshape(-1, 1), index.shape).reshape(-1)
    word = (index.reshape(-1) * elem_bytes) // BANK_BYTES
    pairs = np.unique(np.stack([warp, word], axis=1), axis=0)  # distinct words per warp
    bank_key = pairs[:, 0] * BANKS + pairs[:, 1] % BANKS
    keys, counts = np.unique(bank_key, return_counts=True)
    _, warp_pos = np.unique(keys // BANKS, return_inverse=True)
    worst = np.zeros(warp_pos.max() + 1, np.int64)
    np.maximum.at(worst, warp_pos, counts)
    return int((worst - 1).sum())
