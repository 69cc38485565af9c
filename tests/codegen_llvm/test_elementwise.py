"""Elementwise arithmetic over every dtype, scalar and vector, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ember.tir import expr as E
from tests.codegen_llvm.llvm_helpers import (
    ALL_DTYPES,
    FLOATS,
    INTS,
    as_float,
    assert_close,
    build,
    map_func,
    rand,
    sentinel,
    to_bf16,
)

N = 37  # odd: the vector body never covers everything


def _reference(op: str, dtype: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if dtype == "bfloat16":
        x, y = as_float(a, dtype).astype(np.float32), as_float(b, dtype).astype(np.float32)
        return to_bf16(_numpy_op(op, x, y))
    with np.errstate(over="ignore"):
        return _numpy_op(op, a, b)


def _numpy_op(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return {
        "add": np.add,
        "sub": np.subtract,
        "mul": np.multiply,
        "div": np.divide,
        "min": np.minimum,
        "max": np.maximum,
    }[op](a, b)


_EXPR = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "min": E.min_,
    "max": E.max_,
}


@pytest.mark.parametrize("lanes", [1, 8])
@pytest.mark.parametrize("dtype", INTS + FLOATS)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "min", "max"])
def test_binary_every_dtype(op, dtype, lanes, rng):
    f = map_func("f", [dtype, dtype], dtype, _EXPR[op], N, lanes=lanes)
    mod = build(f)
    a, b = rand(N, dtype, rng), rand(N, dtype, rng)
    if dtype.startswith("uint") and op == "sub":
        a, b = np.maximum(a, b), np.minimum(a, b)
    out = sentinel(N, dtype)
    mod(a, b, out)
    if dtype == "bfloat16":
        np.testing.assert_array_equal(out, _reference(op, dtype, a, b))
    else:
        assert_close(out, _reference(op, dtype, a, b), dtype)


@pytest.mark.parametrize("lanes", [1, 16])
@pytest.mark.parametrize("dtype", FLOATS)
def test_float_division(dtype, lanes, rng):
    mod = build(map_func("f", [dtype, dtype], dtype, _EXPR["div"], 129, lanes=lanes))
    a, b = rand(129, dtype, rng), rand(129, dtype, rng, low=0.5, high=3.0)
    out = sentinel(129, dtype)
    mod(a, b, out)
    assert_close(out, as_float(a, dtype) / as_float(b, dtype), dtype, scale=2)


def test_fused_multiply_add_uses_fmuladd(rng):
    f = map_func("fma3", ["float32"] * 3, "float32", lambda a, b, c: a * b + c, 129, lanes=16)
    mod = build(f)
    assert "llvm.fmuladd" in mod.get_source("ll-unopt")
    a, b, c = (rand(129, "float32", rng) for _ in range(3))
    out = sentinel(129, "float32")
    mod(a, b, c, out)
    assert_close(out, a.astype(np.float64) * b + c, "float32", scale=4)


@pytest.mark.parametrize("lanes", [1, 16])
def test_bool_logic(lanes, rng):
    f = map_func("logic", ["bool"] * 3, "bool", lambda a, b, c: (a & b) | ~c, 37, lanes=lanes)
    mod = build(f)
    a, b, c = (rand(37, "bool", rng) for _ in range(3))
    out = sentinel(37, "bool")
    mod(a, b, c, out)
    np.testing.assert_array_equal(out, (a & b) | ~c)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_copy_every_dtype_bit_exact(dtype, rng):
    mod = build(map_func("copy", [dtype], dtype, lambda a: a, 129, lanes=8))
    a = rand(129, dtype, rng)
    out = sentinel(129, dtype)
    mod(a, out)
    np.testing.assert_array_equal(out, a)


def test_fast_math_attribute_sets_flags(rng):
    f = map_func(
        "fm",
        ["float32"] * 2,
        "float32",
        lambda a, b: a * b - a,
        64,
        lanes=16,
        attrs=(("fast_math", True),),
    )
    mod = build(f)
    assert "fmul fast" in mod.get_source("ll-unopt")
    plain = build(map_func("pl", ["float32"] * 2, "float32", lambda a, b: a * b - a, 64, lanes=16))
    assert " fast " not in plain.get_source("ll-unopt")
    a, b = rand(64, "float32", rng), rand(64, "float32", rng)
    out = sentinel(64, "float32")
    mod(a, b, out)
    assert_close(out, a * b - a, "float32", scale=4)
