"""Structural equality of TIR: the comparison Before/Expected pass tests are written with.

Nodes compare by identity (``==`` is ``is``), so two separately built trees are
never equal; ``structural_equal`` compares their shape instead. Two trees are
equal when they have the same node kinds, operators, dtypes and constants in the
same places, and their variables and buffers correspond one to one:

- a variable *defined* in the tree (a loop variable, a ``LetStmt``/``Let``
  variable, a reducer's operands) matches the variable defined at the same
  place in the other tree, and every later use must agree with that match;
- buffers (parameters, allocations, and any other buffer on first use) match
  when their dtype, scope, shape, strides and offset are structurally equal, and
  the match, like that of their ``data`` pointers, must hold everywhere after;
- a free variable (a symbolic shape, say) must be the same object on both sides,
  unless ``map_free_vars=True``, which matches free variables on first use.

``assert_structural_equal`` raises an ``AssertionError`` showing both printed
trees, their diff, and the path to the first difference, e.g.
``body.stmts[1].value.b: IntImm 3 != IntImm 4``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import Any

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.printer import expr_to_str, func_to_str, stmt_to_str

# fields that define the variable they hold (compared before the fields that use it)
_DEFINING = {
    (S.For, "loop_var"),
    (S.LetStmt, "var"),
    (E.Let, "var"),
    (E.CommReducer, "lhs"),
    (E.CommReducer, "rhs"),
}
_LEAVES = (E.IntImm, E.FloatImm, E.StringImm)


class _Mismatch(Exception):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path or '<root>'}: {reason}")
        self.path, self.reason = path, reason


def _describe(x: Any) -> str:
    if isinstance(x, _LEAVES):
        return f"{type(x).__name__} {x.value!r}" + (
            "" if x.dtype in ("int32", "float32", "handle") else f" ({x.dtype})"
        )
    if isinstance(x, E.Var):
        return f"Var {x.name} ({x.dtype})"
    if isinstance(x, E.PrimExpr):
        return f"{type(x).__name__} `{expr_to_str(x)}`"
    if isinstance(x, Buffer):
        return f"Buffer {x.name}"
    if isinstance(x, (S.Stmt, S.PrimFunc)):
        return type(x).__name__
    return repr(x)


def _is_ir(x: Any) -> bool:
    """Nodes compared field by field; anything else (a TE tensor, say) by identity or ``==``."""
    ir_types = (E.PrimExpr, S.Stmt, S.PrimFunc, E.Range, E.CommReducer)
    return isinstance(x, ir_types) or type(x).__name__ == "IterVar"


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


class _Comparer:
    def __init__(self, map_free_vars: bool) -> None:
        self.map_free_vars = map_free_vars
        self.vars: dict[E.Var, E.Var] = {}
        self.vars_back: dict[E.Var, E.Var] = {}
        self.bufs: dict[Buffer, Buffer] = {}
        self.bufs_back: dict[Buffer, Buffer] = {}

    # -- variables -----------------------------------------------------------------
    def define_var(self, a: E.Var, b: E.Var, path: str) -> None:
        if a.dtype != b.dtype:
            raise _Mismatch(path, f"{_describe(a)} != {_describe(b)}")
        self.vars[a], self.vars_back[b] = b, a  # a re-definition starts a new match

    def var(self, a: E.Var, b: E.Var, path: str) -> None:
        if a.dtype != b.dtype:
            raise _Mismatch(path, f"{_describe(a)} != {_describe(b)}")
        mapped = self.vars.get(a)
        if mapped is not None:
            if mapped is not b:
                raise _Mismatch(
                    path,
                    f"{_describe(a)} matches {_describe(mapped)} "
                    f"where it is defined, but here {_describe(b)}",
                )
            return
        if b in self.vars_back:
            raise _Mismatch(
                path,
                f"{_describe(b)} is already matched to "
                f"{_describe(self.vars_back[b])}, here to {_describe(a)}",
            )
        if a is b:
            return
        if not self.map_free_vars:
            raise _Mismatch(
                path,
                f"free variables differ: {_describe(a)} is not {_describe(b)} "
                "(pass map_free_vars=True to match them)",
            )
        self.define_var(a, b, path)

    # -- buffers ----------------------------------------------------------------------
    def buffer(self, a: Buffer, b: Buffer, path: str, define: bool = False) -> None:
        """Match two buffers; ``define`` starts a new match (an allocation or a parameter)."""
        if not define:
            mapped = self.bufs.get(a)
            if mapped is not None:
                if mapped is not b:
                    raise _Mismatch(
                        path,
                        f"Buffer {a.name} matches Buffer {mapped.name} "
                        f"elsewhere, but here Buffer {b.name}",
                    )
                return
            if b in self.bufs_back:
                raise _Mismatch(
                    path,
                    f"Buffer {b.name} is already matched to Buffer "
                    f"{self.bufs_back[b].name}, here to Buffer {a.name}",
                )
        for name in ("dtype", "scope", "axis_separators"):
            x, y = getattr(a, name), getattr(b, name)
            if x != y:
                raise _Mismatch(f"{path}.{name}", f"{x!r} != {y!r} (buffers {a.name}, {b.name})")
        self.bufs[a], self.bufs_back[b] = b, a
        for name in ("shape", "strides", "elem_offset"):
            self.value(getattr(a, name), getattr(b, name), f"{path}.{name}")
        self.pointer(a.data, b.data, f"{path}.data", define)

    def pointer(self, a: E.Var, b: E.Var, path: str, define: bool) -> None:
        """Buffers that share a pointer (a parameter and its flattened view) must on both sides."""
        mapped = self.vars.get(a)
        if define or (mapped is None and b not in self.vars_back):
            self.define_var(a, b, path)
        elif mapped is not b:
            raise _Mismatch(
                path,
                f"data pointers differ: '{a.name}' does not correspond "
                f"to '{b.name}' as it does elsewhere",
            )

    # -- generic walk --------------------------------------------------------------------
    def value(self, a: Any, b: Any, path: str) -> None:
        if isinstance(a, E.Var) and isinstance(b, E.Var):
            self.var(a, b, path)
        elif isinstance(a, Buffer) and isinstance(b, Buffer):
            self.buffer(a, b, path)
        elif isinstance(a, tuple) and isinstance(b, tuple):
            if len(a) != len(b):
                raise _Mismatch(path, f"{len(a)} elements != {len(b)} elements")
            for k, (x, y) in enumerate(zip(a, b)):
                self.value(x, y, f"{path}[{k}]")
        elif _is_ir(a):
            self.node(a, b, path)
        elif a is not b and not _same_value(a, b):
            raise _Mismatch(path, f"{_describe(a)} != {_describe(b)}")

    def node(self, a: Any, b: Any, path: str) -> None:
        if type(a) is not type(b):
            raise _Mismatch(path, f"{_describe(a)} != {_describe(b)}")
        if isinstance(a, _LEAVES):
            if a.dtype != b.dtype or not _same_value(a.value, b.value):
                raise _Mismatch(path, f"{_describe(a)} != {_describe(b)}")
            return
        if isinstance(a, S.PrimFunc):
            self.func(a, b)
            return
        names = [f.name for f in dataclasses.fields(a)]
        if isinstance(a, E.Reduce):  # the axes are defined before the source uses them
            names = ["axis", *[n for n in names if n != "axis"]]
        defining = type(a).__name__ == "IterVar"  # a reduce axis defines its variable
        for name in names:
            sub = f"{path}.{name}" if path else name
            x, y = getattr(a, name), getattr(b, name)
            if (type(a), name) in _DEFINING or (defining and name == "var"):
                self.define_var(x, y, sub)
            elif isinstance(a, S.Allocate) and name == "buffer":
                self.buffer(x, y, sub, define=True)
            else:
                self.value(x, y, sub)

    def func(self, a: S.PrimFunc, b: S.PrimFunc) -> None:
        if len(a.params) != len(b.params):
            raise _Mismatch("params", f"{len(a.params)} parameters != {len(b.params)}")
        for k, (x, y) in enumerate(zip(a.params, b.params)):
            if isinstance(x, E.Var) or isinstance(y, E.Var):  # a scalar parameter
                if not (isinstance(x, E.Var) and isinstance(y, E.Var)):
                    raise _Mismatch(f"params[{k}]", "a scalar and a buffer")
                if x not in self.vars:
                    self.define_var(x, y, f"params[{k}]")
                continue
            # symbolic extents of parameters are defined by them (bound at call time)
            for d, (u, v) in enumerate(zip(x.shape, y.shape)):
                if isinstance(u, E.Var) and isinstance(v, E.Var) and u not in self.vars:
                    self.define_var(u, v, f"params[{k}].shape[{d}]")
            self.buffer(x, y, f"params[{k}]", define=True)
        self.value(a.body, b.body, "body")
        self.value(a.attrs, b.attrs, "attrs")


def _compare(a: Any, b: Any, map_free_vars: bool) -> _Mismatch | None:
    try:
        _Comparer(map_free_vars).value(a, b, "")
    except _Mismatch as m:
        return m
    return None


def structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> bool:
    """True if ``a`` and ``b`` (expressions, statements or PrimFuncs) have the same structure."""
    return _compare(a, b, map_free_vars) is None


def _text(x: Any) -> str:
    if isinstance(x, S.PrimFunc):
        return func_to_str(x)
    if isinstance(x, S.Stmt):
        return stmt_to_str(x)
    if isinstance(x, E.PrimExpr):
        return expr_to_str(x)
    return repr(x)


def assert_structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> None:
    """Raise ``AssertionError`` with both texts, their diff and the first difference's path."""
    mismatch = _compare(a, b, map_free_vars)
    if mismatch is None:
        return
    ta, tb = _text(a), _text(b)
    diff = "\n".join(
        difflib.unified_diff(ta.splitlines(), tb.splitlines(), "lhs", "rhs", lineterm="")
    )
    raise AssertionError(
        f"structures differ at {mismatch}\n"
        f"--- lhs ---\n{ta}\n--- rhs ---\n{tb}\n" + (f"--- diff ---\n{diff}\n" if diff else "")
    )


__all__ = ["assert_structural_equal", "structural_equal"]
