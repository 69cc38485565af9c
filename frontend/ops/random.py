"""Random draws (ONNX RandomUniform, RandomNormal, their ``Like`` forms, Bernoulli and
Multinomial), counter-based: ``tir/topi/random.py`` says how and where Ember differs.

Attributes (set by the converter, every one present): ``key`` (int, the draws' 64-bit
key, from the node's seed), ``dtype``; ``shape``, ``low``/``high`` or ``mean``/``scale``
for the two without inputs; ``samples`` for multinomial. ``random_uniform`` and
``random_normal`` read no tensor, so constant folding computes them once when the model
is compiled (with the same kernel code, so the draws are the same either way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import ELEMWISE, INJECTIVE, OPAQUE
from ember.frontend.ops.registry import register_op
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.topi import random as topi_random

FLOATS = ("float16", "float32", "float64", "bfloat16")


def _float_dtype(op: str, dtype: str) -> str:
    if dtype not in FLOATS:
        raise ArgumentError(f"{op}: draws are floating point, not {dtype}")
    return dtype


def _infer_shaped(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    shape = tuple(int(d) for d in attrs["shape"])
    if any(d < 0 for d in shape):
        raise ArgumentError(f"random: negative size in shape {list(shape)}")
    return [TensorType(shape, _float_dtype("random", attrs["dtype"]))]


@register_op("random_uniform", OPAQUE, infer=_infer_shaped, num_inputs=0)
def random_uniform(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Uniform draws in [low, high)."""
    shape = [E.const(int(d), "int64") for d in attrs["shape"]]
    a = attrs
    return [topi_random.uniform(shape, a["dtype"], a["low"], a["high"], a["key"])]


@register_op("random_normal", OPAQUE, infer=_infer_shaped, num_inputs=0)
def random_normal(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Normal draws of the given mean and standard deviation."""
    shape = [E.const(int(d), "int64") for d in attrs["shape"]]
    a = attrs
    return [topi_random.normal(shape, a["dtype"], a["mean"], a["scale"], a["key"])]


def _infer_bernoulli(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    (p,) = types
    _float_dtype("bernoulli: the probabilities", p.dtype)
    dt.check_dtype(attrs["dtype"])
    return [TensorType(p.shape, attrs["dtype"])]


@register_op("bernoulli", ELEMWISE, infer=_infer_bernoulli, num_inputs=1)
def bernoulli(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """1 with each element's probability, else 0."""
    return [topi_random.bernoulli(inputs[0], attrs["dtype"], attrs["key"])]


def _infer_multinomial(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    (x,) = types
    _float_dtype("multinomial: the log probabilities", x.dtype)
    if x.ndim != 2 or not x.is_static:
        raise ArgumentError(f"multinomial: the input must be (batch, classes), got {x}")
    if attrs["dtype"] not in ("int32", "int64"):
        raise ArgumentError(f"multinomial: the output is int32 or int64, not {attrs['dtype']}")
    if int(x.shape[1]) < 1 or int(attrs["samples"]) < 1:
        raise ArgumentError(
            f"multinomial: needs at least one class and one sample, got {x} and "
            f"sample_size {attrs['samples']}"
        )
    return [TensorType((x.shape[0], int(attrs["samples"])), attrs["dtype"])]


@register_op("multinomial", INJECTIVE, infer=_infer_multinomial, num_inputs=1)
def multinomial(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """``samples`` class indices per row, by each row's softmax."""
    a = attrs
    return [topi_random.multinomial(inputs[0], int(a["samples"]), a["dtype"], a["key"])]
