"""Casts between every pair of dtypes, fp16/bf16 round trips and rounding, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.tir import dtype as dt
from ember.tir import expr as E
from tests.codegen_llvm.llvm_helpers import (
    ALL_DTYPES,
    as_float,
    build,
    map_func,
    rand,
    sentinel,
    to_bf16,
)
from tests.nightly import examples, sample_in_ci

N = 37


def _source(src: str, dst: str, rng: np.random.Generator) -> np.ndarray:
    unsigned = dt.is_uint(src) or dt.is_uint(dst) or "bool" in (src, dst)
    lo = 0 if unsigned else -100
    values = rng.uniform(lo, 100, size=N)
    if not dt.is_float(src):
        values = np.round(values)
    values[::5] = 0  # exercise x != 0 for bool results
    if src == "bool":
        return values.astype(bool) | (np.arange(N) % 3 == 0)
    if src == "bfloat16":
        return to_bf16(values.astype(np.float32))
    return values.astype(src)


def _reference(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    value = as_float(x, src).astype(np.float32) if src == "bfloat16" else x
    if dst == "bfloat16":
        return to_bf16(value.astype(np.float32))
    return value.astype(dst)


@pytest.mark.parametrize("lanes", [1, 8])
@pytest.mark.parametrize("dst", ALL_DTYPES)
@pytest.mark.parametrize("src", ALL_DTYPES)
def test_cast_every_pair(src, dst, lanes, rng):
    sample_in_ci(src, dst, lanes)
    f = map_func("cast", [src], dst, lambda a: E.cast(dst, a), N, lanes=lanes)
    mod = build(f)
    x = _source(src, dst, rng)
    out = sentinel(N, dst)
    mod(x, out)
    np.testing.assert_array_equal(out, _reference(x, src, dst))


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_half_round_trip_through_float32(low, rng):
    """float32 -> low -> float32 equals numpy's rounding; low -> float32 -> low is exact."""
    down = build(map_func("down", ["float32"], low, lambda a: E.cast(low, a), 129, lanes=16))
    up = build(map_func("up", [low], "float32", lambda a: E.cast("float32", a), 129, lanes=16))
    x = rng.uniform(-300, 300, size=129).astype(np.float32)
    small = sentinel(129, low)
    down(x, small)
    want = to_bf16(x) if low == "bfloat16" else x.astype(np.float16)
    np.testing.assert_array_equal(small, want)
    back = sentinel(129, "float32")
    up(small, back)
    np.testing.assert_array_equal(back, as_float(small, low).astype(np.float32))
    again = sentinel(129, low)
    down(back, again)
    np.testing.assert_array_equal(again, small)


def test_bfloat16_rounds_to_nearest_even_and_keeps_nan():
    mod = build(map_func("bf", ["float32"], "bfloat16", lambda a: E.cast("bfloat16", a), 6))
    bits = np.array(
        [0x3F808000, 0x3F818000, 0x3F80C000, 0x7F7FFFFF, 0x7FC00001, 0xFF800000], dtype=np.uint32
    )
    x = bits.view(np.float32)
    out = sentinel(6, "bfloat16")
    mod(x, out)
    # tie to even (down), tie to even (up), above half (up), overflow to inf, NaN, -inf
    np.testing.assert_array_equal(out, [0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x7FC0, 0xFF80])


_CAST = {}


def _cached_cast(src: str, dst: str):
    key = (src, dst)
    if key not in _CAST:
        _CAST[key] = build(map_func("c", [src], dst, lambda a: E.cast(dst, a), 1))
    return _CAST[key]


@settings(max_examples=examples(200), deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=True))
def test_float32_to_bfloat16_property(value):
    x = np.array([value], dtype=np.float32)
    out = sentinel(1, "bfloat16")
    _cached_cast("float32", "bfloat16")(x, out)
    np.testing.assert_array_equal(out, to_bf16(x))


@settings(max_examples=examples(200), deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=True))
def test_float32_to_float16_property(value):
    x = np.array([value], dtype=np.float32)
    out = sentinel(1, "float16")
    _cached_cast("float32", "float16")(x, out)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, x.astype(np.float16))


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_low_precision_constants_are_rounded(low, rng):
    mod = build(map_func("k", [low], low, lambda a: a * E.const(0.1, low) + E.const(1e6, low), 37))
    x = rand(37, low, rng)
    out = sentinel(37, low)
    mod(x, out)
    if low == "bfloat16":
        c = as_float(to_bf16(np.float32([0.1, 1e6])), low).astype(np.float32)
        prod = to_bf16(as_float(x, low).astype(np.float32) * c[0])
        want = to_bf16(as_float(prod, low).astype(np.float32) + c[1])
    else:
        with np.errstate(over="ignore"):
            want = x * np.float16(0.1) + np.float16(1e6)  # 1e6 overflows float16: inf
    np.testing.assert_array_equal(out, want)


_FRESH_PROCESS_CAST = """
import sys
import numpy as np
import ember
from ember import te

A = te.placeholder((37,), "float64", name="A")
B = te.compute((37,), lambda i: A[i].astype("float16"), name="B")
mod = ember.build(te.create_schedule(B.op), [A, B], target="llvm")
x = np.random.default_rng(0).uniform(-70000, 70000, 37)
out = np.zeros(37, "float16")
mod(x, out)
np.testing.assert_array_equal(out, x.astype("float16"))
mod.export_library(sys.argv[1])
loaded = ember.runtime.load_module(sys.argv[1])
out[:] = 0
loaded(x, out)
np.testing.assert_array_equal(out, x.astype("float16"))
print("ok")
"""


def test_float64_to_float16_in_a_fresh_process(tmp_path):
    """On CPUs without AVX512-FP16 LLVM calls libgcc's ``__truncdfhf2`` for this cast. In
    a fresh process that symbol was not visible to the JIT, which then called address 0
    (a segfault that other tests hid by loading libgcc first)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS_CAST, str(tmp_path / "cast.so")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
