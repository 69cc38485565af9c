"""A lowered PrimFunc's call contract, derived at compile time for the runtime to check.

The code generators (CPU and CUDA) call :func:`signature_for` when they build a module;
the result is a plain :class:`~ember.runtime.signature.FunctionSignature` that travels
with the compiled code (as JSON inside an exported library) and is checked before every
call. Deriving it reads the IR, so it lives here, above the runtime, which never sees a
PrimFunc. :func:`size_text` writes a symbolic shape extent as the text the runtime's
:func:`~ember.runtime.sizes.eval_size` reads back.
"""

from __future__ import annotations

from typing import Any

from ember.errors import LoweringError
from ember.runtime.signature import FunctionSignature, ParamSpec
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from ember.tir.stmt import PrimFunc

_SYMBOLS = {
    E.BinaryOp.ADD: "+",
    E.BinaryOp.SUB: "-",
    E.BinaryOp.MUL: "*",
    E.BinaryOp.FLOORDIV: "//",
    E.BinaryOp.FLOORMOD: "%",
}


def size_text(expr: Any) -> int | str:
    """A shape extent as an ``int`` or as the text :func:`ember.runtime.sizes.eval_size`
    reads (``"n"``, ``"n - 2"``, ``"(n + 3) // 4"``)."""

    def text(e: Any) -> str:
        if isinstance(e, E.IntImm):
            return str(e.value)
        if isinstance(e, E.Var):
            return e.name
        if isinstance(e, E.Cast):
            return text(e.value)
        if isinstance(e, E.BinOp):
            sym = _SYMBOLS.get(e.op)
            if sym is not None:
                return f"({text(e.a)} {sym} {text(e.b)})"
            if e.op in (E.BinaryOp.MIN, E.BinaryOp.MAX):
                return f"{e.op.name.lower()}({text(e.a)}, {text(e.b)})"
        raise LoweringError(
            f"the shape extent {expr!r} cannot be checked at call time; use sizes built from "
            "variables and integers with + - * // % min max"
        )

    if isinstance(expr, E.IntImm):
        return expr.value
    out = text(expr)
    return out[1:-1] if out.startswith("(") and out.endswith(")") else out


def param_specs(func: PrimFunc) -> tuple[ParamSpec, ...]:
    """Names, shapes (ints and size texts), dtypes of a PrimFunc's parameters, which it
    writes, and for scalars the least value they take (1 for a symbolic split amount)."""
    written: set[Any] = set()

    def visit(node: object) -> None:
        if isinstance(node, S.BufferStore):
            written.add(node.buffer.data)
        elif isinstance(node, E.Call) and node.op is E.Intrinsic.ACCESS_PTR:
            if E.const_value(node.args[3]) != 1:  # access_ptr("w"): the callee writes
                written.add(node.args[0])

    post_order_visit(func.body, visit, once=True)
    positive = set(func.attr("positive_vars", ()))
    params = []
    for p in func.params:
        if isinstance(p, E.Var):
            minimum = 1 if p in positive else None
            params.append(ParamSpec(p.name, (), p.dtype, False, True, minimum))
            continue
        shape = tuple(size_text(extent) for extent in p.shape)
        params.append(ParamSpec(p.name, shape, p.dtype, p.data in written))
    return tuple(params)


def size_var_specs(func: PrimFunc) -> tuple[tuple[str, str], ...]:
    """``func.size_vars()`` as (name, dtype) pairs; two different variables may not share
    a name, since the signature refers to sizes by name. ``positive_names`` gives the
    ones that must be at least 1."""
    out: dict[str, str] = {}
    seen: dict[str, Any] = {}
    for v in func.size_vars():
        if v.name in seen and seen[v.name] is not v:
            raise LoweringError(
                f"'{func.name}' has two different size variables named '{v.name}'; give "
                "each te.var its own name"
            )
        seen[v.name] = v
        out[v.name] = v.dtype
    return tuple(out.items())


def positive_names(func: PrimFunc) -> tuple[str, ...]:
    """The size variables used as divisors (symbolic split amounts): each must be >= 1."""
    return tuple(v.name for v in func.attr("positive_vars", ()))


def signature_for(func: PrimFunc, name: str, symbol: str = "") -> FunctionSignature:
    """The whole call contract of a lowered PrimFunc (shared by the CPU and CUDA modules)."""
    return FunctionSignature(
        name,
        param_specs(func),
        symbol=symbol,
        size_vars=size_var_specs(func),
        positive=positive_names(func),
    )


__all__ = ["param_specs", "positive_names", "signature_for", "size_text", "size_var_specs"]
