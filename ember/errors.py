"""Ember's error types: one family, split into the user's mistakes and the system's failures.

A user error (``ScheduleError``, ``ArgumentError``, ...) says what was wrong, where,
and what to do about it. A system error (``CompileError``, ``InternalError``,
``DeviceError``) says what failed and keeps what is needed to report it. Context
accumulates as an error travels up the stack through :meth:`EmberError.add_context`,
so the message a user finally reads says "while building 'matmul'" as well as
what went wrong deep inside. This module imports nothing else of Ember.
"""

from __future__ import annotations


class EmberError(RuntimeError):
    """Base of every error Ember raises on purpose.

    A ``RuntimeError``, as TVM's ``TVMError`` is, so code written against TVM that
    catches ``RuntimeError`` around a build or a call keeps working.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.context: list[str] = []

    def add_context(self, note: str) -> EmberError:
        """Record where the error passed through ("while lowering stage 'C'")."""
        self.context.append(note)
        return self

    def __str__(self) -> str:
        if not self.context:
            return self.message
        return self.message + "".join(f"\n  {note}" for note in self.context)


class UserError(EmberError):
    """The input (model, schedule, call) was wrong; the user can fix it."""


class SystemError_(EmberError):
    """Something below the user's input failed: a compiler, a driver, Ember itself."""


class ScheduleError(UserError):
    """An illegal schedule primitive: names the stage and the axis."""


class LoweringError(UserError):
    """A schedule that cannot be lowered (bounds, GPU limits)."""


class ArgumentError(UserError, ValueError):
    """A call with the wrong number, shape, dtype, layout or device of arguments."""


class NeedsConstantError(ArgumentError):
    """An importer needed a value at compile time (a Reshape's shape) that the model feeds
    at run time; ``tensor`` names it. ``ember.compile`` answers it by compiling the model
    per distinct value of the graph inputs that tensor comes from."""

    def __init__(self, message: str, tensor: str) -> None:
        super().__init__(message)
        self.tensor = tensor


class DLPackExportError(ArgumentError, BufferError):
    """A DLPack request an Ember array cannot serve (device, stream, byte order, copy).

    Also a ``BufferError``, which is what DLPack consumers catch.
    """


class SymbolicTruthError(ArgumentError, TypeError):
    """Python asked a symbolic expression for a bool (``if x < n:``, ``and``/``or``/``not``).

    Also a ``TypeError``, which Python code expects from a value with no truth value.
    """


class UnsupportedOperatorError(UserError):
    """A model uses operators Ember does not implement; lists all of them at once."""


class PackedFuncError(UserError):
    """A registered function called from compiled code (``call_packed``) raised; chained."""


class InvalidModelError(UserError):
    """A model file that is malformed or inconsistent."""


class ConfigError(UserError):
    """A tuning config or template that is not valid for its space."""


class RaceError(UserError):
    """The SIMT emulator found a shared-memory race or an out-of-bounds access."""


class CompileError(SystemError_):
    """A native compiler (LLVM, NVRTC) rejected generated code.

    Carries the generated ``source`` and the compiler ``log`` so a bug report
    has everything needed to reproduce it.
    """

    def __init__(self, message: str, source: str = "", log: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.log = log


class DeviceError(SystemError_):
    """No driver, no device, or a device call failed."""


class InternalError(SystemError_):
    """A bug in Ember: an invariant broke. Always chained to its cause."""


__all__ = [
    "ArgumentError",
    "CompileError",
    "ConfigError",
    "DeviceError",
    "EmberError",
    "InternalError",
    "InvalidModelError",
    "LoweringError",
    "NeedsConstantError",
    "RaceError",
    "ScheduleError",
    "SymbolicTruthError",
    "SystemError_",
    "UnsupportedOperatorError",
    "UserError",
]
