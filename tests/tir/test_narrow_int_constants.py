"""Constants of integer types narrower than 32 bits: a literal out of range is refused (as
TVM's IntImm refuses it) and folding two constants wraps as the machine does, so a folded
``int8(127) + 1`` and the same sum computed at run time agree."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ArgumentError
from ember.tir import expr as E


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
def test_folded_sums_wrap_like_the_machine(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(0)
    for a, b in [(int(info.max), 1), (int(info.min), -1 if info.min < 0 else 0)] + [
        tuple(int(v) for v in rng.integers(info.min, int(info.max) + 1, 2)) for _ in range(20)
    ]:
        folded = E.const(a, dtype) + E.const(b, dtype)
        want = (np.array(a, dtype) + np.array(b, dtype)).item()
        assert isinstance(folded, E.IntImm) and folded.value == want


@pytest.mark.parametrize(
    "dtype,value", [("int8", 128), ("int8", -129), ("uint8", 256), ("uint8", -1), ("int16", 40000)]
)
def test_out_of_range_literals_are_refused(dtype, value):
    with pytest.raises(ArgumentError, match="holds"):
        E.const(value, dtype)


def test_folded_and_computed_sums_agree_on_llvm():
    n = 13
    A = te.placeholder((n,), name="A", dtype="int8")
    B = te.compute((n,), lambda i: A[i] + (E.const(100, "int8") + E.const(100, "int8")), name="B")
    mod = ember.build(te.create_schedule(B.op), [A, B], target="llvm")
    a = np.random.default_rng(1).integers(-128, 128, n).astype("int8")
    b = np.empty(n, "int8")
    mod(a, b)
    np.testing.assert_array_equal(b, (a.astype(np.int64) + 200 + 128) % 256 - 128)
