"""From LLVM IR text to machine code: parse, verify, optimise, JIT or emit an object.

Used by :mod:`ember.codegen_llvm.build` and :mod:`ember.codegen_llvm.module`.
The target machine follows the :class:`ember.target.Target`: ``-mcpu=native``
(the default) means the host CPU's name and features, so AVX-512 is used where
the host has it; ``-mattr`` adds features; ``-opt-level`` picks the pipeline
(default 3, LLVM's new pass manager with loop and SLP vectorisation). A module
that does not parse or verify is Ember's bug and raises :class:`IRVerifyError`
(an ``InternalError``) carrying the ``.ll``; a failure inside LLVM's code
generation raises ``CompileError`` with the source and LLVM's message.
Parallel loops call libgomp, loaded into the process once on first use. The
compiler's runtime helpers (libgcc's ``__truncdfhf2`` for a float64 -> float16
cast on CPUs without AVX512-FP16, ...) are made resolvable once, before the first
JIT: a helper MCJIT cannot find is called through a null address.

JIT engines generate code for the large code model, whose references (to constants,
globals, the GOT, other functions, and from the unwind tables) are all 64 bits wide.
MCJIT's memory manager maps an object's code, read-only data and writable data
separately, wherever the kernel finds room; under the default (small) model, code
reaches its constants by 32-bit PC-relative offsets, so in a process whose address
space many engines and large arrays had fragmented, one object's sections could land
over 2 GiB apart and LLVM aborted the process in ``resolveX86_64Relocation``
(``isInt<32>(RealOffset)``): ``ember tune`` on MobileNetV2 died that way about 40
minutes in, compiling the model to check its records. llvmlite's own memory manager
(``use_lmm``, one block per object) would also avoid it, but it under-reserves for some
objects (the step loop with its clock) and aborts on its own assertion. The large model
costs nothing measurable here (MobileNetV2, ResNet-18 and the BERT encoder timed within
noise of the small model's code, 1 thread). Objects emitted for the system linker
(:func:`emit`) keep the default model: a shared library's sections stay together.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import functools
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import llvmlite.binding as llvm

from ember.codegen_llvm.cpu_choices import check_cpu_and_features
from ember.errors import CompileError, InternalError
from ember.runtime.threads import prepare_openmp
from ember.target import Target

LIBGOMP_CANDIDATES = ("/usr/lib/x86_64-linux-gnu/libgomp.so.1", "libgomp.so.1")


class IRVerifyError(InternalError):
    """Generated LLVM IR failed to parse or verify; ``source`` is the offending ``.ll``."""

    def __init__(self, message: str, source: str) -> None:
        super().__init__(message)
        self.source = source


@dataclass(frozen=True)
class MachineSpec:
    """What the target machine is built from, resolved against the host."""

    triple: str
    cpu: str
    features: str
    opt_level: int

    @staticmethod
    def from_target(target: Target) -> MachineSpec:
        cpu = target.mcpu
        features = ""
        if cpu == "native":
            cpu = llvm.get_host_cpu_name()
            features = llvm.get_host_cpu_features().flatten()
        mattr = target.get("mattr") or ""
        if mattr:
            features = ",".join(f for f in (features, mattr) if f)
        level = target.get("opt-level") or "3"
        if not level.isdigit() or not 0 <= int(level) <= 3:
            raise CompileError(f"-opt-level must be 0..3, got {level!r} in target '{target}'")
        triple = target.get("mtriple") or llvm.get_process_triple()
        _init_llvm()
        # an unknown CPU or a malformed feature aborts the process inside LLVM
        check_cpu_and_features(triple, cpu if target.mcpu != "native" else "", mattr)
        return MachineSpec(triple, cpu, features, int(level))

    def has_feature(self, name: str) -> bool:
        return f"+{name}" in self.features.split(",")


@functools.cache
def _init_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


def target_machine(spec: MachineSpec, for_jit: bool) -> llvm.TargetMachine:
    """A new target machine (an MCJIT engine takes ownership of the one it is given)."""
    _init_llvm()
    try:
        target = llvm.Target.from_triple(spec.triple)
        if for_jit:  # position-independent too: its object code is also the library's
            return target.create_target_machine(
                cpu=spec.cpu,
                features=spec.features,
                opt=spec.opt_level,
                reloc="pic",
                codemodel="large",  # 64-bit references only: see the module notes
                jit=True,
            )
        return target.create_target_machine(
            cpu=spec.cpu,
            features=spec.features,
            opt=spec.opt_level,
            reloc="pic",
            codemodel="default",
        )
    except RuntimeError as e:
        raise CompileError(
            f"LLVM cannot target '{spec.triple}' / cpu '{spec.cpu}'", log=str(e)
        ) from e


# LLVM options in force while Ember generates machine code, each with the value that
# restores LLVM's default (see codegen_options), and the LLVM versions known to define them
# (llvmlite 0.42 has LLVM 14; the option dates from LLVM 3.4, checked here on 22).
CODEGEN_OPTIONS = (("-misched-cyclicpath=false", "-misched-cyclicpath=true"),)
OPTIONS_LLVM_MAJORS = range(14, 23)
_options_lock = threading.Lock()
_options_users = 0


@contextlib.contextmanager
def codegen_options() -> Iterator[None]:
    """Ember's LLVM code-generation options, in force for the ``with`` block.

    The machine scheduler's cyclic-critical-path heuristic takes a single-block loop
    whose accumulators chain across iterations (every micro-kernel here) as latency
    bound and hoists its loads to the top: in a conv micro-kernel of 24 AVX-512
    accumulators it hoisted the broadcast input pixels of 32 unrolled channels ahead
    of their multiply-adds and spilled 664 of them to the stack. Without it, MobileNetV2
    ran 18% faster at 2 threads on a Zen 4 guest (4.43 -> 3.63 ms; its 1x1 convs at
    14x14 and 28x28 1.5-1.6x faster), SqueezeNet 3%, ShuffleNet 2%, AVX2 code
    (``-mcpu=znver3``) for MobileNetV2 4% (5.60 -> 5.40 ms); ResNet-18, the BERT encoder
    and the GEMM templates within noise (``benchmarks/model_variants.py``).

    LLVM's options are global to the process, and another library there (numba) may
    generate code with llvmlite too, so they are set while at least one Ember code
    generation runs and LLVM's defaults restored after the last; code generation itself
    runs outside the lock. A scheduling heuristic changes no result.

    llvmlite sets an option through LLVM's command-line parser, which ends the process
    on an option it does not know; so an LLVM release outside ``OPTIONS_LLVM_MAJORS`` (a
    newer llvmlite) gets none until someone checks it (``tests/codegen_llvm/
    test_codegen_options.py`` skips its spill count there, saying so)."""
    global _options_users
    if llvm.llvm_version_info[0] not in OPTIONS_LLVM_MAJORS:
        yield
        return
    with _options_lock:
        if _options_users == 0:
            for on, _ in CODEGEN_OPTIONS:
                llvm.set_option("ember", on)
        _options_users += 1
    try:
        yield
    finally:
        with _options_lock:
            _options_users -= 1
            if _options_users == 0:
                for _, default in CODEGEN_OPTIONS:
                    llvm.set_option("ember", default)


def _line_context(source: str, log: str) -> str:
    """The ``.ll`` lines around the first ``<string>:LINE:`` position LLVM names."""
    m = re.search(r":(\d+):\d+:", log)
    if not m:
        return ""
    line = int(m.group(1))
    lines = source.splitlines()
    lo, hi = max(0, line - 3), min(len(lines), line + 2)
    return "\n".join(
        f"{i + 1:5d}{' >' if i + 1 == line else '  '} {lines[i]}" for i in range(lo, hi)
    )


def parse_and_verify(ll: str, spec: MachineSpec) -> llvm.ModuleRef:
    """Parse ``.ll`` text and verify it; our own IR failing here is an internal error."""
    _init_llvm()
    try:
        mod = llvm.parse_assembly(ll)
        mod.verify()
    except RuntimeError as e:
        context = _line_context(ll, str(e))
        raise IRVerifyError(
            f"generated LLVM IR is invalid: {str(e).strip()}" + (f"\n{context}" if context else ""),
            source=ll,
        ) from e
    mod.triple = spec.triple
    return mod


def optimize(mod: llvm.ModuleRef, spec: MachineSpec) -> None:
    """Run LLVM's default ``O<level>`` pipeline (new pass manager) in place."""
    tm = target_machine(spec, for_jit=False)
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=spec.opt_level)
    vectorize = spec.opt_level >= 2
    pto.loop_vectorization = vectorize
    pto.slp_vectorization = vectorize
    pto.loop_unrolling = spec.opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def compile_ir(
    ll: str, spec: MachineSpec, extra: Callable[[str], str] | None = None
) -> tuple[str, llvm.ExecutionEngine, bytes]:
    """Verify, optimise and JIT ``ll``; returns the optimised ``.ll``, the live engine and
    the position-independent object code the engine loaded, which a library links as is
    (one code generation for both). ``extra(optimised ll)`` gives another module's text
    linked in before code generation: the metadata an exported library carries."""
    mod = parse_and_verify(ll, spec)
    optimize(mod, spec)
    optimized = str(mod)
    if extra is not None:
        more = parse_and_verify(extra(optimized), spec)
        more.data_layout = mod.data_layout
        mod.link_in(more)
    load_compiler_runtime()
    if "GOMP_parallel" in optimized:
        load_libgomp()
    objects: list[bytes] = []
    try:
        engine = llvm.create_mcjit_compiler(mod, target_machine(spec, for_jit=True))
        engine.set_object_cache(lambda _module, data: objects.append(data))
        with codegen_options():
            engine.finalize_object()
        engine.run_static_constructors()
    except RuntimeError as e:
        raise CompileError("LLVM failed to generate machine code", source=ll, log=str(e)) from e
    if len(objects) != 1:
        raise InternalError(f"LLVM gave {len(objects)} object files for one module")
    return optimized, engine, objects[0]


def emit(ll: str, spec: MachineSpec, kind: str, extra_ll: str = "") -> bytes | str:
    """Position-independent ``"object"`` bytes or ``"asm"`` text for optimised ``ll``.

    ``extra_ll`` (another module's text) is linked in first, e.g. the metadata
    an exported library carries.
    """
    tm = target_machine(spec, for_jit=False)
    mod = parse_and_verify(ll, spec)
    mod.data_layout = str(tm.target_data)
    if extra_ll:
        extra = parse_and_verify(extra_ll, spec)
        extra.data_layout = mod.data_layout
        mod.link_in(extra)
    try:
        with codegen_options():
            if kind == "object":
                return tm.emit_object(mod)
            return tm.emit_assembly(mod)
    except RuntimeError as e:
        raise CompileError(f"LLVM failed to emit {kind}", source=ll, log=str(e)) from e


@functools.cache
def load_compiler_runtime() -> str | None:
    """Make libgcc's helpers global symbols for the JIT; returns the library, or None.

    The process usually maps ``libgcc_s`` already, but as a private dependency whose
    symbols MCJIT does not see; without it the machine code LLVM emits for some casts
    would jump to address 0.
    """
    for path in (ctypes.util.find_library("gcc_s"), "libgcc_s.so.1"):
        if not path:
            continue
        try:
            llvm.load_library_permanently(path)
            return path
        except RuntimeError:
            continue
    return None


@functools.cache
def load_libgomp() -> str:
    """Make ``GOMP_parallel`` and ``omp_*`` resolvable by JIT code; returns the library used."""
    prepare_openmp()
    found = ctypes.util.find_library("gomp")
    candidates = [c for c in (*LIBGOMP_CANDIDATES, found) if c]
    errors = []
    for path in candidates:
        if os.path.isabs(path) and not os.path.exists(path):
            continue
        try:
            llvm.load_library_permanently(path)
            return path
        except RuntimeError as e:
            errors.append(f"{path}: {e}")
    raise CompileError(
        "parallel loops need libgomp (GCC's OpenMP runtime), which was not found; "
        "install libgomp1 or remove s[...].parallel(...) from the schedule",
        log="\n".join(errors),
    )
