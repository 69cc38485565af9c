"""Floor and truncating division and modulo, with negative operands, against Python and C."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.tir import expr as E
from tests.codegen_llvm.llvm_helpers import build, map_func, sentinel
from tests.nightly import examples

OPS = {
    "floordiv": (E.floordiv, lambda a, b: a // b),
    "floormod": (E.floormod, lambda a, b: a % b),
    "truncdiv": (E.truncdiv, lambda a, b: _ctrunc(a, b)),
    "truncmod": (E.truncmod, lambda a, b: a - b * _ctrunc(a, b)),
}


def _ctrunc(a: int, b: int) -> int:
    """C's ``a / b``: the quotient rounded toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _operands(dtype: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    a = rng.integers(-100, 101, size=n)
    b = rng.integers(1, 12, size=n) * np.where(rng.integers(0, 2, size=n) == 1, 1, -1)
    if dtype.startswith("uint"):
        a, b = np.abs(a), np.abs(b)
    return a.astype(dtype), b.astype(dtype)


@pytest.mark.parametrize("lanes", [1, 8])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32"])
@pytest.mark.parametrize("op", list(OPS))
def test_integer_division(op, dtype, lanes, rng):
    expr_fn, py_fn = OPS[op]
    mod = build(map_func(op, [dtype, dtype], dtype, expr_fn, 129, lanes=lanes))
    a, b = _operands(dtype, 129, rng)
    out = sentinel(129, dtype)
    mod(a, b, out)
    want = [py_fn(int(x), int(y)) for x, y in zip(a, b)]
    np.testing.assert_array_equal(out.astype(np.int64), want)


@pytest.mark.parametrize("divisor", [1, 2, 3, 8, -4])
def test_floor_division_by_constant(divisor, rng):
    f = map_func(
        "fdc",
        ["int32"],
        "int32",
        lambda a: E.floordiv(a, divisor) + E.floormod(a, divisor),
        129,
        lanes=16,
    )
    mod = build(f)
    a = rng.integers(-1000, 1000, size=129).astype(np.int32)
    out = sentinel(129, "int32")
    mod(a, out)
    np.testing.assert_array_equal(out, a // divisor + a % divisor)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_floor_division_and_modulo(dtype, rng):
    mod = build(
        map_func(
            "ff",
            [dtype, dtype],
            dtype,
            lambda a, b: E.floordiv(a, b) * 100 + E.floormod(a, b),
            129,
            lanes=8,
        )
    )
    a = rng.uniform(-50, 50, size=129).astype(dtype)
    b = (rng.uniform(0.5, 4, size=129) * rng.choice([-1, 1], size=129)).astype(dtype)
    out = sentinel(129, dtype)
    mod(a, b, out)
    np.testing.assert_allclose(
        out, np.floor_divide(a, b) * 100 + np.mod(a, b), rtol=1e-5, atol=1e-4
    )


_MODS: dict[str, object] = {}


def _mod(op: str):
    if op not in _MODS:
        _MODS[op] = build(map_func(op, ["int64", "int64"], "int64", OPS[op][0], 1))
    return _MODS[op]


@settings(max_examples=examples(300), deadline=None)
@given(
    st.sampled_from(list(OPS)),
    st.integers(-(2**62), 2**62),
    st.integers(-(2**31), 2**31).filter(lambda x: x != 0),
)
def test_division_property_int64(op, a, b):
    out = sentinel(1, "int64")
    _mod(op)(np.array([a], np.int64), np.array([b], np.int64), out)
    assert int(out[0]) == OPS[op][1](a, b)
