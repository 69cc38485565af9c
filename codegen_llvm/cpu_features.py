"""The CPU a target's machine code needs and the vector registers its tiles are sized by.

Code compiled for ``-mcpu=native`` (the default) uses every instruction the building
machine has; loaded on a CPU without them, the first such instruction kills the
process with SIGILL. So an exported CPU model records what its code was built for:
the LLVM CPU name, the triple, and the features its code may use, and
:func:`check_host` refuses a file whose features this host lacks, naming them,
before any library is opened; :func:`host_mismatch` is the same check for modules
built in this process and exported libraries, whose calls then raise ``DeviceError``.
:func:`vector_unit` gives the templates the target's register width and count.

Which features a ``-mcpu`` implies is LLVM's knowledge, and llvmlite exposes it only
for the host. So the features are known for ``native`` (the host's own list), for the
x86-64 micro-architecture levels of the x86-64 psABI (``x86-64``, ``x86-64-v2``,
``-v3``, ``-v4``: the portable choice, tabled below from the psABI), and for
``generic``; ``-mattr`` adds to and takes from them. For any other named CPU
(``-mcpu=skylake-avx512``) the features are unknown: such a file loads only on a
host LLVM names the same, or fails with a message saying to rebuild with a level.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm

from ember.errors import InvalidModelError
from ember.target import Target
from ember.tir import dtype as dt

# The x86-64 psABI's micro-architecture levels, as LLVM names the features of each
# (each level includes the ones before it). CPUID bits LLVM has no feature for
# (OSFXSR, SCE, OSXSAVE's OS half) are left out.
_LEVEL_ADDS = {
    "x86-64": ("64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2"),
    "x86-64-v2": ("cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"),
    "x86-64-v3": ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"),
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
PORTABLE_CPUS = tuple(_LEVEL_ADDS)
# independent multiply-adds that hide the FMA latency: 2 pipes x 4 cycles (a register
# tile with fewer accumulators waits on its chains)
FMA_CHAINS = 8


def _level_features(cpu: str) -> frozenset[str]:
    names = list(_LEVEL_ADDS)
    return frozenset(f for level in names[: names.index(cpu) + 1] for f in _LEVEL_ADDS[level])


@functools.cache
def host_cpu() -> tuple[str, str, frozenset[str]]:
    """``(LLVM CPU name, process triple, enabled features)`` of this machine."""

    try:
        features = frozenset(k for k, on in llvm.get_host_cpu_features().items() if on)
    except RuntimeError:  # LLVM cannot read this CPU's features
        features = frozenset()
    return llvm.get_host_cpu_name(), llvm.get_process_triple(), features


def built_for(target: str | Target) -> dict[str, Any]:
    """The manifest's ``cpu`` section for code compiled for the ``llvm`` ``target``:
    ``name`` (LLVM CPU), ``triple``, ``features`` (sorted; None when unknown)."""
    t = Target.parse(target)
    name, triple, host_features = host_cpu()
    cpu = t.mcpu
    features: set[str] | None
    if cpu == "native":
        features = set(host_features)
    elif cpu in _LEVEL_ADDS:
        features, name = set(_level_features(cpu)), cpu
    elif cpu == "generic":
        features, name = set(), cpu
    else:
        features, name = None, cpu
    for item in filter(None, (f.strip() for f in (t.get("mattr") or "").split(","))):
        if features is not None and item[0] == "+":
            features.add(item[1:])
        elif features is not None and item[0] == "-":
            features.discard(item[1:])
    return {
        "name": name,
        "triple": t.get("mtriple") or triple,
        "features": None if features is None else sorted(features),
    }


@dataclass(frozen=True)
class VectorUnit:
    """The vector registers the CPU schedules size their tiles by: how wide one is and how
    many there are. A register tile the target cannot hold spills: the 3x3 conv of
    ResNet-18 tiled for AVX-512's 32 registers of 64 bytes compiled, for an AVX2 CPU's 16
    of 32, to 517 spill stores around its 360 multiply-adds."""

    register_bytes: int
    registers: int

    def lanes(self, dtype: str) -> int:
        """Elements of ``dtype`` in one register (at least one)."""
        return max(1, self.register_bytes // dt.bytes_of(dtype))

    @property
    def accumulators(self) -> tuple[int, int]:
        """``(most, default)`` registers a micro-kernel's accumulator tile may take.
        AVX-512's 32: at most 24, leaving room for the weight vectors and the broadcasts,
        and 16 by default, the sweet spot measured on the ResNet-18 convs and GEMMs. With
        16 registers (AVX2): at most 13 and 12 by default, which still keeps two FMA pipes
        of four cycles' latency busy (8 independent chains at least)."""
        if self.registers >= 32:
            return 24, 16
        return self.registers - 3, self.registers - 4

    @property
    def row_registers(self) -> int:
        """Registers in one row of a GEMM-like register tile (the GEMM micro-kernel's,
        fused attention's scores): four of AVX-512's 32, two of AVX2's 16. On AVX2 (Zen 3,
        two threads) a 128x256x256 GEMM ran 4 x 16 in 0.141 ms without a spill, 3 x 32 in
        0.304 ms with 76 spills; the BERT encoder's attention in key blocks of 16 instead
        of 64 took the whole model from 12.7 to 10.4 ms."""
        return 4 if self.registers >= 32 else 2

    @property
    def gemm_rows(self) -> int:
        """Rows of the GEMM micro-kernel's register tile: as many :attr:`row_registers` rows
        as the most accumulators allow, 6 x 4 of AVX-512's registers and 6 x 2 of AVX2's,
        leaving a row of B and a broadcast of A. On a 2-core Intel Xeon (one thread, data
        on cache lines), once edge tiles no longer tested their rows inside the k loop
        (``unswitch_guards``), 6 rows beat 4 at every shape tried: 1.02-1.07x with AVX-512
        at 12-197 x 402-3072 x 400-768, 1.15-1.18x with AVX2 code, whose 4 x 16 tile keeps
        only 8 multiply-adds in flight (BLIS's Haswell kernel is 6 x 16 too)."""
        return self.accumulators[0] // self.row_registers

    def row_lanes(self, dtype: str) -> int:
        """Elements of ``dtype`` in one tile row (:attr:`row_registers` registers)."""
        return self.row_registers * self.lanes(dtype)


AVX512 = VectorUnit(64, 32)
AVX2 = VectorUnit(32, 16)


def vector_unit(target: str | Target | None = None) -> VectorUnit:
    """The vector registers of the ``llvm`` ``target``; None: the target of the enclosing
    ``with target:`` block (Ember enters one while compiling and tuning), else the host.
    A named CPU whose features Ember cannot list (``-mcpu=skylake-avx512``) counts as the
    host's when LLVM names the host the same, else by an ``avx512`` in its name."""
    return _vector_unit(_llvm_target(target))


def _llvm_target(target: str | Target | None) -> Target:
    """``target`` parsed; None: the enclosing ``with target:`` block's, else the host's
    ``llvm`` (so is any target of another kind)."""
    t = Target.parse(target) if target is not None else Target.current()
    return t if t is not None and t.kind == "llvm" else Target.parse("llvm")


@functools.cache
def _vector_unit(t: Target) -> VectorUnit:
    section = built_for(t)
    arch = _arch(section["triple"])
    features = section["features"]
    if features is None:
        host_name, _, host_features = host_cpu()
        named = section["name"]
        features = (
            host_features if named == host_name else {"avx512f"} if "avx512" in named else {"avx"}
        )
    if arch in ("x86_64", "i386", "i686"):
        if "avx512f" in features:
            return AVX512
        return AVX2 if "avx" in features else VectorUnit(16, 16)
    if arch in ("aarch64", "arm64"):
        return VectorUnit(16, 32)  # NEON: 32 registers of 128 bits
    return VectorUnit(16, 16)


def near_last_level_cache(target: str | Target | None = None) -> bool:
    """Whether the ``llvm`` ``target``'s cores read data that has left their L2 back at
    close to L2 speed: AMD's Zen (LLVM names them ``znver*``), whose L3 slice sits beside
    each core complex. Schedules that re-read a working set larger than L2 (a conv's
    weights once per output row) pay for it only there. Elsewhere, and for a portable
    level whose CPU is not known, the answer is no: on a 2-core Intel Xeon guest
    (AVX-512) re-reading ResNet-50's 4 MB 1x1 weights once per 7-pixel row ran at 16
    GB/s, the machine's memory bandwidth (1.77 ms a conv against 0.88 ms read once).
    Target resolution as in :func:`vector_unit`."""
    return _near_last_level_cache(_llvm_target(target))


@functools.cache
def _near_last_level_cache(t: Target) -> bool:
    return str(built_for(t)["name"]).startswith("znver")


# a core's L2 where the machine's own cannot be read (another CPU than the host's, or a
# host that does not say): the 2-core Intel Xeon guests' 2 MB, which the CPU schedules'
# byte thresholds were first measured on
DEFAULT_L2_BYTES = 2 << 20
HOST_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


def l2_bytes(target: str | Target | None = None) -> int:
    """Bytes of L2 cache one core of the ``llvm`` ``target``'s machine has: the host's own
    (Linux's ``/sys`` cache description) when the target is this CPU, else the size its
    LLVM name is known to have (AMD's Zen), else :data:`DEFAULT_L2_BYTES`. A schedule
    whose working set is re-read from the next level once it outgrows L2 sizes it by
    this: the Zen 3 guests have 512 KB, the Intel Xeon guests 2 MB, and a 1.6 MB weight
    block re-read per pixel tile ran 15-20% slower on the first (``conv2d_nchwc.py``).
    Target resolution as in :func:`vector_unit`."""
    return _l2_bytes(_llvm_target(target))


# a core's L2 by LLVM's CPU name, for targets named other than the host (AMD's documented
# sizes: Zen 1-3 512 KB, Zen 4-5 1 MB)
_NAMED_L2_BYTES = {
    **{f"znver{n}": 512 << 10 for n in (1, 2, 3)},
    **{f"znver{n}": 1 << 20 for n in (4, 5)},
}


@functools.cache
def _l2_bytes(t: Target) -> int:
    name = str(built_for(t)["name"])
    named = _NAMED_L2_BYTES.get(name, DEFAULT_L2_BYTES)
    if name != host_cpu()[0]:
        return named
    return host_cache_bytes(2, HOST_CACHE_DIR) or named


def host_cache_sizes(folder: Path = HOST_CACHE_DIR) -> dict[int, int]:
    """Bytes of the data or unified cache at each level that ``folder`` (one CPU's
    ``cache`` directory in Linux's ``/sys``) describes, the largest where a level lists
    several; entries that cannot be read are left out, and a missing folder gives {}."""
    sizes: dict[int, int] = {}
    for index in folder.glob("index*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            size = int(text.rstrip("KMG")) * scale
        except (OSError, ValueError):
            continue
        sizes[level] = max(size, sizes.get(level, 0))
    return sizes


def host_cache_bytes(level: int, folder: Path) -> int | None:
    """Bytes of the data (or unified) cache of ``level`` that ``folder`` describes (see
    :func:`host_cache_sizes`); None where it names none or cannot be read."""
    return host_cache_sizes(folder).get(level)


def _arch(triple: str) -> str:
    return triple.split("-", 1)[0]


def host_mismatch(section: dict[str, Any], unknown_ok: bool = False) -> str | None:
    """Why this CPU cannot run code built for ``section`` (see :func:`built_for`), or None.

    Code for a named CPU whose features Ember cannot list is refused unless LLVM names this
    host the same, or ``unknown_ok``: code JIT-compiled in this process for such a CPU is
    let run, as before these checks (refusing it would refuse ``-mcpu=haswell`` on every
    newer x86), while a file's code must say what it needs."""
    host_name, host_triple, host_features = host_cpu()
    if _arch(section["triple"]) != _arch(host_triple):
        return f"its code was built for {section['triple']}, this machine is {host_triple}"
    features = section.get("features")
    if features is None:
        if section["name"] == host_name or unknown_ok:
            return None
        return (
            f"its code was built for the CPU '{section['name']}', whose instructions Ember "
            f"cannot check against this CPU ('{host_name}')"
        )
    missing = sorted(set(features) - host_features) if host_features else []
    if missing:
        return (
            f"its code was built for the CPU '{section['name']}' and uses instructions this "
            f"CPU ('{host_name}') lacks: {', '.join(missing)}"
        )
    return None


def check_host(section: dict[str, Any], where: Any) -> None:
    """Refuse code built for ``section`` (see :func:`built_for`) that this CPU cannot run."""
    reason = host_mismatch(section)
    if reason is not None:
        raise InvalidModelError(
            f"{where}: {reason}; export it again from a model compiled for this machine, or "
            "for a portable level such as target='llvm -mcpu=x86-64-v3'"
        )


__all__ = [
    "AVX2",
    "AVX512",
    "PORTABLE_CPUS",
    "VectorUnit",
    "built_for",
    "check_host",
    "host_cpu",
    "host_mismatch",
    "vector_unit",
]
