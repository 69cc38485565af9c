"""Ember's LLVM code-generation options (``jit.codegen_options``).

LLVM's machine scheduler, with its cyclic-critical-path heuristic and Zen 4's scheduling
model, hoisted the broadcast input pixels of a conv micro-kernel's 32 unrolled channels
ahead of their multiply-adds and spilled hundreds of them to the stack; MobileNetV2's
1x1 convs ran 1.5x slower for it. The kernel here is that conv's default schedule built
for a named Zen 4 with AVX-512 (code generation only: no host needs the CPU), its stack
traffic counted in the assembly with Ember's options and with LLVM's defaults.
"""

from __future__ import annotations

import platform
import threading
from typing import Any

import pytest

import ember
from ember.codegen_llvm import jit
from ember.target import Target
from ember.tuner.task import create_task

ZEN4_AVX512 = "llvm -mcpu=znver4 -mattr=+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx512cd"


def stack_vector_moves(asm: str) -> int:
    """Instructions that move a 512-bit register to or from the stack: spills and reloads
    (the prologue saves none, the callee-saved registers being general-purpose only)."""
    return sum(1 for line in asm.splitlines() if "(%rsp)" in line and "zmm" in line)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 assembly")
@pytest.mark.skipif(
    jit.llvm.llvm_version_info[0] not in jit.OPTIONS_LLVM_MAJORS,
    reason=f"LLVM {jit.llvm.llvm_version_info[0]} is not checked for Ember's code-generation "
    "options (jit.OPTIONS_LLVM_MAJORS): none are set, and this kernel may spill",
)
def test_a_pointwise_conv_micro_kernel_keeps_its_pixels_in_registers_on_zen4() -> None:
    # MobileNetV2's 96 -> 576 1x1 conv at 14x14: flat tiles of 12 pixels, two 16-lane
    # registers each, the block's 32 input channels unrolled
    args = (1, 96, 14, 14, 576, 1, 1, 1, 0, 1, "float32")
    task = create_task("conv2d_NCHWc.llvm", args=args, target=ZEN4_AVX512)
    space = task.config_space
    cfg = space.from_choices({n: k.default_index for n, k in space.knobs.items()})
    with Target.parse(ZEN4_AVX512):
        sch, tensors = task.instantiate(cfg)
    module = ember.build(sch, tensors, target=ZEN4_AVX512)
    ours = stack_vector_moves(module.get_source("asm"))
    spec = jit.MachineSpec.from_target(Target.parse(ZEN4_AVX512))
    optimised = jit.parse_and_verify(module.get_source("ll"), spec)
    defaults = stack_vector_moves(jit.target_machine(spec, False).emit_assembly(optimised))
    assert ours <= 16, f"{ours} moves of vector registers to or from the stack"
    # LLVM's defaults are back once Ember's code generation is done, and spill here
    assert defaults > 100


def test_options_are_set_once_for_overlapping_code_generations(monkeypatch: Any) -> None:
    calls: list[str] = []
    monkeypatch.setattr(jit.llvm, "set_option", lambda _name, option: calls.append(option))
    monkeypatch.setattr(jit.llvm, "llvm_version_info", (jit.OPTIONS_LLVM_MAJORS.start, 0, 0))
    inside, release = threading.Barrier(3), threading.Event()

    def generate() -> None:
        with jit.codegen_options():
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=generate) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()  # both code generations are under way
    assert calls == [on for on, _ in jit.CODEGEN_OPTIONS]
    release.set()
    for t in threads:
        t.join()
    assert calls == [on for on, _ in jit.CODEGEN_OPTIONS] + [off for _, off in jit.CODEGEN_OPTIONS]


def test_options_are_restored_when_code_generation_fails(monkeypatch: Any) -> None:
    calls: list[str] = []
    monkeypatch.setattr(jit.llvm, "set_option", lambda _name, option: calls.append(option))
    monkeypatch.setattr(jit.llvm, "llvm_version_info", (jit.OPTIONS_LLVM_MAJORS.start, 0, 0))
    with pytest.raises(RuntimeError), jit.codegen_options():
        raise RuntimeError("LLVM failed")
    assert calls[-len(jit.CODEGEN_OPTIONS) :] == [off for _, off in jit.CODEGEN_OPTIONS]
    with jit.codegen_options():  # and set again for the next one
        assert calls[-len(jit.CODEGEN_OPTIONS) :] == [on for on, _ in jit.CODEGEN_OPTIONS]


def test_an_llvm_not_checked_for_the_options_gets_none(monkeypatch: Any) -> None:
    # LLVM's command-line parser ends the process on an option it does not define
    calls: list[str] = []
    monkeypatch.setattr(jit.llvm, "set_option", lambda _name, option: calls.append(option))
    monkeypatch.setattr(jit.llvm, "llvm_version_info", (jit.OPTIONS_LLVM_MAJORS.stop, 0, 0))
    with jit.codegen_options():
        pass
    assert calls == []
