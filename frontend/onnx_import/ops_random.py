"""ONNX RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike, Bernoulli and
Multinomial, as Ember's counter-based random ops (``frontend/ops/random.py``).

The node's ``seed`` (a float) is the draws' key, its 64 bits as an integer; a node with
no seed gets a key drawn from the operating system when the model is imported, so two
imports draw differently and one compiled model draws the same numbers on every run
(onnxruntime's generator advances from run to run instead). The ``Like`` forms take
the input's shape (a static one: each size of a symbolic model is imported on its own)
and, without ``dtype``, its element type.
"""

from __future__ import annotations

import secrets
import struct

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.ops_broadcast import onnx_dtype
from ember.frontend.onnx_import.registry import converter


def _key(ctx: ConvertContext) -> int:
    """The node's draws' 64-bit key: its seed's bits, else a fresh random key."""
    seed = ctx.attr("seed", None)
    if seed is None:
        return secrets.randbits(64)
    return int.from_bytes(struct.pack("<d", float(seed)), "little")


def _dtype(ctx: ConvertContext, default: str) -> str:
    code = ctx.attr("dtype", None)
    return default if code is None else onnx_dtype(int(code), f"{ctx.op_type} 'dtype'")


def _like_shape(ctx: ConvertContext) -> tuple[int, ...]:
    t = ctx.type(0)
    if not t.is_static:
        raise ArgumentError(f"{ctx.op_type} '{ctx.name}': the input's shape {t} must be static")
    return tuple(int(d) for d in t.shape)


def _uniform(ctx: ConvertContext, shape: tuple[int, ...], dtype: str) -> list[str]:
    low, high = float(ctx.attr("low", 0.0)), float(ctx.attr("high", 1.0))
    attrs = {"shape": shape, "dtype": dtype, "low": low, "high": high, "key": _key(ctx)}
    return ctx.emit("random_uniform", [], attrs)


def _normal(ctx: ConvertContext, shape: tuple[int, ...], dtype: str) -> list[str]:
    mean, scale = float(ctx.attr("mean", 0.0)), float(ctx.attr("scale", 1.0))
    attrs = {"shape": shape, "dtype": dtype, "mean": mean, "scale": scale, "key": _key(ctx)}
    return ctx.emit("random_normal", [], attrs)


@converter("RandomUniform", since=1)
def random_uniform(ctx: ConvertContext) -> list[str]:
    """Draws in [low, high) of the ``shape`` attribute."""
    return _uniform(ctx, tuple(int(d) for d in ctx.attr("shape")), _dtype(ctx, "float32"))


@converter("RandomNormal", since=1)
def random_normal(ctx: ConvertContext) -> list[str]:
    """Normal draws of the ``shape`` attribute."""
    return _normal(ctx, tuple(int(d) for d in ctx.attr("shape")), _dtype(ctx, "float32"))


@converter("RandomUniformLike", since=1)
def random_uniform_like(ctx: ConvertContext) -> list[str]:
    """Draws in [low, high) shaped like the input."""
    return _uniform(ctx, _like_shape(ctx), _dtype(ctx, ctx.type(0).dtype))


@converter("RandomNormalLike", since=1)
def random_normal_like(ctx: ConvertContext) -> list[str]:
    """Normal draws shaped like the input."""
    return _normal(ctx, _like_shape(ctx), _dtype(ctx, ctx.type(0).dtype))


@converter("Bernoulli", since=15)
def bernoulli(ctx: ConvertContext) -> list[str]:
    """1 with each input element's probability, else 0, in ``dtype`` (the input's type
    by default)."""
    dtype = _dtype(ctx, ctx.type(0).dtype)
    return ctx.emit("bernoulli", [ctx.input(0)], {"dtype": dtype, "key": _key(ctx)})


@converter("Multinomial", since=7)
def multinomial(ctx: ConvertContext) -> list[str]:
    """``sample_size`` class indices per batch row of unnormalised log probabilities."""
    dtype = _dtype(ctx, "int32")
    samples = int(ctx.attr("sample_size", 1))
    attrs = {"dtype": dtype, "samples": samples, "key": _key(ctx)}
    return ctx.emit("multinomial", [ctx.input(0)], attrs)
