"""ONNX converters: which function turns an ONNX node into Ember graph nodes, per opset.

A converter is registered for one ONNX op type (and domain) over a range of opset
versions, because operators change form between opsets (Squeeze takes ``axes`` as
an attribute before 13 and as an input from 13). The importer picks the rule whose
range holds the model's opset for that domain; no rule, and the op is reported as
unsupported, never converted by the rule for another opset.

A converter takes a :class:`~ember.frontend.onnx_import.context.ConvertContext` and
returns one Ember value name per ONNX output::

    from ember.frontend.onnx_import.registry import converter

    @converter("LeakyRelu", since=6)
    def leaky_relu(ctx):
        alpha = float(ctx.attr("alpha", 0.01))         # attribute with ONNX's default
        return ctx.emit("leaky_relu", [ctx.input(0)], {"alpha": alpha})

    @converter("Squeeze", since=13)                    # axes became an input
    def squeeze_13(ctx):
        axes = ctx.constant(1) if ctx.has_input(1) else None   # must be constant
        ...

``ctx.input(i)`` is the Ember value of input ``i``, ``ctx.type(i)`` its
:class:`TensorType`, ``ctx.constant(i)`` its data (a clear error if it is not a
constant), ``ctx.attr(name, default)`` an attribute (lists come back as tuples),
``ctx.emit(op, inputs, attrs)`` adds an Ember op and returns its output names
(folding it right away when all inputs are constants; ``ctx.emit1`` for one output),
and ``ctx.const(array)`` adds a constant. Also: ``ctx.has_input(i)`` (optional
inputs), ``ctx.inputs()`` (all given ones), ``ctx.is_constant(i)``,
``ctx.has_attr(name)``, ``ctx.type_of(value)``, ``ctx.value_of(value)`` (data of a
constant value, else None), ``ctx.name``, ``ctx.op_type``, ``ctx.opset``,
``ctx.num_outputs``. Raise :class:`ember.ArgumentError` for a form Ember cannot
take (the importer adds "while converting ONNX node 'n' (Op)"), saying "not
supported" when it is a missing feature rather than a bad model. Converters live
in ``ops_<family>.py``, listed in ``onnx_import/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ember.errors import InternalError

ConverterFn = Callable[[Any], list[Any]]  # value names, or sequences (sequences.py)
MAX_OPSET = 1 << 30


@dataclass(frozen=True)
class ConverterRule:
    """Which converter handles an ONNX op type of a domain, for an opset range."""

    op_type: str
    domain: str
    since: int
    until: int
    fn: ConverterFn


_RULES: dict[tuple[str, str], list[ConverterRule]] = {}


def _norm_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def converter(
    op_type: str, since: int = 1, until: int = MAX_OPSET, domain: str = ""
) -> Callable[[ConverterFn], ConverterFn]:
    """Register the decorated function for ``op_type`` at opsets ``since..until`` (inclusive)."""

    def deco(fn: ConverterFn) -> ConverterFn:
        key = (_norm_domain(domain), op_type)
        rules = _RULES.setdefault(key, [])
        for r in rules:
            if r.since <= until and since <= r.until:
                raise InternalError(
                    f"converters for {op_type} overlap: opsets {r.since}..{r.until} "
                    f"and {since}..{until}"
                )
        rules.append(ConverterRule(op_type, key[0], since, until, fn))
        return fn

    return deco


def find_converter(op_type: str, domain: str, opset: int) -> ConverterRule | None:
    """The rule for ``op_type`` at ``opset``, or None when Ember has no such rule. Every
    converter is registered: this module is reached only through its package, whose
    ``__init__`` imports all ``ops_*`` modules."""
    for r in _RULES.get((_norm_domain(domain), op_type), []):
        if r.since <= opset <= r.until:
            return r
    return None


def supported_op_types() -> list[str]:
    """The ONNX op types the importer can convert, for coverage reports such as the node suite."""
    return sorted({op for (_, op) in _RULES})
