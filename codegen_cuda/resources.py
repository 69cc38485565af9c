"""What a compiled kernel costs the GPU: registers, shared and local memory, and occupancy.

:mod:`ember.codegen_cuda.nvrtc` asks ptxas for a verbose report (``-v``); this
module reads it into one :class:`ResourceUsage` per kernel, and turns a usage and
a block size into the occupancy the architecture allows, from a small table of
per-SM limits. It needs no GPU, so tests and the tuner can judge a schedule's
resource appetite on any machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ember.errors import ArgumentError


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM and per-block limits of one architecture (CUDA programming guide, table 21)."""

    registers_per_sm: int
    max_registers_per_thread: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    shared_per_sm: int  # bytes, the largest carve-out
    max_shared_per_block: int  # bytes, with the opt-in for dynamic shared memory
    static_shared_per_block: int = 48 * 1024  # without the opt-in
    reserved_shared_per_block: int = 1024  # the system's share of each block's allocation
    register_unit: int = 256  # registers are allocated per warp in units of this many
    shared_unit: int = 128  # shared memory is allocated in units of this many bytes
    warp_size: int = 32


KiB = 1024
_SM80 = ArchLimits(65536, 255, 2048, 1024, 32, 164 * KiB, 163 * KiB)
_SM86 = ArchLimits(65536, 255, 1536, 1024, 16, 100 * KiB, 99 * KiB)
_SM100 = ArchLimits(65536, 255, 2048, 1024, 32, 228 * KiB, 227 * KiB)
_SM120 = ArchLimits(65536, 255, 1536, 1024, 24, 100 * KiB, 99 * KiB)
# One row per architecture any supported NVRTC offers (nvrtcGetSupportedArchs: CUDA 13.5
# gives sm_75 ... sm_121), from the programming guide's "technical specifications per
# compute capability" (NVIDIA's libcu++ arch_traits.h carries the same numbers). A test
# checks every architecture the installed NVRTC lists has a row. The opt-in shared limit
# per block is the SM's carve-out less the 1 KiB the system reserves per block (sm_80+).
ARCH_LIMITS: dict[str, ArchLimits] = {
    "sm_70": ArchLimits(
        65536, 255, 2048, 1024, 32, 96 * KiB, 96 * KiB, reserved_shared_per_block=0
    ),
    "sm_75": ArchLimits(
        65536, 255, 1024, 1024, 16, 64 * KiB, 64 * KiB, reserved_shared_per_block=0
    ),
    "sm_80": _SM80,
    "sm_86": _SM86,
    "sm_87": ArchLimits(65536, 255, 1536, 1024, 16, 164 * KiB, 163 * KiB),  # Jetson Orin
    "sm_88": _SM86,  # as sm_86 (libcu++ derives it so)
    "sm_89": ArchLimits(65536, 255, 1536, 1024, 24, 100 * KiB, 99 * KiB),
    "sm_90": ArchLimits(65536, 255, 2048, 1024, 32, 228 * KiB, 227 * KiB),
    "sm_100": _SM100,
    "sm_103": _SM100,  # as sm_100 (B300)
    # sm_107 is in NVRTC 13.5's list but in no published table yet: its family's (sm_100)
    # numbers, so its kernels are held to the same per-block limits
    "sm_107": _SM100,
    "sm_110": ArchLimits(65536, 255, 1536, 1024, 24, 228 * KiB, 227 * KiB),  # Thor
    "sm_120": _SM120,
    "sm_121": _SM120,  # as sm_120 (GB10)
}

_ARCH_NAME = re.compile(r"^(?:sm|compute)_(\d+)[af]?$")


def arch_number(arch: str) -> int:
    """``"sm_90a"`` -> 90, ``"compute_100f"`` -> 100: the architecture without the suffix
    that selects features (``a``, ``f``) or the PTX form; 0 for a string of another shape."""
    m = _ARCH_NAME.match(arch or "")
    return int(m.group(1)) if m else 0


def arch_limits(arch: str) -> ArchLimits:
    """The limits of ``arch``; ``sm_90a``, ``sm_100f`` and ``compute_90`` share their base
    architecture's row."""
    limits = ARCH_LIMITS.get(f"sm_{arch_number(arch)}")
    if limits is None:
        raise ArgumentError(
            f"no resource table for architecture '{arch}'; known: {', '.join(ARCH_LIMITS)}"
        )
    return limits


@dataclass(frozen=True)
class ResourceUsage:
    """One kernel's per-thread registers, per-block static shared bytes, per-thread local bytes.

    ``local_bytes`` is the stack frame (local arrays that did not fit in registers,
    and spills); ``spill_bytes`` counts the spill stores alone. ``max_threads`` is the
    largest block the kernel can be launched with: its ``__launch_bounds__`` and what
    its registers allow.
    """

    registers: int
    shared_bytes: int
    local_bytes: int
    max_threads: int
    spill_bytes: int = 0
    dynamic_shared_bytes: int = 0  # requested at launch (kernels above 48 KiB of shared)


@dataclass(frozen=True)
class Occupancy:
    """How many blocks and warps of a kernel fit on one SM, and which resource limits it."""

    blocks_per_sm: int
    warps_per_sm: int
    limited_by: str  # "threads", "blocks", "registers" or "shared memory"

    def fraction(self, arch: str) -> float:
        """Resident warps over the SM's maximum."""
        limits = arch_limits(arch)
        return self.warps_per_sm / (limits.max_threads_per_sm // limits.warp_size)


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _registers_per_warp(registers: int, limits: ArchLimits) -> int:
    return _round_up(max(registers, 1) * limits.warp_size, limits.register_unit)


def max_threads_for_registers(registers: int, arch: str, launch_bound: int | None = None) -> int:
    """The largest block (whole warps) whose registers fit in one SM, capped by the bounds."""
    limits = arch_limits(arch)
    warps = limits.registers_per_sm // _registers_per_warp(registers, limits)
    threads = min(warps * limits.warp_size, limits.max_threads_per_block)
    return min(threads, launch_bound) if launch_bound else threads


def occupancy(
    usage: ResourceUsage, threads_per_block: int, arch: str, dynamic_shared: int = 0
) -> Occupancy:
    """Blocks and warps one SM holds at once for this kernel and block size."""
    limits = arch_limits(arch)
    if not 0 < threads_per_block <= limits.max_threads_per_block:
        raise ArgumentError(
            f"a block of {threads_per_block} threads is outside 1..{limits.max_threads_per_block}"
        )
    warps = -(-threads_per_block // limits.warp_size)
    bounds = {
        "blocks": limits.max_blocks_per_sm,
        "threads": limits.max_threads_per_sm // (warps * limits.warp_size),
        "registers": limits.registers_per_sm
        // (_registers_per_warp(usage.registers, limits) * warps),
    }
    shared = usage.shared_bytes + usage.dynamic_shared_bytes + dynamic_shared
    if shared:
        per_block = _round_up(shared + limits.reserved_shared_per_block, limits.shared_unit)
        bounds["shared memory"] = limits.shared_per_sm // per_block
    limited_by = min(bounds, key=lambda k: bounds[k])
    blocks = max(bounds[limited_by], 0)
    return Occupancy(blocks, blocks * warps, limited_by)


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BOUNDS = re.compile(r"__launch_bounds__\((\d+)\)\s+(\w+)\s*\(")
_DYNAMIC = re.compile(r"^// (\w+): (\d+) bytes of dynamic shared memory$", re.M)


def launch_bounds(source: str) -> dict[str, int]:
    """``__launch_bounds__`` per kernel name, read from CUDA source Ember printed."""
    return {name: int(n) for n, name in _BOUNDS.findall(source)}


def parse_ptxas_log(log: str, arch: str, source: str = "") -> dict[str, ResourceUsage]:
    """Per-kernel usage from ``ptxas -v`` output (as NVRTC's program log carries it)."""
    bounds = launch_bounds(source)
    dynamic = {name: int(n) for name, n in _DYNAMIC.findall(source)}
    table_arch = arch if arch in ARCH_LIMITS else "sm_80"  # newer archs: the common limits
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = m.group(1)
            found.setdefault(current, {})
        elif m := _PROPERTIES.search(line):
            current = m.group(1)
            found.setdefault(current, {})
        elif current is not None and (m := _FRAME.search(line)):
            found[current]["local"] = int(m.group(1))
            found[current]["spill"] = int(m.group(2))
        elif current is not None and (m := _USED.search(line)):
            found[current]["registers"] = int(m.group(1))
            smem = _SMEM.search(line)
            found[current]["shared"] = int(smem.group(1)) if smem else 0
    out: dict[str, ResourceUsage] = {}
    for name, facts in found.items():
        if "registers" not in facts:
            continue  # a device function's properties, not a kernel
        regs = facts["registers"]
        out[name] = ResourceUsage(
            registers=regs,
            shared_bytes=facts.get("shared", 0),
            local_bytes=facts.get("local", 0),
            max_threads=max_threads_for_registers(regs, table_arch, bounds.get(name)),
            spill_bytes=facts.get("spill", 0),
            dynamic_shared_bytes=dynamic.get(name, 0),
        )
    return out


__all__ = [
    "ARCH_LIMITS",
    "ArchLimits",
    "Occupancy",
    "ResourceUsage",
    "arch_limits",
    "arch_number",
    "launch_bounds",
    "max_threads_for_registers",
    "occupancy",
    "parse_ptxas_log",
]
