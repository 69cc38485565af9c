"""Target-specific LLVM intrinsics (``llvm.x86.*``) checked against the target's CPU.

Used by :mod:`ember.codegen_llvm.externs` for ``call_llvm_pure_intrin`` calls. LLVM
selects an ``llvm.x86.*`` intrinsic only for a CPU that has its instruction; for any
other CPU it does not return an error but aborts the whole process ("Cannot select",
"Do not know how to split"). A schedule tensorized on one machine
(``matmul_int8.llvm``'s ``vpdpbusd``) must still build for the target the user names
(``-mcpu=x86-64-v3`` on a VNNI host), so before an intrinsic is emitted it is checked
against :class:`CpuFacts`, the target's triple and CPU features as
:func:`ember.codegen_llvm.cpu_features.built_for` knows them:

- an intrinsic of another architecture (``llvm.aarch64.*`` for x86) is a ``CompileError``;
- an x86 intrinsic whose features the target lacks is emitted as generic LLVM IR with
  the same result where Ember knows its meaning (``vpdpbusd``: exact, LLVM lowers it
  to the vector instructions the target has), else it is a ``CompileError`` naming the
  missing features;
- for a named CPU whose features Ember cannot list (``-mcpu=skylake-avx512``) an
  intrinsic Ember can expand is expanded (correct on every CPU, maybe slower), any
  other is left to LLVM, which knows that CPU.

TVM instead lets the template or strategy pick the intrinsic by the target's features
and leaves a wrong choice to LLVM; Ember keeps the template's schedule and makes the
intrinsic safe for every target string.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llvmlite import ir

from ember.codegen_llvm.cpu_features import built_for
from ember.errors import CompileError

# The first name component of LLVM's target-specific intrinsics, per triple architecture.
_ARCH_PREFIX = {
    "x86_64": "x86",
    "i386": "x86",
    "i686": "x86",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "arm": "arm",
    "armv7": "arm",
    "powerpc64le": "ppc",
    "powerpc64": "ppc",
    "riscv64": "riscv",
    "riscv32": "riscv",
    "s390x": "s390",
    "wasm32": "wasm",
    "wasm64": "wasm",
}
_TARGET_PREFIXES = frozenset(_ARCH_PREFIX.values()) | {"nvvm", "amdgcn", "hexagon", "mips"}

# x86 intrinsic name prefixes and the LLVM features each needs (every matching prefix adds).
_X86_NEEDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("llvm.x86.sse.", ("sse",)),
    ("llvm.x86.sse2.", ("sse2",)),
    ("llvm.x86.sse3.", ("sse3",)),
    ("llvm.x86.ssse3.", ("ssse3",)),
    ("llvm.x86.sse41.", ("sse4.1",)),
    ("llvm.x86.sse42.", ("sse4.2",)),
    ("llvm.x86.avx.", ("avx",)),
    ("llvm.x86.avx2.", ("avx2",)),
    ("llvm.x86.fma.", ("fma",)),
    ("llvm.x86.vcvtph2ps.", ("f16c",)),
    ("llvm.x86.vcvtps2ph.", ("f16c",)),
    ("llvm.x86.avx512.", ("avx512f",)),
    ("llvm.x86.avx512.vpdpb", ("avx512vnni",)),
    ("llvm.x86.avx512.vpdpw", ("avx512vnni",)),
    ("llvm.x86.avx512bf16.", ("avx512bf16",)),
    ("llvm.x86.avx512fp16.", ("avx512fp16",)),
    ("llvm.x86.avxvnni.", ("avxvnni",)),
)


@dataclass(frozen=True)
class CpuFacts:
    """The target's triple and the CPU features its code may use (None: not known)."""

    triple: str
    features: frozenset[str] | None

    @property
    def arch_prefix(self) -> str:
        return _ARCH_PREFIX.get(self.triple.split("-", 1)[0], "")


@functools.cache
def cpu_facts(target: str = "llvm") -> CpuFacts:
    """:class:`CpuFacts` of the ``llvm`` ``target`` string (``"llvm"``: the host)."""
    section = built_for(target)
    features = section["features"]
    return CpuFacts(section["triple"], None if features is None else frozenset(features))


def needed_features(name: str) -> tuple[str, ...]:
    """The LLVM features the x86 intrinsic ``name`` needs, as far as Ember knows them."""
    return tuple(f for prefix, needs in _X86_NEEDS if name.startswith(prefix) for f in needs)


def _vpdpbusd(b: ir.IRBuilder, ret: ir.Type, args: Sequence[ir.Value]) -> ir.Value:
    """``vpdpbusd(acc, a, b)`` in generic IR: lane ``i`` of the int32 result is ``acc[i]``
    plus the 4 products of unsigned byte ``a[4i+j]`` and signed byte ``b[4i+j]`` (each
    fits 16 bits, their sum 18: no overflow, and the add wraps as the instruction's)."""
    acc, a, w = args
    lanes = ret.count  # type: ignore[attr-defined]
    bytes_ty = ir.VectorType(ir.IntType(8), 4 * lanes)
    wide = ir.VectorType(ir.IntType(32), 4 * lanes)
    prod = b.mul(b.zext(b.bitcast(a, bytes_ty), wide), b.sext(b.bitcast(w, bytes_ty), wide))
    total = b.bitcast(acc, ret)
    for j in range(4):
        mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [4 * i + j for i in range(lanes)])
        total = b.add(total, b.shuffle_vector(prod, prod, mask))
    return total


# Intrinsics emitted as generic IR where the target lacks their instruction.
_EXPANSIONS: dict[str, Callable[[ir.IRBuilder, ir.Type, Sequence[ir.Value]], ir.Value]] = {
    "llvm.x86.avx512.vpdpbusd.512": _vpdpbusd,
    "llvm.x86.avx512.vpdpbusd.256": _vpdpbusd,
    "llvm.x86.avx512.vpdpbusd.128": _vpdpbusd,
}


def expansion_for(
    name: str, cpu: CpuFacts
) -> Callable[[ir.IRBuilder, ir.Type, Sequence[ir.Value]], ir.Value] | None:
    """None where the ``cpu`` may call the intrinsic ``name``; else the generic IR that
    replaces it. Raises ``CompileError`` where the target cannot run it at all."""
    prefix = name.split(".")[1] if name.count(".") >= 2 else ""
    if prefix in _TARGET_PREFIXES and prefix != cpu.arch_prefix:
        raise CompileError(
            f"'{name}' is an intrinsic of the {prefix} architecture; the target's triple is "
            f"'{cpu.triple}', which has no such instruction"
        )
    if prefix != "x86":
        return None
    if cpu.features is None:
        return _EXPANSIONS.get(name)
    missing = sorted(set(needed_features(name)) - cpu.features)
    if not missing:
        return None
    if name in _EXPANSIONS:
        return _EXPANSIONS[name]
    raise CompileError(
        f"'{name}' needs the CPU features {', '.join(missing)}, which the target's CPU does "
        "not have; build for a -mcpu (or -mattr) that has them, or use a schedule without "
        "this intrinsic"
    )


__all__ = ["CpuFacts", "cpu_facts", "expansion_for", "needed_features"]
