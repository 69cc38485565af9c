"""ember.tir: the loop IR, and the scalar functions TVM users call as ``tvm.tir.<name>``.

The node modules load with the package, through the printer: nodes print through it
(see :mod:`ember.tir.node`), so it is imported here, where every import of a node module
passes first. The functions (``exp``, ``if_then_else``, ``bitwise_and``,
``call_pure_extern``, ...) and the reducers (``sum``, ``max``, ``min``, ``comm_reducer``)
load on first use, so importing ``ember.tir`` stays light.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from ember.tir import printer as _printer  # noqa: F401 - registers node text (ember.tir.node)

_REDUCERS = ("sum", "max", "min", "comm_reducer", "max_value", "min_value")
# with TVM's node constructors of the same argument order (``IntImm("int32", 5)``)
_EXPR = (
    "eq", "ne", "max_", "min_", "const",
    "Var", "SizeVar", "IntImm", "FloatImm", "StringImm", "Cast",
)  # fmt: skip
# TVM's node constructors that take the operands only (the dtype follows from them)
_CONSTRUCTORS = {"Select": "select"}
# statement classes under TVM's names (``isinstance(stmt.body, tvm.tir.Evaluate)``)
_STMT = (
    "Allocate", "AssertStmt", "AttrStmt", "BufferStore", "Evaluate", "For", "ForKind",
    "IfThenElse", "LetStmt", "PrimFunc", "SeqStmt", "Stmt",
)  # fmt: skip


def __getattr__(name: str) -> Any:
    if name == "decl_buffer":
        return importlib.import_module("ember.tir.buffer").decl_buffer
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # a submodule not imported yet (``ember.tir.transform``; ``from ember.tir import
        # dtype`` asks here first): load it, not ember.tir.op, which may be what is
        # importing it right now
        return importlib.import_module(f"{__name__}.{name}")
    if name in _STMT:
        return getattr(importlib.import_module("ember.tir.stmt"), name)
    if name == "IterVar":  # with TVM's iter_type constants (IterVar.DataPar, ...)
        return importlib.import_module("ember.tir.te.tensor").IterVar
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
