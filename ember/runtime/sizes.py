"""Symbolic sizes at call time: binding ``n`` from the arrays a function is called with.

A function lowered from ``te.placeholder((n,))`` takes ``n`` by value after its
data pointers (see ``PrimFunc.size_vars``). Its signature writes each dimension
as an ``int`` or as text over the size variables (``"n"``, ``"n - 2"``,
``"(n + 3) // 4"``), so an exported library keeps the rule. :func:`bind_sizes`
takes the values of scalar arguments, binds every variable that is a whole
dimension of some array from the first array that has it (as TVM binds a
symbolic shape from its buffer), then checks every other dimension and scalar
against those values. A disagreement is an ``ArgumentError`` naming both
arguments and the dimension; native code never sees inconsistent sizes.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ember.errors import ArgumentError

_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def eval_size(source: str, values: Mapping[str, int]) -> int:
    """The value of a size text (:func:`ember.tir.signature.size_text` writes them) under
    ``values``."""

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            b = ev(node.right)
            if b == 0 and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
                raise ArgumentError(f"the size {source} divides by zero with {dict(values)}")
            return _OPS[type(node.op)](ev(node.left), b)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn = {"min": min, "max": max}[node.func.id]
            return fn(ev(node.args[0]), ev(node.args[1]))
        raise ArgumentError(f"malformed size expression {source!r} in a module's signature")

    return ev(ast.parse(source, mode="eval"))


def bind_sizes(
    fname: str,
    params: Sequence[Any],
    values: Sequence[Any],
    size_vars: Sequence[str],
    size_dtypes: Mapping[str, str],
) -> list[int]:
    """Values of ``size_vars`` for one call, checked; ``params`` are ``ParamSpec``s and
    ``values`` the checked arrays (for scalars, Python ints) in the same order."""
    bound: dict[str, int] = {}
    origin: dict[str, str] = {}
    for p, v in zip(params, values):
        if p.scalar:
            bound[p.name], origin[p.name] = int(v), f"argument '{p.name}'"
    for p, v in zip(params, values):
        if p.scalar:
            continue
        for d, (extent, have) in enumerate(zip(p.shape, v.shape)):
            if isinstance(extent, str) and extent.isidentifier() and extent not in bound:
                bound[extent] = int(have)
                origin[extent] = f"dimension {d} of argument '{p.name}'"
    missing = [n for n in size_vars if n not in bound]
    if missing:
        raise ArgumentError(f"{fname}: no argument gives the size(s) {', '.join(missing)}")
    for p, v in zip(params, values):
        if p.scalar:
            continue
        for d, (extent, have) in enumerate(zip(p.shape, v.shape)):
            if isinstance(extent, int):
                continue
            want = eval_size(extent, bound)
            if want != have:
                names = [n for n in re.findall(r"[A-Za-z_]\w*", extent) if n in bound]
                src = "; ".join(f"{origin[n]} gives {n} = {bound[n]}" for n in names)
                raise ArgumentError(
                    f"{fname}: argument '{p.name}' has {have} elements in dimension {d}, but its "
                    f"shape asks for {extent} = {want} ({src})"
                )
    out = []
    for n in size_vars:
        lo, hi = _INT64 if size_dtypes.get(n) == "int64" else _INT32
        if not lo <= bound[n] <= hi:
            raise ArgumentError(
                f"{fname}: {n} = {bound[n]} ({origin[n]}) does not fit {size_dtypes.get(n)}"
            )
        out.append(bound[n])
    return out


__all__ = ["bind_sizes", "eval_size"]
