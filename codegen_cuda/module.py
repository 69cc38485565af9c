"""``CUDAModule``: CUDA kernels with their host launch list, callable like any module.

It keeps every stage's artifact (the kernels' TIR, the CUDA source, PTX and cubin
once compiled) and offers three ways to run: on a GPU through the driver API
(``ember.codegen_cuda.runtime``), on the CPU through the SIMT emulator (``emulate``, or
``EMBER_CUDA_EMULATE=1`` for plain calls), and nowhere else: without a device a
call raises ``DeviceError`` pointing at the emulator.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ember.codegen_cuda import device
from ember.codegen_cuda.nvrtc import compile_cuda
from ember.codegen_cuda.printer_cuda import print_module
from ember.codegen_cuda.runtime import (
    DeviceModule,
    bind_arguments,
    bind_pointers,
    synchronize,
    time_launches,
)
from ember.codegen_cuda.transform.split_host_device import DeviceProgram, expand_launches
from ember.errors import ArgumentError, DeviceError
from ember.runtime.export import write_output
from ember.runtime.module import Function, Module, check_timing_args, check_timing_device
from ember.runtime.signature import FunctionSignature, check_call
from ember.runtime.sizes import eval_size
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.signature import signature_for, size_text

_LOAD_LOCK = threading.Lock()  # loading a module on the device, once


class CUDAModule(Module):
    """One CUDA source and NVRTC program holding the kernels of one or more host functions
    (``programs``, in order; the first is what calling the module runs)."""

    kind = "cuda"

    def __init__(
        self,
        programs: DeviceProgram | Sequence[DeviceProgram],
        arch: str,
        fast_math: bool = False,
    ) -> None:
        progs = [programs] if isinstance(programs, DeviceProgram) else list(programs)
        super().__init__([_host_signature(p) for p in progs])
        self.programs: dict[str, DeviceProgram] = {p.name: p for p in progs}
        self.arch = arch
        self.fast_math = fast_math
        self._source: str | None = None
        self._compiled: Any = None
        self._device: Any = None

    # -- artifacts ---------------------------------------------------------------------------
    @property
    def program(self) -> DeviceProgram:
        """The entry function's program (the one calling the module runs)."""
        return self.programs[self.entry_name]

    @program.setter
    def program(self, program: DeviceProgram) -> None:
        self.programs[self.entry_name] = program

    def program_of(self, func_name: str | None) -> DeviceProgram:
        """The program of function ``func_name`` (the entry's for ``None``)."""
        return self.programs[self.get_function(func_name or self.entry_name).name]

    @property
    def kernels(self) -> tuple[Any, ...]:
        """Every kernel of every function, in order."""
        return tuple(k for p in self.programs.values() for k in p.kernels)

    def cuda_source(self) -> str:
        if self._source is None:
            self._source = print_module(list(self.kernels))
        return self._source

    def compile(self) -> Any:
        """Compile with NVRTC for ``self.arch`` (cached on disk by content)."""
        if self._compiled is None:
            self._compiled = compile_cuda(self.cuda_source(), self.arch, fast_math=self.fast_math)
        return self._compiled

    def use_compiled(self, compiled: Any) -> None:
        """Take NVRTC output made elsewhere (a cubin and PTX read from a model artifact)
        instead of compiling the source here; the GPU runtime loads what it is given."""
        self._compiled = compiled

    def compile_if_available(self) -> None:
        """Compile now when NVRTC is installed, so errors show at build time."""
        try:
            # optional dependency: cuda-python
            import cuda.bindings.nvrtc  # noqa: F401
        except ImportError:
            return
        self.compile()

    def get_source(self, fmt: str = "cuda") -> str:
        if fmt in ("cuda", "cu", ""):
            return self.cuda_source()
        if fmt == "ptx":
            return self.compile().ptx
        if fmt == "tir":
            return "\n\n".join(repr(k) for k in self.kernels)
        raise ArgumentError(f"unknown source format {fmt!r}; use 'cuda', 'ptx' or 'tir'")

    def save(self, path: str | Path, fmt: str = "") -> None:
        """TVM's ``Module.save``: the CUDA source (``.cu``) or the PTX NVRTC made from it
        (``.ptx``), by ``fmt`` or the file's extension."""
        kind = (fmt or Path(path).suffix.lstrip(".")).lower()
        if kind not in ("cu", "cuda", "ptx"):
            raise ArgumentError(f"save: unknown format {kind!r} for {path}; use .cu or .ptx")
        write_output(path, self.get_source("ptx" if kind == "ptx" else "cuda"))

    def resource_usage(self) -> dict[str, Any]:
        """Registers, shared and local (spill) bytes per kernel, from the compiler's report."""
        return dict(self.compile().resources)

    # -- running ---------------------------------------------------------------------------------
    def emulate(
        self,
        *args: Any,
        check_races: bool = True,
        profile: bool = False,
        func_name: str | None = None,
    ) -> Any:
        """Run a function's kernels on the CPU with the SIMT emulator, writing outputs in
        place: the entry function's, or ``func_name``'s (also ``mod["name"].emulate(...)``).

        With ``profile=True`` it returns one ``KernelProfile`` per launch: global
        sectors per warp request (coalescing) and shared-memory bank conflicts.
        """
        # start-up cost: the emulator (~80 ms of imports) is needed only to run on the CPU
        from ember.codegen_cuda.emulator import emulate

        program = self.program_of(func_name)
        sig = self._signatures[program.name]
        values, sizes = check_call(sig, args)
        arrays = [a for p, a in zip(sig.params, values) if not p.scalar]
        by_data = {b.data: a for b, a in zip(program.buffers, arrays)}
        by_name = {n: v for (n, _), v in zip(sig.size_vars, sizes)}
        for ws in program.workspaces:
            count = workspace_elements(ws, by_name)
            by_data[ws.data] = np.zeros(count, dtype=dt.numpy_dtype(ws.dtype))
        kernels = {k.name: k for k in program.kernels}
        profiles = []
        for launch, values_k in expand_launches(program.launches, by_name):
            kernel = kernels[launch.kernel]
            args_k = [by_data[b.data] for b in launch.args] + [
                values_k[v.name] for v in launch.sizes
            ]
            profiles.append(emulate(kernel, *args_k, check_races=check_races, profile=profile))
        return profiles if profile else None

    def __call__(self, *args: Any) -> None:
        self.call_function(self.entry_name, args)

    def call_function(self, name: str, args: Sequence[Any]) -> None:
        """Run function ``name`` on ``args``: on the GPU, or emulated with EMBER_CUDA_EMULATE=1."""
        if os.environ.get("EMBER_CUDA_EMULATE", "") not in ("", "0"):
            self.emulate(*args, func_name=name)
            return
        self._require_device("run")
        self._run_bound(name, bind_arguments(self._signatures[name], args))

    def get_function(self, name: str) -> Any:
        fn = self._functions.get(name)
        if fn is None:
            sig = self._signatures.get(name)
            if sig is None:
                super().get_function(name)  # raises, listing the names
            fn = self._functions[name] = CUDAFunction(self, sig)
        return fn

    def _require_device(self, what: str) -> None:
        devices, reason = device._probe()
        if not devices:
            raise DeviceError(
                f"'{self.program.name}' is built for CUDA ({self.arch}) but cannot {what} here: "
                f"{reason}. Run it on the CPU with module.emulate(...) or set EMBER_CUDA_EMULATE=1"
            )

    def device_module(self) -> Any:
        """The module loaded on the GPU (compiled and loaded on first use)."""
        if self._device is None:
            with _LOAD_LOCK:  # threads calling a new module at once load it once
                if self._device is None:
                    self._device = DeviceModule(self.compile(), self.kernels)
        return self._device

    def _launch_all(
        self,
        name: str,
        pointers: list[int],
        stream: Any = 0,
        sizes: dict[str, int] | None = None,
    ) -> None:
        """Launch function ``name``'s kernels in order on ``pointers`` (one per array
        parameter) with the call's symbolic ``sizes``."""
        dev = self.device_module()
        program = self.programs[name]
        by_data = {b.data: p for b, p in zip(program.buffers, pointers)}
        for ws in program.workspaces:
            by_data[ws.data] = dev.workspace(ws, sizes)
        for launch, values in expand_launches(program.launches, dict(sizes or {})):
            dev.launch(launch.kernel, [by_data[b.data] for b in launch.args], stream, values)

    def _run_bound(self, name: str, bound: Any) -> None:
        try:
            dev = self.device_module()
            bound.copy_in()  # into this call's own device buffers
            # The module's workspaces are one set per module (kept between calls): a call's
            # kernels finish before another thread's call may launch kernels that write them.
            with dev.lock:
                self._launch_all(name, bound.pointers, sizes=bound.sizes)
                synchronize()
            bound.copy_out()
        finally:
            bound.close()

    def _native(self, name: str) -> Any:
        self._require_device("run")
        sig = self._signatures[name]

        def native(*pointers: int) -> int:
            self._run_bound(name, bind_pointers(sig, pointers))
            return 0

        return native

    def time_evaluator(
        self,
        func_name: str | None = None,
        dev: Any = None,
        number: int = 10,
        repeat: int = 3,
        min_repeat_ms: float = 0,
    ) -> Any:
        """``f(*args) -> TimingResult``: seconds per run of all kernels, timed by CUDA events.

        The leading ``func_name, dev`` are TVM's (``mod.time_evaluator(mod.entry_name, dev)``).

        Arguments are copied to the device once; one warm-up run, then ``repeat``
        batches of ``number`` runs between two events (lengthened to at least
        ``min_repeat_ms``); outputs are copied back at the end.
        """
        if not device.device_available():
            raise DeviceError(
                "timing a CUDA module needs a GPU; the emulator's speed says nothing about "
                "the device"
            )
        check_timing_args(number, repeat, min_repeat_ms)
        check_timing_device(dev, "cuda")
        sig = self.get_function(func_name or self.entry_name).signature

        def evaluate(*args: Any) -> Any:
            bound = bind_arguments(sig, args)
            try:
                self.device_module()
                bound.copy_in()
                result = time_launches(
                    lambda: self._launch_all(sig.name, bound.pointers, sizes=bound.sizes),
                    number,
                    repeat,
                    min_repeat_ms,
                )
                bound.copy_out()
            finally:
                bound.close()
            return result

        return evaluate

    def __repr__(self) -> str:
        funcs = "; ".join(
            f"{p.name}: {', '.join(k.name for k in p.kernels)}" for p in self.programs.values()
        )
        return f"CUDAModule({funcs}; {self.arch})"


class CUDAFunction(Function):
    """One function of a CUDA module: ``f(*args)`` runs it (GPU, or the emulator with
    EMBER_CUDA_EMULATE=1) and ``f.emulate(*args)`` runs it on the CPU. The device is
    only required when it is run there."""

    def __init__(self, module: CUDAModule, signature: FunctionSignature) -> None:
        super().__init__(module, signature, native=None)  # type: ignore[arg-type]
        self.cuda_module = module

    @property  # type: ignore[override]
    def native(self) -> Any:
        if self._native is None:
            self._native = self.cuda_module._native(self.name)
        return self._native

    @native.setter
    def native(self, value: Any) -> None:
        self._native = value

    def __call__(self, *args: Any) -> None:
        self.cuda_module.call_function(self.name, args)

    def emulate(self, *args: Any, check_races: bool = True, profile: bool = False) -> Any:
        return self.cuda_module.emulate(
            *args, check_races=check_races, profile=profile, func_name=self.name
        )


def _host_signature(program: DeviceProgram) -> FunctionSignature:
    return signature_for(program.host_func(), program.name)


def workspace_elements(ws: Any, sizes: dict[str, int]) -> int:
    """Elements of a flattened workspace; a symbolic size is evaluated on this call's sizes."""
    (size,) = ws.shape
    if isinstance(size, E.IntImm):
        return size.value
    return max(int(eval_size(str(size_text(size)), sizes)), 0)
