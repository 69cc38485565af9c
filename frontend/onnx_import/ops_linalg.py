"""Converters for Einsum (opset 12: the equation goes to the ``einsum`` op as it is) and Det."""

from __future__ import annotations

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter


@converter("Einsum", since=12)
def einsum(ctx: ConvertContext) -> list[str]:
    """ONNX Einsum; the equation is checked and its spaces dropped so it keys the kernel cache."""
    equation = ctx.attr("equation")
    if not isinstance(equation, str) or not equation.strip():
        raise ArgumentError(f"Einsum: equation must be a non-empty string, got {equation!r}")
    return ctx.emit("einsum", ctx.inputs(), {"equation": equation.replace(" ", "")})


@converter("Det", since=11)
def det(ctx: ConvertContext) -> list[str]:
    """ONNX Det."""
    return ctx.emit("det", [ctx.input(0)])
