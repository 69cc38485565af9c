"""The compiled-module interface every target shares: checked calls, timing, sources, export.

A code generator returns a subclass of :class:`Module` (the LLVM backend's
``LLVMModule``; a library loaded with :func:`ember.runtime.load_module`). The
base class owns everything that does not depend on the target: the
per-function :class:`~ember.runtime.signature.FunctionSignature`, argument
checks before every call (native code never sees an unchecked argument), the
mapping from a native status code to an Ember error, and
:meth:`Module.time_evaluator`, which checks arguments once and then times
the bare native call. A subclass supplies ``_native(name)`` (a callable taking
raw data pointers and returning the status) and its sources and export.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import ArgumentError, DeviceError, EmberError, InternalError, PackedFuncError
from ember.runtime.nd import device_kind
from ember.runtime.registry import take_pending
from ember.runtime.signature import FunctionSignature, check_call

NativeFn = Callable[..., int]
OUT_OF_MEMORY = -1  # status of a native call whose temporary allocation failed
PACKED_CALL_FAILED = -2  # a call_packed callback raised; ember.runtime.registry keeps the error


@dataclass(frozen=True)
class TimingResult:
    """Seconds per call, one entry per repeat."""

    results: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results)

    def __str__(self) -> str:
        return (
            f"median {self.median * 1e3:.4f} ms, mean {self.mean * 1e3:.4f} ms, "
            f"min {self.min * 1e3:.4f} ms over {len(self.results)} repeats"
        )


class Function:
    """One compiled function of a module; call it with arrays (``mod["name"](a, b, c)``)."""

    def __init__(self, module: Module, signature: FunctionSignature, native: NativeFn) -> None:
        self.module = module
        self.signature = signature
        self.native = native

    @property
    def name(self) -> str:
        return self.signature.name

    def prepare(self, args: Sequence[Any]) -> tuple[list[np.ndarray], list[int]]:
        """Check ``args``; returns the arrays (keep them alive) and the native arguments:
        the arrays' data pointers, then the values of the symbolic sizes."""
        values, sizes = check_call(self.signature, args)
        arrays = [a for p, a in zip(self.signature.params, values) if not p.scalar]
        return arrays, [a.ctypes.data for a in arrays] + sizes

    def invoke(self, pointers: Sequence[int]) -> None:
        """Call native code on already-checked pointers and raise on a failure status."""
        self.module._before_call()
        status = self.native(*pointers)
        if status:
            raise self.module.status_error(self.signature, int(status))

    def __call__(self, *args: Any) -> None:
        arrays, pointers = self.prepare(args)
        self.invoke(pointers)
        del arrays

    def bind(self, args: Sequence[Any]) -> BoundCall:
        """``args`` checked once, now, and a call that runs native code on them again and
        again without checking (see :class:`BoundCall`)."""
        arrays, pointers = self.prepare(args)
        return BoundCall(self, arrays, pointers)

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}: {p.describe()}" for p in self.signature.params)
        return f"<ember function {self.name}({params})>"


class BoundCall:
    """A function with its arguments checked once: ``call()`` runs it on the same arrays.

    The checks are about memory, not contents: shapes, dtypes, contiguity, alignment,
    writability and overlap of the arrays. A numpy array never moves or shrinks its
    memory while referenced, and this object keeps the arrays, so the pointers taken at
    :meth:`Function.bind` stay valid and checked for as long as it lives. Whoever binds
    must own the arrays (a graph executor binds its memory plan), since writes to
    them from elsewhere race with the kernel.
    """

    __slots__ = ("function", "arrays", "pointers")

    def __init__(self, function: Function, arrays: list[np.ndarray], pointers: list[int]) -> None:
        self.function = function
        self.arrays = arrays  # keeps the memory behind ``pointers`` alive
        self.pointers = tuple(pointers)

    def __call__(self) -> None:
        self.function.invoke(self.pointers)

    def __repr__(self) -> str:
        return f"<bound call of {self.function.name}>"


class Module:
    """A set of compiled functions; calling the module calls the first (``entry_name``)."""

    kind = "module"

    def __init__(self, signatures: Sequence[FunctionSignature]) -> None:
        if not signatures:
            raise InternalError("a module needs at least one function")
        self._signatures: dict[str, FunctionSignature] = {}
        for sig in signatures:
            if sig.name in self._signatures:
                raise ArgumentError(f"two functions are named '{sig.name}' in one module")
            self._signatures[sig.name] = sig
        self._functions: dict[str, Function] = {}

    # -- what subclasses provide ---------------------------------------------------------
    def _native(self, name: str) -> NativeFn:
        raise NotImplementedError

    def _before_call(self) -> None:
        """Hook run before each native call (e.g. publish the thread count)."""

    def get_source(self, fmt: str = "") -> str:
        raise ArgumentError(f"{self._described()} keeps no source")

    def export_library(self, path: str | Path) -> None:
        raise ArgumentError(
            f"export_library: {self._described()} cannot be exported; only CPU modules "
            "(target 'llvm') are written to libraries"
        )

    def _described(self) -> str:
        return "this module" if self.kind == Module.kind else f"a {self.kind} module"

    # -- functions -----------------------------------------------------------------------
    @property
    def entry_name(self) -> str:
        return next(iter(self._signatures))

    @property
    def function_names(self) -> list[str]:
        return list(self._signatures)

    @property
    def signatures(self) -> list[FunctionSignature]:
        return list(self._signatures.values())

    def get_function(self, name: str) -> Function:
        fn = self._functions.get(name)
        if fn is None:
            sig = self._signatures.get(name)
            if sig is None:
                raise ArgumentError(
                    f"no function '{name}' in this module; it has: {', '.join(self._signatures)}"
                )
            fn = Function(self, sig, self._native(name))
            self._functions[name] = fn
        return fn

    def __getitem__(self, name: str) -> Function:
        return self.get_function(name)

    def __call__(self, *args: Any) -> None:
        self.get_function(self.entry_name)(*args)

    def status_error(self, sig: FunctionSignature, status: int) -> EmberError:
        """The error a nonzero native status code stands for."""
        if 0 < status <= len(sig.errors):
            return ArgumentError(f"{sig.name}: {sig.errors[status - 1]}")
        if status == PACKED_CALL_FAILED:
            error = take_pending()
            if isinstance(error, EmberError):
                return error  # raised again at the call site, its cause chained
            err = PackedFuncError(f"{sig.name}: a call_packed callback failed: {error!r}")
            err.__cause__ = error
            return err
        if status == OUT_OF_MEMORY:
            return DeviceError(f"{sig.name}: could not allocate a temporary buffer (out of memory)")
        return InternalError(f"{sig.name} returned the unknown status code {status}")

    # -- timing --------------------------------------------------------------------------
    def time_evaluator(
        self,
        func_name: str | None = None,
        dev: Any = None,
        number: int = 10,
        repeat: int = 3,
        min_repeat_ms: float = 0,
    ) -> Callable[..., TimingResult]:
        """A function ``f(*args) -> TimingResult`` timing ``number`` calls per repeat.

        The leading ``func_name, dev`` are TVM's (``mod.time_evaluator(mod.entry_name,
        dev, number=...)``). Arguments are checked once; then one warm-up call, then
        ``repeat`` timed batches of the bare native call. With ``min_repeat_ms``, a batch
        is lengthened until it lasts at least that long.
        """
        check_timing_args(number, repeat, min_repeat_ms)
        check_timing_device(dev, "cpu")
        fn = self.get_function(func_name or self.entry_name)

        def evaluate(*args: Any) -> TimingResult:
            arrays, pointers = fn.prepare(args)
            fn.invoke(pointers)  # warm-up, and the only status check
            native = fn.native

            def batch_ms(n: int) -> float:
                start = time.perf_counter()
                for _ in range(n):
                    native(*pointers)
                return (time.perf_counter() - start) * 1e3

            result = repeat_batches(batch_ms, number, repeat, min_repeat_ms, max_runs=1 << 30)
            del arrays
            return result

        return evaluate

    def __repr__(self) -> str:
        return f"<ember {self.kind} module: {', '.join(self._signatures)}>"


def check_timing_device(dev: Any, kind: str) -> None:
    """``dev`` of a TVM-style ``time_evaluator`` call: None, or a device of the module's kind."""
    if dev is None:
        return
    if device_kind(dev) != kind:
        raise ArgumentError(
            f"time_evaluator: a {kind} module cannot be timed on device {dev!r}; "
            f"pass {kind!r} or None"
        )


def check_timing_args(number: int, repeat: int, min_repeat_ms: float) -> None:
    """The ``time_evaluator`` arguments every backend takes, checked."""
    for label, value in (("number", number), ("repeat", repeat)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentError(
                f"time_evaluator: {label} must be a positive integer, got {value!r}"
            )
    if (
        isinstance(min_repeat_ms, bool)
        or not isinstance(min_repeat_ms, (int, float))
        or min_repeat_ms < 0
    ):
        raise ArgumentError(f"time_evaluator: min_repeat_ms must be >= 0, got {min_repeat_ms!r}")


def repeat_batches(
    batch_ms: Callable[[int], float],
    number: int,
    repeat: int,
    min_repeat_ms: float,
    max_runs: int,
) -> TimingResult:
    """Seconds per run over ``repeat`` batches; ``batch_ms(n)`` times ``n`` runs in ms.
    A batch starts at ``number`` runs and is lengthened (up to ``max_runs``) until it
    lasts ``min_repeat_ms``; later batches keep the length found."""
    results = []
    n = number
    for _ in range(repeat):
        while True:
            ms = batch_ms(n)
            if ms >= min_repeat_ms or n >= max_runs:
                break
            n = max(2 * n, int(n * min_repeat_ms / max(ms, 1e-3) * 1.2))
        results.append(ms * 1e-3 / n)
    return TimingResult(tuple(results))


__all__ = ["BoundCall", "Function", "Module", "TimingResult", "check_timing_args", "repeat_batches"]
