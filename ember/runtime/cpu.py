"""Modules whose functions run on this CPU through ctypes: JIT-compiled or loaded from a library.

:class:`CPUModule` adds to :class:`~ember.runtime.module.Module` what every
native CPU module shares: ctypes entry points (ctypes releases the GIL while
native code runs), the thread count published to the module's
``__ember_num_threads`` global before each call, and the kept sources.
:class:`SharedLibraryModule` is one loaded from a file written by
``export_library``; :mod:`ember.runtime.load` makes it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ember.errors import ArgumentError, DeviceError
from ember.runtime.export import check_output_path, install_file
from ember.runtime.module import Module, NativeFn
from ember.runtime.signature import FunctionSignature
from ember.runtime.threads import (
    effective_num_threads,
    note_parallel_launch,
    parallel_launcher,
)

NUM_THREADS_SYMBOL = "__ember_num_threads"
LAUNCH_SYMBOL = "__ember_parallel_launch"  # ptr to the pool's run function; null: libgomp
METADATA_SYMBOL = "__ember_metadata"


def native_prototype(sig: FunctionSignature) -> type:
    """The ctypes type of ``int32 f(void*, ..., void*, int64, ..., int64)``: a data pointer
    per array argument, then each symbolic size by value."""
    pointers = [ctypes.c_void_p] * len(sig.arrays)
    return ctypes.CFUNCTYPE(ctypes.c_int32, *pointers, *([ctypes.c_int64] * len(sig.size_vars)))


class CPUModule(Module):
    """Functions called through ctypes; ``threads_cell`` is the module's thread-count global."""

    kind = "llvm"

    def __init__(
        self,
        signatures: Sequence[FunctionSignature],
        entries: Mapping[str, NativeFn],
        threads_cell: ctypes.c_int32 | None,
        fixed_threads: int | None = None,
        sources: Mapping[str, str] | None = None,
        parallel: bool = False,
        launch_cell: ctypes.c_void_p | None = None,
    ) -> None:
        super().__init__(signatures)
        self._launch_cell = launch_cell
        self._entries = dict(entries)
        self._threads_cell = threads_cell
        self.fixed_threads = fixed_threads
        self.parallel = parallel  # some function runs a parallel loop
        self._sources = dict(sources or {})
        # Why this CPU cannot run the module's code (built for another CPU), or None. The
        # module still links and gives its sources and exports; a call raises DeviceError
        # instead of entering code whose first unknown instruction kills the process.
        self.cannot_run_here: str | None = None

    def _native(self, name: str) -> NativeFn:
        if self.cannot_run_here is not None:
            return self._refuse
        return self._entries[name]

    def _refuse(self, *pointers: Any) -> int:
        raise DeviceError(
            f"this CPU module cannot run on this machine: {self.cannot_run_here}; build "
            "it for target='llvm' to run it here, or export it and run it on such a CPU"
        )

    def entry_address(self, name: str) -> int | None:
        """The native address of function ``name`` (for :mod:`ember.runtime.step_loop`), or
        None where its entry is not a ctypes function pointer."""
        if self.cannot_run_here is not None:
            return None
        entry: Any = self._entries[name]
        try:
            return ctypes.cast(entry, ctypes.c_void_p).value or None
        except ctypes.ArgumentError:
            return None

    def threads_cell_address(self) -> int:
        """The address of the thread-count global that :meth:`_before_call` sets, or 0
        where no call sets it (no parallel loop, or no such global)."""
        if self._threads_cell is None or not self.parallel:
            return 0
        return ctypes.addressof(self._threads_cell)

    def _before_call(self) -> None:
        cell = self._threads_cell
        if cell is not None and self.parallel:
            n = effective_num_threads(self.fixed_threads)
            if cell.value != n:
                cell.value = n
            note_parallel_launch(n)
            if n > 1:
                self.point_launch()

    def point_launch(self) -> None:
        """Point the module's parallel loops at the process's launcher (Ember's thread pool,
        or libgomp where the global stays null); the step loop calls it for the kernels
        it calls directly."""
        launch = self._launch_cell
        if launch is not None:
            addr = parallel_launcher()
            if (launch.value or 0) != addr:
                launch.value = addr or None

    def _source_formats(self) -> list[str]:
        return list(self._sources)

    def get_source(self, fmt: str = "ll") -> str:
        """A kept source: ``"ll"`` (optimised LLVM IR), and others the subclass lists."""
        fmt = fmt or "ll"
        formats = self._source_formats()
        if fmt not in formats:
            raise ArgumentError(
                f"unknown source format {fmt!r}; this module has: {', '.join(formats)}"
            )
        return self._sources[fmt]


class SharedLibraryModule(CPUModule):
    """A module loaded from a shared library that ``export_library`` wrote."""

    def __init__(
        self,
        path: Path,
        lib: ctypes.CDLL,
        signatures: Sequence[FunctionSignature],
        fixed_threads: int | None,
        sources: Mapping[str, str],
        parallel: bool,
        file: BinaryIO | None = None,
    ) -> None:
        entries = {}
        for sig in signatures:
            entries[sig.name] = native_prototype(sig)((sig.native_symbol, lib))
        try:
            cell: ctypes.c_int32 | None = ctypes.c_int32.in_dll(lib, NUM_THREADS_SYMBOL)
        except ValueError:
            cell = None
        try:
            launch: ctypes.c_void_p | None = ctypes.c_void_p.in_dll(lib, LAUNCH_SYMBOL)
        except ValueError:  # a library without parallel loops, or exported before the pool
            launch = None
        super().__init__(signatures, entries, cell, fixed_threads, sources, parallel, launch)
        self.path = path
        self._lib = lib  # keeps the library mapped as long as the module lives
        self._file = file  # the file loaded, still readable if ``path`` was replaced since

    def export_library(self, path: str | Path) -> None:
        """Copy the library this module was loaded from (the file loaded, even if a newer
        library has been exported to its path since)."""
        out = check_output_path(path)
        if self._file is None:
            if out.resolve() != self.path.resolve():
                install_file(self.path, out)
            return
        loaded = os.fstat(self._file.fileno())
        if out.exists() and os.path.samestat(out.stat(), loaded):
            return  # the file is already there
        install_file(self._file, out)
