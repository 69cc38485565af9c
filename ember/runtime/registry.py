"""The global function registry: Python functions that compiled code calls by name.

As TVM's ``tvm.register_func`` / ``tvm.get_global_func``: an extern stage's body
``tir.call_packed("my.func", ins[0], outs[0])`` names a function registered here,
and the code looks it up when it runs, so a function may be registered (or
replaced with ``override=True``) after the module was built. Buffers arrive as
``ember.nd`` CPU arrays viewing the module's memory (``np.asarray(x)`` is a view,
``y[:] = ...`` and ``y.copyfrom(...)`` write in place; ``x.numpy()`` is a copy, as in
TVM), scalars as Python numbers.

This module imports nothing of Ember but its errors and the runtime's arrays, so
registering a function does not load the compiler.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError, PackedFuncError
from ember.runtime.nd import CPUArray

_FUNCS: dict[str, Callable[..., Any]] = {}
_LOCK = threading.Lock()


def register_func(
    func_name: str | Callable[..., Any],
    f: Callable[..., Any] | None = None,
    override: bool = False,
) -> Any:
    """Register ``f`` under ``func_name``; without ``f``, a decorator that does.

    ``@register_func`` alone registers the function under its ``__name__``. A name
    already taken is an ``ArgumentError`` unless ``override=True``.
    """
    if callable(func_name) and f is None:
        fn = func_name
        return register_func(fn.__name__, fn, override)
    if not isinstance(func_name, str) or not func_name:
        raise ArgumentError(f"register_func: the name must be a non-empty str, got {func_name!r}")
    name = func_name

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(fn):
            raise ArgumentError(f"register_func('{name}'): expected a callable, got {fn!r}")
        with _LOCK:
            if name in _FUNCS and not override:
                raise ArgumentError(
                    f"global function '{name}' is already registered; pass override=True "
                    "to replace it"
                )
            _FUNCS[name] = fn
        return fn

    return register(f) if f is not None else register


def get_global_func(name: str, allow_missing: bool = False) -> Callable[..., Any] | None:
    """The function registered as ``name``; ``None`` if missing and ``allow_missing``."""
    fn = _FUNCS.get(name)
    if fn is None and not allow_missing:
        known = ", ".join(sorted(_FUNCS)[:20]) or "none"
        raise ArgumentError(
            f"no global function '{name}' is registered (ember.register_func('{name}', f)); "
            f"registered: {known}"
        )
    return fn


def remove_global_func(name: str) -> None:
    """Forget ``name`` (a missing name is an ``ArgumentError``)."""
    with _LOCK:
        if _FUNCS.pop(name, None) is None:
            raise ArgumentError(f"no global function '{name}' is registered")


def list_global_func_names() -> list[str]:
    """The names of all registered global functions, sorted (TVM's ``list_global_func_names``)."""
    return sorted(_FUNCS)


# -- calls from compiled code --------------------------------------------------------------
_PENDING: list[BaseException] = []  # an error a native caller reports by status code


def call_packed_func(name: str, args: Sequence[Any]) -> None:
    """Call the function registered as ``name`` from compiled code (the interpreter, the
    CPU trampoline). numpy arrays are handed over as ``ember.nd`` views of the same memory.

    A missing name or a wrong argument count is an ``ArgumentError``; an exception inside
    the function becomes a ``PackedFuncError`` chained to it.
    """
    fn = get_global_func(name)
    assert fn is not None
    values = [_as_array(a) for a in args]
    try:
        inspect.signature(fn).bind(*values)
    except TypeError as e:
        raise ArgumentError(
            f"call_packed('{name}') passes {len(values)} arguments, which the registered "
            f"function {getattr(fn, '__name__', fn)!r} does not take: {e}"
        ) from e
    except ValueError:
        pass  # no signature to check (a builtin): let the call decide
    try:
        fn(*values)
    except Exception as e:
        raise PackedFuncError(f"packed function '{name}' raised {type(e).__name__}: {e}") from e


def _as_array(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return CPUArray(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def report_pending(error: BaseException) -> None:
    """Keep ``error`` for the native caller's status check (see :func:`take_pending`)."""
    with _LOCK:
        _PENDING.append(error)


def take_pending() -> BaseException | None:
    """The first error a packed call reported since the last take, and forget them all."""
    with _LOCK:
        error = _PENDING[0] if _PENDING else None
        _PENDING.clear()
    return error


__all__ = ["get_global_func", "list_global_func_names", "register_func", "remove_global_func"]
