"""The CPU a model's machine code needs, recorded on export and checked on load.

Code compiled for ``-mcpu=native`` (the default) uses every instruction the building
machine has; loaded on a CPU without them, the first such instruction kills the
process with SIGILL. So an exported CPU model records what its code was built for:
the LLVM CPU name, the triple, and the features its code may use, and
:func:`check_host` refuses a file whose features this host lacks, naming them,
before any library is opened.

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
from typing import Any

import llvmlite.binding as llvm

from ember.errors import InvalidModelError
from ember.target import Target

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


__all__ = ["PORTABLE_CPUS", "built_for", "check_host", "host_cpu", "host_mismatch"]
