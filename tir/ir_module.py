"""``IRModule``: several named PrimFuncs that build into one module with several entry points.

TVM users gather functions as ``tvm.IRModule({"add": f_add, "mul": f_mul})`` (or
``mod.update(other)``, ``mod["name"] = f``) and build them with
``tvm.build(mod, target=...)``; the result is one compiled module from which each
function is fetched by name (``m["add"]``, ``m.get_function("mul")``). This is
the same container for Ember: a name -> PrimFunc mapping kept in insertion order
(the first function is what calling the built module runs).

The name a function is exported under is its key here. A PrimFunc added under a
key that differs from its own name is renamed to the key (its ``global_symbol``
too). TVM keeps the PrimFunc's ``global_symbol`` attribute as the exported
symbol even when it differs from the key; Ember deliberately makes the key win,
so ``IRModule({"mul": f})`` is always callable as ``m["mul"]``.

Like TVM's, the module is a mutable container of immutable functions: ``update``
and item assignment replace a function of the same name, as in TVM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from ember.errors import ArgumentError
from ember.tir import stmt as S


def _check_name(name: object) -> str:
    name = getattr(name, "name_hint", name)  # a TVM-style GlobalVar-like key
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"IRModule: a function name must be a C identifier, got {name!r}")
    return name


def named(func: S.PrimFunc, name: str) -> S.PrimFunc:
    """``func`` exported as ``name`` (itself when it already is)."""
    if func.name == name and func.attr("global_symbol", name) == name:
        return func
    return dataclasses.replace(func, name=name).with_attr("global_symbol", name)


def _check_func(name: str, func: object) -> S.PrimFunc:
    if isinstance(func, IRModule) and len(func) == 1:
        func = next(iter(func.functions.values()))
    if not isinstance(func, S.PrimFunc):
        raise ArgumentError(
            f"IRModule: '{name}' must map to a PrimFunc (from ember.lower), "
            f"got {type(func).__name__}"
        )
    return named(func, name)


class IRModule:
    """Named PrimFuncs in insertion order; what ``ember.build`` compiles into one module."""

    def __init__(self, functions: Mapping[Any, S.PrimFunc] | None = None) -> None:
        self._funcs: dict[str, S.PrimFunc] = {}
        for key, func in (functions or {}).items():
            name = _check_name(key)
            if name in self._funcs:
                raise ArgumentError(f"IRModule: two functions are named '{name}'")
            self._funcs[name] = _check_func(name, func)

    @staticmethod
    def from_expr(func: S.PrimFunc) -> IRModule:
        """A module holding ``func`` under its own name (TVM's ``IRModule.from_expr``)."""
        if not isinstance(func, S.PrimFunc):
            raise ArgumentError(f"IRModule.from_expr takes a PrimFunc, got {type(func).__name__}")
        return IRModule({func.name: func})

    @property
    def functions(self) -> dict[str, S.PrimFunc]:
        """A copy of the name -> PrimFunc mapping."""
        return dict(self._funcs)

    def get_global_vars(self) -> list[str]:
        """The function names (TVM returns GlobalVars; Ember's names are plain strings)."""
        return list(self._funcs)

    def __getitem__(self, name: Any) -> S.PrimFunc:
        key = getattr(name, "name_hint", name)
        if key not in self._funcs:
            raise ArgumentError(
                f"no function '{key}' in this IRModule; it has: {', '.join(self._funcs) or '-'}"
            )
        return self._funcs[key]

    def __setitem__(self, name: Any, func: S.PrimFunc) -> None:
        key = _check_name(name)
        self._funcs[key] = _check_func(key, func)

    def update(self, other: IRModule | S.PrimFunc | Mapping[Any, S.PrimFunc]) -> None:
        """Add ``other``'s functions in place; one of the same name is replaced (as TVM).
        A PrimFunc (what ``ember.lower`` returns) is added under its own name."""
        if isinstance(other, S.PrimFunc):
            other = {other.name: other}
        items = other.functions if isinstance(other, IRModule) else dict(other)
        for key, func in items.items():
            self[key] = func

    def __contains__(self, name: object) -> bool:
        return getattr(name, "name_hint", name) in self._funcs

    def __len__(self) -> int:
        return len(self._funcs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._funcs)

    def __repr__(self) -> str:
        return "\n\n".join(repr(f) for f in self._funcs.values()) or "# empty IRModule"

    __str__ = __repr__
