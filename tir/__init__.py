"""ember.tir: the loop IR, and the scalar functions TVM users call as ``tvm.tir.<name>``.

The functions (``exp``, ``if_then_else``, ``bitwise_and``, ``call_pure_extern``, ...)
and the reducers (``sum``, ``max``, ``min``, ``comm_reducer``) load on first use, so
importing a submodule such as ``ember.tir.dtype`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_REDUCERS = ("sum", "max", "min", "comm_reducer", "max_value", "min_value")
_EXPR = ("eq", "ne", "max_", "min_", "Var", "const")
# TVM's node constructors that take the operands only (the dtype follows from them)
_CONSTRUCTORS = {"Select": "select"}


def __getattr__(name: str) -> Any:
    if name == "decl_buffer":
        return importlib.import_module("ember.tir.buffer").decl_buffer
    if name in _REDUCERS:
        return getattr(importlib.import_module("ember.tir.te.operation"), name)
    op = importlib.import_module("ember.tir.op")
    if name in _CONSTRUCTORS:
        return getattr(op, _CONSTRUCTORS[name])
    if name in op.__all__:
        return getattr(op, name)
    if name in _EXPR:
        return getattr(importlib.import_module("ember.tir.expr"), name)
    raise AttributeError(f"module 'ember.tir' has no attribute {name!r}")
