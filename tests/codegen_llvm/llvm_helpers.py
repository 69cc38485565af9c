"""Hand-built flattened PrimFuncs for the LLVM backend tests, and numpy-side helpers.

The tests write IR directly with the node classes (the form ``flatten_buffers``
hands the backend: one index per access, 1-D parameters) so they test the code
generator alone. ``map_func`` builds ``out[i] = fn(in0[i], in1[i], ...)`` with
an optional vector body of ``lanes`` lanes plus a scalar tail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ember.codegen_llvm.build import build_llvm
from ember.codegen_llvm.module import LLVMModule
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
ALL_DTYPES = ("bool", *INTS, *FLOATS)

TOL = {
    "float16": (2e-3, 2e-3),
    "bfloat16": (1e-2, 1e-2),
    "float32": (2e-6, 2e-6),
    "float64": (1e-13, 1e-13),
}


def param(name: str, shape: Sequence[int], dtype: str = "float32") -> Buffer:
    return decl_buffer(tuple(shape), dtype, name)


def loop(
    extent: int | E.PrimExpr,
    body: Callable[[E.Var], S.Stmt],
    kind: S.ForKind = S.ForKind.SERIAL,
    name: str = "i",
    start: int = 0,
    dtype: str = "int32",
) -> S.For:
    var = E.Var(name, dtype)
    return S.For(var, E.const(start, dtype), E.convert(extent, dtype), kind, body(var))


def load(buf: Buffer, index: E.PrimExpr, lanes: int = 1) -> E.BufferLoad:
    return E.BufferLoad(dt.with_lanes(buf.dtype, lanes), buf, (index,))


def store(buf: Buffer, index: E.PrimExpr, value: E.PrimExpr) -> S.BufferStore:
    return S.BufferStore(buf, value, (index,))


def ramp(base: E.PrimExpr | int, lanes: int, stride: int = 1) -> E.Ramp:
    base = E.convert(base, "int32")
    return E.Ramp(dt.with_lanes(base.dtype, lanes), base, E.const(stride, base.dtype), lanes)


def map_func(
    name: str,
    in_dtypes: Sequence[str],
    out_dtype: str,
    fn: Callable[..., E.PrimExpr],
    n: int,
    lanes: int = 1,
    attrs: tuple = (),
) -> S.PrimFunc:
    """``out[i] = fn(*ins[i])``: vector body of ``lanes`` lanes, then a scalar tail."""
    ins = [param(f"x{k}", (n,), d) for k, d in enumerate(in_dtypes)]
    out = param("out", (n,), out_dtype)
    stmts = []
    main = n // lanes if lanes > 1 else 0
    if main:

        def vec_body(io: E.Var) -> S.Stmt:
            idx = ramp(io * lanes, lanes)
            return store(out, idx, fn(*(load(b, idx, lanes) for b in ins)))

        stmts.append(loop(main, vec_body, name="io"))
    done = main * lanes
    if done < n:
        stmts.append(
            loop(n - done, lambda i: store(out, i, fn(*(load(b, i) for b in ins))), start=done)
        )
    return S.PrimFunc(name, (*ins, out), S.seq(*stmts), attrs)


def build(*funcs: S.PrimFunc, target: str = "llvm") -> LLVMModule:
    return build_llvm(list(funcs), target)


def rand(
    shape: Sequence[int] | int,
    dtype: str,
    rng: np.random.Generator,
    low: float = -4.0,
    high: float = 4.0,
) -> np.ndarray:
    """Random data of ``dtype`` (bfloat16: its uint16 bits), never all zeros."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype == "bfloat16":
        return to_bf16(rng.uniform(low, high, size=shape).astype(np.float32))
    if dt.is_float(dtype):
        return rng.uniform(low, high, size=shape).astype(dtype)
    info = np.iinfo(dtype)
    lo, hi = max(info.min, int(low * 25)), min(info.max, int(high * 25))
    if dt.is_uint(dtype):
        lo = 0
    return rng.integers(lo, hi + 1, size=shape, dtype=np.int64).astype(dtype)


def sentinel(shape: Sequence[int] | int, dtype: str) -> np.ndarray:
    """An output array pre-filled with a value no correct result equals by accident."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype == "bfloat16":
        return np.full(shape, 0x7FC1, dtype=np.uint16)
    if dt.is_float(dtype):
        return np.full(shape, np.nan, dtype=dtype)
    if dtype == "bool":
        return np.zeros(shape, dtype=bool)
    return np.full(shape, 77, dtype=dtype)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (NaN stays NaN)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def as_float(x: np.ndarray, dtype: str) -> np.ndarray:
    """The numeric value of data of ``dtype`` (bfloat16 bits decoded) as float64."""
    return (from_bf16(x) if dtype == "bfloat16" else x).astype(np.float64)


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, scale: float = 1.0) -> None:
    if dt.is_float(dtype):
        rtol, atol = TOL[dt.element_of(dtype)]
        np.testing.assert_allclose(
            as_float(got, dtype), np.asarray(want, np.float64), rtol=rtol * scale, atol=atol * scale
        )
    else:
        np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype))
