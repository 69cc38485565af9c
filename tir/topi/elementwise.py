"""Elementwise and broadcasting computes; the user writes broadcasting in the indices."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir import op as _op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor


def broadcast_binary(
    A: Tensor, B: Tensor, fn: Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr], name: str = "bin"
) -> Tensor:
    """numpy-style broadcasting of two tensors through ``fn``."""
    ra, rb = A.ndim, B.ndim
    n = max(ra, rb)
    sa = [1] * (n - ra) + [int(s.value) for s in A.shape]  # type: ignore[attr-defined]
    sb = [1] * (n - rb) + [int(s.value) for s in B.shape]  # type: ignore[attr-defined]
    out = []
    for x, y in zip(sa, sb):
        if x != y and 1 not in (x, y):
            raise ArgumentError(f"cannot broadcast shapes {list(sa)} and {list(sb)}")
        out.append(max(x, y))

    def index(t: Tensor, dims: list[int], idx: Sequence[E.PrimExpr]) -> E.PrimExpr:
        sub = [0 if d == 1 else i for d, i in zip(dims, idx)][n - t.ndim :]
        return t[tuple(sub)]

    return te.compute(
        tuple(out),
        lambda *idx: fn(index(A, sa, idx), index(B, sb, idx)),
        name=name,
        tag="broadcast",
    )


def elementwise_chain(X: Tensor, bias: Tensor, name: str = "chain") -> Tensor:
    """``gelu(x * 2 + bias)`` with GELU's tanh form: a bias add and an activation, as
    after a linear layer. Two computes, so a schedule can show what fusing them saves."""
    if bias.ndim != 1 or X.ndim < 1:
        raise ArgumentError("elementwise_chain: bias must be 1-D over the last axis")
    y = te.compute(X.shape, lambda *i: X[i] * 2.0 + bias[i[-1]], name=f"{name}_affine")

    def gelu(*i: E.PrimExpr) -> E.PrimExpr:
        z = y[i]
        inner = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        return 0.5 * z * (1.0 + te.tanh(inner))

    return te.compute(X.shape, gelu, name=name, tag="elementwise")


def elementwise_chain_numpy(x, bias):  # noqa: ANN001, ANN201
    """The numpy reference of :func:`elementwise_chain`."""
    z = x * np.float32(2.0) + bias
    return (
        np.float32(0.5)
        * z
        * (1 + np.tanh(np.float32(0.7978845608028654) * (z + np.float32(0.044715) * z * z * z)))
    )


def unary(X: Tensor, fn: Callable[[E.PrimExpr], E.PrimExpr], name: str) -> Tensor:
    """``fn`` applied to every element of ``X`` (an activation, exp, a copy)."""
    return te.compute(X.shape, lambda *i: fn(X[i]), name=name, tag="elementwise")


def relu(X: Tensor, name: str = "relu") -> Tensor:
    """``max(x, 0)`` by compare-and-select, so a NaN stays NaN (as numpy and onnxruntime)."""
    return unary(X, lambda x: E.select(x < E.const(0, X.dtype), E.const(0, X.dtype), x), name)


def sigmoid(X: Tensor, name: str = "sigmoid") -> Tensor:
    """Elementwise logistic sigmoid (ONNX ``Sigmoid``)."""
    return unary(X, _op.sigmoid, name)


def tanh(X: Tensor, name: str = "tanh") -> Tensor:
    """Elementwise hyperbolic tangent (ONNX ``Tanh``)."""
    return unary(X, _op.tanh, name)


def exp(X: Tensor, name: str = "exp") -> Tensor:
    """Elementwise exponential (ONNX ``Exp``)."""
    return unary(X, _op.exp, name)


def copy(X: Tensor, name: str = "copy") -> Tensor:
    """A copy of ``X`` as a stage of its own: the graph's ``copy`` op (ONNX ``Identity``, a
    reduction over no axes, an output that would otherwise alias another value)."""
    return unary(X, lambda x: x, name)
