"""``LLVMModule``: JIT-compiled CPU functions, their LLVM sources, and library export.

:func:`ember.codegen_llvm.build.build_llvm` makes one. It keeps the MCJIT
engine alive as long as the module (the machine code lives in it), exposes
the LLVM IR before and after optimisation and the assembly, and exports a
shared library: the optimised IR is compiled to a position-independent
object together with a small module holding ``__ember_metadata`` (the
signatures as JSON), then linked by the system C compiler.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir

from ember.codegen_llvm import jit
from ember.codegen_llvm import pool as _pool  # noqa: F401 - registers the thread pool
from ember.codegen_llvm.builder_utils import I8, PTR
from ember.codegen_llvm.cpu_features import built_for, host_mismatch
from ember.codegen_llvm.packed import TRAMPOLINE
from ember.errors import ArgumentError, InternalError
from ember.runtime.cpu import (
    LAUNCH_SYMBOL,
    METADATA_SYMBOL,
    NUM_THREADS_SYMBOL,
    CPUModule,
    native_prototype,
)
from ember.runtime.export import link_shared, link_with, write_output
from ember.runtime.load import FORMAT, VERSION, metadata_digest
from ember.runtime.signature import FunctionSignature
from ember.target import Target

SOURCE_FORMATS = ("ll", "ll-unopt", "asm")


def metadata_ir(payload: str) -> str:
    """A module defining ``const char *__ember_metadata(void)`` returning ``payload``."""
    module = ir.Module(name="ember_metadata")
    data = bytearray(payload.encode("utf-8") + b"\0")
    ty = ir.ArrayType(I8, len(data))
    blob = ir.GlobalVariable(module, ty, "__ember_metadata_json")
    blob.global_constant = True
    blob.linkage = "private"
    blob.initializer = ir.Constant(ty, data)
    fn = ir.Function(module, ir.FunctionType(PTR, []), METADATA_SYMBOL)
    ir.IRBuilder(fn.append_basic_block()).ret(blob)
    return str(module)


def module_metadata(
    signatures: Sequence[FunctionSignature], target: Target, fixed_threads: int | None, ll: str
) -> dict:
    """What an exported library says of itself (read back by :mod:`ember.runtime.load`)."""
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "target": str(target),
        "cpu": built_for(target),  # what a loading process checks before calling the code
        "num_threads": fixed_threads,
        "parallel": "@GOMP_parallel" in ll,
        "functions": [sig.to_json() for sig in signatures],
        "ll": ll,
    }
    meta["sha256"] = metadata_digest(meta)
    return meta


class LLVMModule(CPUModule):
    """Functions compiled in this process by LLVM; ``get_source("ll" | "ll-unopt" | "asm")``."""

    def __init__(
        self,
        signatures: Sequence[FunctionSignature],
        ll_unopt: str,
        ll: str,
        engine: llvm.ExecutionEngine,
        spec: jit.MachineSpec,
        target: Target,
        fixed_threads: int | None = None,
        obj: bytes = b"",
    ) -> None:
        entries = {}
        for sig in signatures:
            addr = engine.get_function_address(sig.native_symbol)
            if not addr:
                raise InternalError(f"compiled module has no function '{sig.native_symbol}'")
            entries[sig.name] = native_prototype(sig)(addr)
        cell_addr = engine.get_global_value_address(NUM_THREADS_SYMBOL)
        cell = ctypes.c_int32.from_address(cell_addr) if cell_addr else None
        launch_addr = engine.get_global_value_address(LAUNCH_SYMBOL)
        launch = ctypes.c_void_p.from_address(launch_addr) if launch_addr else None
        sources = {"ll": ll, "ll-unopt": ll_unopt}
        parallel = "@GOMP_parallel" in ll
        super().__init__(signatures, entries, cell, fixed_threads, sources, parallel, launch)
        self._engine = engine  # owns the machine code the entries point into
        self._object = obj  # that machine code as an object file, metadata inside
        self.spec = spec
        self.target = target
        self.cannot_run_here = host_mismatch(built_for(target), unknown_ok=True)

    def _source_formats(self) -> list[str]:
        return list(SOURCE_FORMATS)

    def get_source(self, fmt: str = "ll") -> str:
        """``"ll"``: optimised LLVM IR; ``"ll-unopt"``: as generated; ``"asm"``: assembly."""
        if fmt == "asm" and "asm" not in self._sources:
            self._sources["asm"] = str(jit.emit(self._sources["ll"], self.spec, "asm"))
        return super().get_source(fmt)

    def metadata(self) -> dict:
        return module_metadata(
            self.signatures, self.target, self.fixed_threads, self._sources["ll"]
        )

    def export_library(
        self, path: str | Path, fcompile: Any = None, options: Sequence[str] | None = None
    ) -> None:
        """Write a shared library that :func:`ember.runtime.load_module` loads in any process.

        ``fcompile`` is TVM's: a function ``fcompile(output, objects, options=None)`` that
        links object files into ``output`` (``ember.contrib.cc.create_shared``, or a user's
        cross compiler); Ember hands it the module's one object file. Without it Ember
        links with the system C compiler itself."""
        if fcompile is None:
            if options:
                raise ArgumentError("export_library: options= goes with fcompile=")
            link_shared(self.export_object(), path)
            return
        link_with(fcompile, self.export_object(), path, options)

    def save(self, path: str | Path, fmt: str = "") -> None:
        """TVM's ``Module.save``: the module as ``.o`` (object code), ``.ll`` (LLVM IR) or
        ``.s`` (assembly), chosen by ``fmt`` or the file's extension. Unlike a library, these
        are for reading and for other tools; ``load_module`` takes only libraries."""
        kind = (fmt or Path(path).suffix.lstrip(".")).lower()
        if kind in ("o", "obj"):
            data: bytes | str = self.export_object()
        elif kind == "ll":
            data = self._sources["ll"]
        elif kind in ("s", "asm"):
            data = jit.emit(self._sources["ll"], self.spec, "asm")
        else:
            raise ArgumentError(
                f"save: unknown format {kind!r} for {path}; use .o, .ll or .s "
                "(export_library writes a loadable library)"
            )
        write_output(path, data)

    def export_object(self) -> bytes:
        """The object code ``export_library`` links: the functions and their metadata, as
        the JIT compiled them (:func:`ember.codegen_llvm.jit.compile_ir`). The disk kernel
        cache takes it at once and links it on a worker thread, the linker being a
        separate process."""
        if TRAMPOLINE in self._sources["ll"]:
            raise ArgumentError(
                "export_library: this module calls back into Python (call_packed / te.extern), "
                "through a symbol that lives only in this process; build it in the process that "
                "calls it instead of exporting it"
            )
        return self._object
