"""Constant folding tables: complete for every operator, machine semantics for every dtype."""

from __future__ import annotations

import numpy as np
import pytest

from ember.tir import expr as E
from ember.tir.arith.fold import (
    COMPARE,
    INT_BINARY,
    fold_binary,
    fold_cast,
    fold_compare,
    wrap_int,
)


def test_tables_cover_every_operator() -> None:
    assert set(INT_BINARY) == set(E.BinaryOp)
    assert set(COMPARE) == set(E.CompareOp)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32"])
def test_integer_folding_wraps_like_the_machine(dtype: str) -> None:
    rng = np.random.default_rng(0)
    info = np.iinfo(dtype)
    for _ in range(50):
        a, b = (
            int(v) for v in rng.integers(info.min, info.max, size=2, dtype=np.int64, endpoint=True)
        )
        for op, npop in (
            (E.BinaryOp.ADD, np.add),
            (E.BinaryOp.SUB, np.subtract),
            (E.BinaryOp.MUL, np.multiply),
        ):
            got = fold_binary(op, E.IntImm(dtype, a), E.IntImm(dtype, b), dtype)
            with np.errstate(over="ignore"):
                want = int(npop(np.array(a, dtype), np.array(b, dtype)))
            assert isinstance(got, E.IntImm) and got.value == want


def test_division_by_zero_is_not_folded() -> None:
    for op in (E.BinaryOp.FLOORDIV, E.BinaryOp.FLOORMOD, E.BinaryOp.TRUNCDIV, E.BinaryOp.TRUNCMOD):
        assert fold_binary(op, E.const(5), E.const(0), "int32") is None
    one, zero = E.const(1.0, "float32"), E.const(0.0, "float32")
    assert fold_binary(E.BinaryOp.DIV, one, zero, "float32") is None


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_folding_rounds_in_the_dtype(dtype: str) -> None:
    a, b = E.FloatImm(dtype, 0.1), E.FloatImm(dtype, 0.7)
    for op, npop in (
        (E.BinaryOp.ADD, np.add),
        (E.BinaryOp.MUL, np.multiply),
        (E.BinaryOp.DIV, np.divide),
    ):
        got = fold_binary(op, a, b, dtype)
        want = npop(np.array(0.1, dtype), np.array(0.7, dtype))
        assert isinstance(got, E.FloatImm) and got.value == float(want)
    # floor division of floats is not an exact IEEE operation: left alone
    assert fold_binary(E.BinaryOp.FLOORDIV, a, b, dtype) is None
    assert (
        fold_binary(
            E.BinaryOp.ADD, E.FloatImm("bfloat16", 1.0), E.FloatImm("bfloat16", 2.0), "bfloat16"
        )
        is None
    )


def test_compare_and_cast() -> None:
    assert fold_compare(E.CompareOp.LT, E.const(1), E.const(2)).value == 1  # type: ignore[union-attr]
    assert fold_compare(E.CompareOp.LT, E.Var("x"), E.const(2)) is None
    assert fold_cast("int8", E.const(200)).value == -56  # type: ignore[union-attr]
    assert fold_cast("int32", E.const(-2.7, "float32")).value == -2  # type: ignore[union-attr]
    assert fold_cast("int8", E.const(1000.0, "float32")) is None  # out of range: undefined in C
    assert fold_cast("bool", E.const(0.5, "float32")).value == 1  # type: ignore[union-attr]
    assert fold_cast("float16", E.const(0.1, "float64")).value == float(np.float16(0.1))  # type: ignore[union-attr]
    assert wrap_int(256 + 7, "uint8") == 7 and wrap_int(5, "bool") == 1
