"""Random compute DAGs with a numpy twin, for the auto-scheduler's property test.

A DAG is a chain of ops on a 2-D tensor ``X`` (rows, cols), each op one of:
elementwise (an inlinable stage), broadcast add of a new vector input, transpose
(injective but not elementwise), a reduction over the last axis (sum or max),
matmul-like (a new weight input: data reuse), conv-like (a 1-D convolution over
the columns with a channel reduction: data reuse with shifted windows) and a padded
conv-like (the same, 'same'-padded through a padding stage of its own), and, in
``ROW_OPS``, softmax over the last axis (row reductions read back by the row, an
expensive stage read twice). Shapes are
small and odd. ``build(ops, rows, cols)`` gives the tensors (inputs, then the output)
and a numpy function of the input arrays computing the same output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember import te

OPS = ("relu", "scale", "bias", "transpose", "sum", "max", "matmul", "conv", "padconv")
ROW_OPS = (*OPS, "softmax")  # the CPU rules compute row reductions at the row loop


def build(ops: list[tuple[str, int]], rows: int, cols: int) -> tuple[list, Callable[..., Any]]:
    """``ops``: (kind, size) pairs; size is the new dimension a matmul/conv makes."""
    x = te.placeholder((rows, cols), name="X")
    inputs: list = [x]
    cur, shape = x, (rows, cols)
    steps: list[Callable[[Any, list], Any]] = []
    for n, (kind, size) in enumerate(ops):
        cur, shape, fn = _op(kind, size, n, cur, shape, inputs)
        steps.append(fn)

    def reference(*arrays: np.ndarray) -> np.ndarray:
        value = arrays[0].astype(np.float64)
        extra = list(arrays[1:])
        for fn in steps:
            value = fn(value, extra)
        return value

    return [*inputs, cur], reference


def _op(kind: str, size: int, n: int, cur: Any, shape: tuple, inputs: list) -> tuple:
    name = f"{kind}{n}"
    if kind == "relu" or (kind in ("sum", "max", "transpose", "softmax") and len(shape) == 1):
        out = te.compute(shape, lambda *i: te.max(cur(*i), 0.0), name=name)
        return out, shape, lambda v, e: np.maximum(v, 0.0)
    if kind == "scale":
        out = te.compute(shape, lambda *i: cur(*i) * 0.5 + 1.0, name=name)
        return out, shape, lambda v, e: v * 0.5 + 1.0
    if kind == "bias":
        b = te.placeholder((shape[-1],), name=f"b{n}")
        inputs.append(b)
        out = te.compute(shape, lambda *i: cur(*i) + b[i[-1]], name=name)
        return out, shape, lambda v, e: v + e.pop(0)
    if kind == "transpose":
        out = te.compute(shape[::-1], lambda i, j: cur[j, i], name=name)
        return out, shape[::-1], lambda v, e: v.T
    if kind == "softmax" and len(shape) == 2:
        return _softmax(name, cur, shape)
    if kind in ("sum", "max"):
        r = te.reduce_axis((0, shape[1]), name=f"r{n}")
        red = te.sum if kind == "sum" else te.max
        out = te.compute((shape[0],), lambda i: red(cur[i, r], axis=r), name=name)
        return out, (shape[0],), lambda v, e: v.sum(1) if kind == "sum" else v.max(1)
    if len(shape) == 1:  # matmul/conv need two axes: make a column
        col = te.compute((shape[0], 1), lambda i, j: cur[i], name=f"col{n}")
        cur, shape = col, (shape[0], 1)
        pre: Callable[[Any], Any] = lambda v: v[:, None]  # noqa: E731
    else:
        pre = lambda v: v  # noqa: E731
    if kind == "matmul":
        w = te.placeholder((shape[1], size), name=f"W{n}")
        inputs.append(w)
        k = te.reduce_axis((0, shape[1]), name=f"k{n}")
        out = te.compute(
            (shape[0], size), lambda i, j: te.sum(cur[i, k] * w[k, j], axis=k), name=name
        )
        return out, (shape[0], size), lambda v, e: pre(v) @ e.pop(0)
    if kind == "padconv":  # the columns padded by one zero each side, then a 3-tap conv
        src, rows, cols = cur, shape[0], shape[1]
        cur = te.compute(
            (rows, cols + 2),
            lambda i, j: te.if_then_else(te.all(j >= 1, j <= cols), src[i, j - 1], 0.0),
            name=f"pad{n}",
        )
        shape = (rows, cols + 2)
        unpadded = pre
        pre = lambda v: np.pad(unpadded(v), ((0, 0), (1, 1)))  # noqa: E731
    # conv: channels = rows, width = cols; out[f, x] = sum_c,t in[c, x + t] * w[f, c, t]
    taps = min(3, shape[1])
    w = te.placeholder((size, shape[0], taps), name=f"W{n}")
    inputs.append(w)
    c = te.reduce_axis((0, shape[0]), name=f"c{n}")
    t = te.reduce_axis((0, taps), name=f"t{n}")
    width = shape[1] - taps + 1
    out = te.compute(
        (size, width),
        lambda f, x: te.sum(cur[c, x + t] * w[f, c, t], axis=[c, t]),
        name=name,
    )

    def conv(v: Any, e: list) -> Any:
        v, wv = pre(v), e.pop(0)
        cols = np.stack([v[:, i : i + width] for i in range(taps)], axis=-1)  # c, x, t
        return np.einsum("cxt,fct->fx", cols, wv)

    return out, (size, width), conv


def _softmax(name: str, cur: Any, shape: tuple) -> tuple:
    rows, cols = shape
    k1 = te.reduce_axis((0, cols), name=f"{name}_k1")
    mx = te.compute((rows,), lambda i: te.max(cur[i, k1], axis=k1), name=f"{name}_max")
    ex = te.compute(shape, lambda i, j: te.exp(cur[i, j] - mx[i]), name=f"{name}_exp")
    k2 = te.reduce_axis((0, cols), name=f"{name}_k2")
    sm = te.compute((rows,), lambda i: te.sum(ex[i, k2], axis=k2), name=f"{name}_sum")
    out = te.compute(shape, lambda i, j: ex[i, j] / sm[i], name=name)

    def softmax(v: Any, e: list) -> Any:
        x = np.exp(v - v.max(1, keepdims=True))
        return x / x.sum(1, keepdims=True)

    return out, shape, softmax
