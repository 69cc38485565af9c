"""N-ary elementwise computes with numpy broadcasting: comparisons, logic, bits, pow, mod, where.

:func:`broadcast_map` is the one broadcasting loop: it takes any number of
tensors (their dtypes may differ) and a scalar function of their elements, and
returns the tensor of that function over the broadcast shape. The named
functions below are the scalar rules of the ONNX operators built on it, with
the integer and float semantics ONNX gives them (``mod`` as Python's ``%`` or
C's ``fmod``, ``pow`` of mixed types in the base's type); plus :func:`cast`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import op as _op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor


def broadcast_shape(shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """numpy's broadcast of static shapes."""
    n = max((len(s) for s in shapes), default=0)
    out = [1] * n
    for s in shapes:
        for k, d in enumerate([1] * (n - len(s)) + list(s)):
            if d != out[k] and 1 not in (d, out[k]):
                raise ArgumentError(f"shapes {[list(x) for x in shapes]} do not broadcast")
            out[k] = d if d != 1 else out[k]
    return tuple(out)


def broadcast_map(
    tensors: Sequence[Tensor], fn: Callable[..., E.PrimExpr], name: str = "bcast"
) -> Tensor:
    """``fn(a, b, ...)`` over the broadcast shape of ``tensors``, one element of each."""
    shapes = [[int(s.value) for s in t.shape] for t in tensors]  # type: ignore[attr-defined]
    out = broadcast_shape(shapes)
    n = len(out)

    def load(t: Tensor, dims: list[int], idx: Sequence[E.PrimExpr]) -> E.PrimExpr:
        sub = [0 if d == 1 else i for d, i in zip(dims, idx[n - len(dims) :])]
        return t[tuple(sub)]

    return te.compute(
        out,
        lambda *idx: fn(*(load(t, s, idx) for t, s in zip(tensors, shapes))),
        name=name,
        tag="broadcast",
    )


def _pow(x: E.PrimExpr, y: E.PrimExpr) -> E.PrimExpr:
    """``x ** y`` in ``x``'s type: floats in the base's float type, integers through float64."""
    if dt.is_float(x.dtype):
        return _op.pow(x, E.cast(x.dtype, y))
    out = _op.pow(E.cast("float64", x), E.cast("float64", y))
    return E.cast(x.dtype, out)


def _mod(fmod: bool) -> Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]:
    def f(x: E.PrimExpr, y: E.PrimExpr) -> E.PrimExpr:
        if dt.is_float(x.dtype):
            return _op.fmod(x, y)
        return E.truncmod(x, y) if fmod else E.floormod(x, y)

    return f


def _xor(x: E.PrimExpr, y: E.PrimExpr) -> E.PrimExpr:
    return E.ne(x, y)


def _shift(left: bool) -> Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]:
    """A shift by the bit width or more gives 0 (as C's promoted shift of a narrow unsigned
    type does), where LLVM's would be undefined."""

    def f(x: E.PrimExpr, y: E.PrimExpr) -> E.PrimExpr:
        shifted = (_op.shift_left if left else _op.shift_right)(x, y)
        return E.select(y < dt.bits_of(x.dtype), shifted, E.const(0, x.dtype))

    return f


# Scalar rules of the binary operators, by Ember op name.
BINARY: dict[str, Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]] = {
    "pow": _pow,
    "mod": _mod(False),
    "fmod": _mod(True),
    "equal": E.eq,
    "greater": lambda x, y: x > y,
    "less": lambda x, y: x < y,
    "greater_equal": lambda x, y: x >= y,
    "less_equal": lambda x, y: x <= y,
    "logical_and": E.logical_and,
    "logical_or": E.logical_or,
    "logical_xor": _xor,
    "bitwise_and": _op.bitwise_and,
    "bitwise_or": _op.bitwise_or,
    "bitwise_xor": _op.bitwise_xor,
    "shift_left": _shift(True),
    "shift_right": _shift(False),
    "prelu": lambda x, s: E.select(x < E.const(0, x.dtype), x * s, x),
}


def nan_max(x: E.PrimExpr, y: E.PrimExpr) -> E.PrimExpr:
    """``max`` that returns NaN when either operand is NaN (as numpy and onnxruntime; the
    plain ``max_`` is C's ``fmax``, which drops a NaN)."""
    if not dt.is_float(x.dtype):
        return E.max_(x, y)
    return E.select(E.logical_or(x > y, _op.isnan(x)), x, y)


def nan_min(x: E.PrimExpr, y: E.PrimExpr) -> E.PrimExpr:
    """``min`` propagating NaN, as :func:`nan_max`."""
    if not dt.is_float(x.dtype):
        return E.min_(x, y)
    return E.select(E.logical_or(x < y, _op.isnan(x)), x, y)


# Associative rules folded over any number of inputs.
VARIADIC: dict[str, Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]] = {
    "max": nan_max,
    "min": nan_min,
    "sum": lambda x, y: x + y,
}


def binary(A: Tensor, B: Tensor, rule: str, name: str | None = None) -> Tensor:
    """``BINARY[rule]`` of ``A`` and ``B`` broadcast together."""
    return broadcast_map([A, B], BINARY[rule], name or rule)


def variadic(tensors: Sequence[Tensor], rule: str, name: str | None = None) -> Tensor:
    """``VARIADIC[rule]`` folded left over the broadcast elements of ``tensors``."""
    fn = VARIADIC[rule]
    return broadcast_map(tensors, lambda *xs: reduce(fn, xs[1:], xs[0]), name or rule)


def mean(tensors: Sequence[Tensor], name: str = "mean") -> Tensor:
    """The elementwise mean (float inputs): the sum divided by the count."""
    k = len(tensors)
    return broadcast_map(tensors, lambda *xs: reduce(lambda a, b: a + b, xs) / float(k), name)


def where(cond: Tensor, X: Tensor, Y: Tensor, name: str = "where") -> Tensor:
    """Elementwise ``cond ? X : Y`` with numpy broadcasting (ONNX ``Where``)."""
    return broadcast_map([cond, X, Y], E.select, name)


def bitcast(X: Tensor, dtype: str, name: str = "bitcast") -> Tensor:
    """Each element's bits read as ``dtype`` of the same width (ONNX BitCast). Integers
    of one width (and bool, stored as a byte of 0 or 1) convert bit for bit with a plain
    cast; a float and an integer go through ``tir.reinterpret``."""
    src = dt.element_of(X.dtype)
    if dt.bytes_of(src) != dt.bytes_of(dtype):
        raise ArgumentError(f"bitcast: {X.dtype} and {dtype} differ in width")
    floats = {d for d in (src, dtype) if dt.is_float(d)}
    if src == dtype or not floats:
        return cast(X, dtype, name)
    return te.compute(
        X.shape, lambda *i: _op.reinterpret(dtype, X[i]), name=name, tag="elementwise"
    )


def cast(X: Tensor, dtype: str, name: str = "cast") -> Tensor:
    """Each element converted to ``dtype`` (C's conversions; nonzero is true).

    float64 goes to float16 through float32, as onnxruntime converts it; LLVM would
    otherwise call ``__truncdfhf2``, which JIT code cannot always resolve."""

    def f(x: E.PrimExpr) -> E.PrimExpr:
        if dt.element_of(x.dtype) == "float64" and dt.element_of(dtype) == "float16":
            x = E.cast("float32", x)
        return E.cast(dtype, x)

    return te.compute(X.shape, lambda *i: f(X[i]), name=name, tag="elementwise")
