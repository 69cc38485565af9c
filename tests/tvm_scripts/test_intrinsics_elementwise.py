"""An intrinsic-heavy elementwise program as TVM users write it: ``te.exp``, ``te.log``,
``te.sqrt``, ``te.tanh``, ``te.sigmoid``, ``te.fmod``, ``tvm.tir.atan2``, ``te.isnan``,
``te.popcount`` and shifts on integers, ``tvm.tir.clz`` and the bitwise functions,
hyperbolic and exp2/exp10/log2/log10/log1p, ``hypot``/``copysign``, ``isinf``/
``isfinite``, ``call_pure_extern``/``call_extern`` of C math functions,
``te.if_then_else`` guarding a read,
``tvm.tir.Select`` / ``te.select`` on ``==``, floor and truncating division. Each
expression is built on ``llvm`` (split/vectorize) and for CUDA (fused, split and
bound) and run in the emulator, against numpy on random data with odd sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te
from tests.tvm_scripts.common import CUDA, empty_like

N = 517  # odd: neither the vector width nor the thread count divides it


def _floats(rng, shape, low=-3.0, high=3.0):
    return rng.uniform(low, high, shape).astype("float32")


def _ints(rng, shape, low=-(2**20), high=2**20):
    return rng.integers(low, high, shape, dtype="int32")


def _small_ints(rng, shape):
    return rng.integers(-40, 40, shape, dtype="int32")


def _with_nans(rng, shape):
    x = _floats(rng, shape)
    x[rng.random(shape) < 0.3] = np.nan
    return x


def _with_specials(rng, shape):
    x = _floats(rng, shape)
    pick = rng.random(shape)
    x[pick < 0.15] = np.inf
    x[(pick >= 0.15) & (pick < 0.3)] = -np.inf
    x[(pick >= 0.3) & (pick < 0.4)] = np.nan
    return x


def _clz32(x):
    """Leading zero bits of the 32-bit pattern, from its bit length (independent of clz)."""
    u = x.view(np.uint32).astype(np.int64)
    return np.array([32 - int(v).bit_length() for v in u], dtype=np.int32)


def _popcount32(x):
    return np.bitwise_count(x.view(np.uint32)).astype(np.int32)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


# name -> (inputs (one generator per input), te body, numpy reference, output dtype)
CASES = {
    "exp_log_sqrt": (
        (_floats,),
        lambda A: lambda i: te.log(te.exp(A[i]) + 1.0) + te.sqrt(te.abs(A[i])),
        lambda a: np.log(np.exp(a) + 1.0) + np.sqrt(np.abs(a)),
        "float32",
    ),
    "tanh_sigmoid": (
        (_floats,),
        lambda A: lambda i: te.tanh(A[i]) * te.sigmoid(A[i] * 2.0),
        lambda a: np.tanh(a) * _sigmoid(a * 2.0),
        "float32",
    ),
    "fmod_atan2": (
        (_floats, lambda rng, shape: _floats(rng, shape, 0.5, 2.0)),
        lambda A, B: lambda i: te.fmod(A[i], B[i]) + tvm.tir.atan2(A[i], B[i] - 1.0),
        lambda a, b: np.fmod(a, b) + np.arctan2(a, b - np.float32(1.0)),
        "float32",
    ),
    "isnan_select": (
        (_with_nans,),
        lambda A: lambda i: te.if_then_else(te.isnan(A[i]), -1.0, A[i] * A[i]),
        lambda a: np.where(np.isnan(a), -1.0, a * a),
        "float32",
    ),
    "popcount": (
        (_ints,),
        lambda A: lambda i: te.popcount(A[i]),
        _popcount32,
        "int32",
    ),
    "shifts": (
        (_ints, lambda rng, shape: rng.integers(0, 12, shape, dtype="int32")),
        lambda A, B: lambda i: (A[i] >> B[i]) + ((A[i] & 0xFFF) << B[i]),
        lambda a, b: (a >> b) + ((a & 0xFFF) << b),
        "int32",
    ),
    "clz_bitwise_functions": (
        (_ints, _ints),
        lambda A, B: (
            lambda i: (
                tvm.tir.clz(A[i])
                + tvm.tir.bitwise_xor(A[i], B[i])
                + tvm.tir.bitwise_and(tvm.tir.bitwise_not(A[i]), tvm.tir.bitwise_or(B[i], 7))
                + tvm.tir.shift_left(A[i] & 0xFF, 3)
                + tvm.tir.shift_right(B[i], 5)
            )
        ),
        lambda a, b: _clz32(a) + (a ^ b) + (~a & (b | 7)) + ((a & 0xFF) << 3) + (b >> 5),
        "int32",
    ),
    "hyperbolic_exp_log_family": (
        (lambda rng, shape: _floats(rng, shape, -2.0, 2.0),),
        lambda A: (
            lambda i: (
                te.sinh(A[i])
                + te.cosh(A[i])
                + te.asinh(A[i])
                + te.atanh(A[i] * 0.45)
                + te.acosh(te.abs(A[i]) + 1.0)
                + te.exp2(A[i])
                + te.exp10(A[i] * 0.5)
                + te.log2(te.abs(A[i]) + 0.5)
                + te.log10(te.abs(A[i]) + 0.5)
                + te.log1p(te.abs(A[i]))
                + te.nearbyint(A[i] * 4.0)
                + te.trunc(A[i] * 3.0)
            )
        ),
        lambda a: (
            np.sinh(a)
            + np.cosh(a)
            + np.arcsinh(a)
            + np.arctanh(a * np.float32(0.45))
            + np.arccosh(np.abs(a) + 1)
            + np.exp2(a)
            + 10.0 ** (a * np.float32(0.5))
            + np.log2(np.abs(a) + 0.5)
            + np.log10(np.abs(a) + 0.5)
            + np.log1p(np.abs(a))
            + np.rint(a * np.float32(4.0))
            + np.trunc(a * np.float32(3.0))
        ),
        "float32",
    ),
    "hypot_copysign_trig": (
        (_floats, _floats),
        lambda A, B: (
            lambda i: (
                tvm.tir.hypot(A[i], B[i])
                + tvm.tir.copysign(A[i], B[i])
                + te.sin(A[i]) * te.cos(B[i])
                + te.atan(A[i])
                + te.tan(A[i] * 0.4)
                + te.asin(A[i] * 0.3)
                + te.acos(B[i] * 0.3)
            )
        ),
        lambda a, b: (
            np.hypot(a, b)
            + np.copysign(a, b)
            + np.sin(a) * np.cos(b)
            + np.arctan(a)
            + np.tan(a * np.float32(0.4))
            + np.arcsin(a * np.float32(0.3))
            + np.arccos(b * np.float32(0.3))
        ),
        "float32",
    ),
    "isinf_isfinite": (
        (_with_specials,),
        lambda A: (
            lambda i: (
                te.if_then_else(te.isinf(A[i]), 1.0, 0.0)
                + te.if_then_else(te.isfinite(A[i]), 10.0, 0.0)
                + te.if_then_else(te.isnan(A[i]), 100.0, 0.0)
            )
        ),
        lambda a: (
            np.where(np.isinf(a), 1.0, 0.0)
            + np.where(np.isfinite(a), 10.0, 0.0)
            + np.where(np.isnan(a), 100.0, 0.0)
        ),
        "float32",
    ),
    "call_pure_extern_and_call_extern": (
        (_floats, lambda rng, shape: _floats(rng, shape, 0.5, 2.0)),
        lambda A, B: (
            lambda i: (
                tvm.tir.call_pure_extern("float32", "expf", A[i])
                + tvm.tir.call_pure_extern("float32", "powf", B[i], A[i])
                + tvm.tir.call_extern("float32", "fabsf", A[i])
            )
        ),
        lambda a, b: np.exp(a) + np.power(b, a) + np.abs(a),
        "float32",
    ),
    "eq_select": (
        (_small_ints, _small_ints),
        lambda A, B: (
            lambda i: tvm.tir.Select(A[i] == B[i] % 3, A[i] * 10, (B[i] != A[i]).astype("int32"))
        ),
        lambda a, b: np.where(a == np.mod(b, 3), a * 10, (b != a).astype(np.int32)),
        "int32",
    ),
    "floor_and_trunc_division": (
        (_small_ints, lambda rng, shape: rng.choice([-7, -3, 2, 5], shape).astype("int32")),
        lambda A, B: (
            lambda i: (
                A[i] // B[i] * 100
                + A[i] % B[i] * 10
                + te.truncdiv(A[i], B[i])
                + te.truncmod(A[i], B[i])
            )
        ),
        lambda a, b: (
            np.floor_divide(a, b) * 100
            + np.mod(a, b) * 10
            + np.fix(a / b).astype(np.int32)
            + np.fmod(a, b)
        ),
        "int32",
    ),
    "guarded_neighbour": (
        (_floats,),
        # the lazy if_then_else keeps A[i + 1] from being read past the end
        lambda A: lambda i: te.if_then_else(i < N - 1, A[i + 1] - A[i], te.const(0.0, "float32")),
        lambda a: np.append(np.diff(a), np.float32(0.0)),
        "float32",
    ),
}


def _build(name, target):
    gens, body, _, out_dtype = CASES[name]
    ins = [
        te.placeholder((N,), name=f"A{k}", dtype="int32" if out_dtype == "int32" else "float32")
        for k in range(len(gens))
    ]
    out = te.compute((N,), body(*ins), name="out")
    assert out.dtype == out_dtype
    s = te.create_schedule(out.op)
    if target == "llvm":
        _, inner = s[out].split(out.op.axis[0], factor=8)
        s[out].vectorize(inner)
    else:
        bx, tx = s[out].split(out.op.axis[0], factor=64)
        s[out].bind(bx, te.thread_axis("blockIdx.x"))
        s[out].bind(tx, te.thread_axis("threadIdx.x"))
    return tvm.build(s, [*ins, out], target=target), ins, out


@pytest.mark.parametrize("target", ["llvm", CUDA])
@pytest.mark.parametrize("name", list(CASES))
def test_intrinsic_elementwise(rng, name, target):
    gens, _, ref, _ = CASES[name]
    mod, ins, out = _build(name, target)
    inputs = [gen(rng, (N,)) for gen in gens]
    got = empty_like(out)
    (mod if target == "llvm" else mod.emulate)(*inputs, got)
    want = ref(*inputs)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_the_cases_reach_both_branches(rng):
    """A reference that never takes one branch would not test it: check the data does."""
    a = _with_nans(rng, (N,))
    assert 0 < np.isnan(a).sum() < N
    a, b = _small_ints(rng, (N,)), _small_ints(rng, (N,))
    assert 0 < (a == np.mod(b, 3)).sum() < N
    x = _with_specials(rng, (N,))
    for kind in (np.isinf, np.isnan, np.isfinite):
        assert 0 < kind(x).sum() < N
    assert 0 < (_ints(rng, (N,)) < 0).sum() < N  # clz sees both signs
