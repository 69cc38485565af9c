"""JIT code reaches everything through 64-bit references (the large code model).

MCJIT maps an object's code and data separately, wherever the kernel finds room. Under
the small code model, code reaches its constants by 32-bit PC-relative offsets, and in a
process whose address space many engines and large arrays had fragmented, one object's
sections landed over 2 GiB apart: LLVM aborted the process
(``resolveX86_64Relocation``: ``isInt<32>(RealOffset)``), as ``ember tune`` on
MobileNetV2 did about 40 minutes in. The tests read the relocations of the objects the
engines load, from the ELF file itself, and refuse any 32-bit one.
"""

from __future__ import annotations

import platform
import struct

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen_llvm import jit
from ember.codegen_llvm.step_loop import step_loop_ir
from ember.target import Target

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="x86-64 ELF relocation numbers"
)

SHT_RELA = 4
# x86-64's 64-bit relocations (the large code model's): R_X86_64_64, PC64, GOTOFF64,
# GOT64, GOTPCREL64, GOTPC64, GOTPLT64, PLTOFF64
WIDE = {1, 24, 25, 27, 28, 29, 30, 31}


def relocation_types(obj: bytes) -> set[int]:
    """The relocation types of every SHT_RELA section of an ELF64 little-endian object."""
    assert obj[:4] == b"\x7fELF" and obj[4] == 2 and obj[5] == 1
    shoff = struct.unpack_from("<Q", obj, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    types = set()
    for k in range(shnum):
        base = shoff + k * shentsize
        sh_type = struct.unpack_from("<I", obj, base + 4)[0]
        if sh_type != SHT_RELA:
            continue
        offset, size = struct.unpack_from("<QQ", obj, base + 0x18)
        entsize = struct.unpack_from("<Q", obj, base + 0x38)[0]
        for pos in range(offset, offset + size, entsize):
            info = struct.unpack_from("<Q", obj, pos + 8)[0]
            types.add(info & 0xFFFFFFFF)
    return types


def test_a_kernel_s_object_has_only_64_bit_relocations() -> None:
    n = 1000
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.exp(A[i]) * 3.25 + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(s[B].op.axis[0])  # the pool's cells: globals the code reads
    f = ember.build(s, [A, B], target="llvm")
    types = relocation_types(f._object)
    assert types and types <= WIDE, sorted(types - WIDE)
    a = np.random.default_rng(0).uniform(-2, 2, n).astype("float32")
    b = np.zeros(n, "float32")
    f(a, b)
    np.testing.assert_allclose(b, np.exp(a) * 3.25 + 1.0, rtol=1e-5)


def test_the_step_loop_s_object_has_only_64_bit_relocations() -> None:
    spec = jit.MachineSpec.from_target(Target.parse("llvm -opt-level=1"))
    _, _, obj = jit.compile_ir(step_loop_ir(clock=1), spec)
    types = relocation_types(obj)
    assert types and types <= WIDE, sorted(types - WIDE)


def test_the_small_model_would_have_32_bit_ones() -> None:
    """The check can fail: an object for the system linker (default model) has them."""
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 1.5 + 0.25, name="B")
    spec = jit.MachineSpec.from_target(Target.parse("llvm"))
    f = ember.build(te.create_schedule(B.op), [A, B], target="llvm")
    obj = jit.emit(f.get_source("ll"), spec, "object")
    assert isinstance(obj, bytes) and relocation_types(obj) - WIDE
