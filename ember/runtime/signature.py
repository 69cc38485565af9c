"""What a compiled function expects of its arguments, and the checks made before every call.

A :class:`FunctionSignature` is built by a code generator from a PrimFunc (with
:func:`ember.tir.signature.signature_for`; this module is plain data and never sees the IR) and
travels with the compiled code (as JSON inside an exported library), so a
module loaded in a fresh process checks calls exactly as the one that was
built. :func:`check_arguments` turns the Python arguments into arrays and
rejects, with an ``ArgumentError`` naming the function and the parameter, any
call native code must not see: wrong arity, a non-array, a wrong shape or
dtype, a non-contiguous or misaligned array, a read-only output, or an output
overlapping another argument (compiled code assumes outputs alias nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.runtime import dtype as dt
from ember.runtime.sizes import bind_sizes


@dataclass(frozen=True)
class ParamSpec:
    """One argument: an array (``shape`` of ints and size texts, see :mod:`.sizes`) or,
    with ``scalar``, an integer passed by value that must be at least ``minimum``."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str
    written: bool  # the function stores into it
    scalar: bool = False
    minimum: int | None = None

    def describe(self) -> str:
        if self.scalar:
            return self.dtype
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class FunctionSignature:
    """Parameters in call order; ``errors[k-1]`` is the message of status code ``k``.

    ``symbol`` is the native function's name when it differs from ``name``
    (a name that a C library function already has is renamed).
    """

    name: str
    params: tuple[ParamSpec, ...]
    errors: tuple[str, ...] = ()
    symbol: str = ""
    # scalars the native function takes after the data pointers: name -> dtype, in order
    size_vars: tuple[tuple[str, str], ...] = ()
    positive: tuple[str, ...] = ()  # sizes used as divisors (symbolic split amounts): >= 1

    @property
    def arrays(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if not p.scalar)

    @property
    def native_symbol(self) -> str:
        return self.symbol or self.name

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": [
                {
                    "name": p.name,
                    "shape": list(p.shape),
                    "dtype": p.dtype,
                    "written": p.written,
                    "scalar": p.scalar,
                    "minimum": p.minimum,
                }
                for p in self.params
            ],
            "errors": list(self.errors),
            "symbol": self.native_symbol,
            "size_vars": [list(v) for v in self.size_vars],
            "positive": list(self.positive),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> FunctionSignature:
        params = tuple(
            ParamSpec(
                p["name"],
                tuple(s if isinstance(s, str) else int(s) for s in p["shape"]),
                p["dtype"],
                bool(p["written"]),
                bool(p.get("scalar", False)),
                p.get("minimum"),
            )
            for p in data["params"]
        )
        errors = tuple(data.get("errors", ()))
        size_vars = tuple((str(n), str(t)) for n, t in data.get("size_vars", ()))
        positive = tuple(str(n) for n in data.get("positive", ()))
        return FunctionSignature(
            data["name"], params, errors, data.get("symbol", ""), size_vars, positive
        )


def _as_array(sig: FunctionSignature, p: ParamSpec, x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if _is_float_value(p, x):
        return np.array(x, dtype=dt.numpy_dtype(p.dtype))
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except Exception as e:  # noqa: BLE001 - a producer's __dlpack__ may raise anything
            raise ArgumentError(
                f"{sig.name}: argument '{p.name}' ({type(x).__name__}) cannot be viewed as a CPU "
                f"array through DLPack: {e}"
            ) from e
    raise ArgumentError(
        f"{sig.name}: argument '{p.name}' must be a numpy array (or support DLPack), "
        f"got {type(x).__name__}"
    )


def _is_float_value(p: ParamSpec, x: Any) -> bool:
    """A Python number passed for a float scalar argument (a 0-d float input: how a
    ``te.var`` of a float dtype is passed, TVM's ``f(a, b, d, 10.0)``)."""
    return (
        p.shape == ()
        and not p.written
        and dt.is_float(p.dtype)
        and isinstance(x, (int, float, np.integer, np.floating))
        and not isinstance(x, bool)
    )


def _expected_dtype(p: ParamSpec) -> np.dtype:
    return dt.numpy_dtype(p.dtype)


def dtype_text(d: np.dtype) -> str:
    """A dtype's name, with its byte order when that is what differs (``>f4`` is
    "float32 (big-endian)", which a native float32 parameter does not accept)."""
    if d.byteorder in ("=", "|") or d.isnative:
        return d.name
    return f"{d.name} ({'big' if d.byteorder == '>' else 'little'}-endian)"


def _byte_order_fix(want: np.dtype, got: np.dtype) -> str:
    if got.isnative or got.newbyteorder("=") != want:
        return ""
    return "; convert it with arr.astype(arr.dtype.newbyteorder('='))"


def _hint(p: ParamSpec) -> str:
    if p.dtype == "bfloat16":
        return " (bfloat16 data is passed as its uint16 bits)"
    if dt.is_sub_byte_int(p.dtype):
        return f" ({p.dtype} data is passed one value per byte, not packed)"
    return ""


def _check_4bit_range(where: str, p: ParamSpec, arr: np.ndarray) -> None:
    """Refuse an int4/uint4 input holding a byte outside -8..7 / 0..15.

    Only arrays the function reads without writing are checked: an output's old contents
    may be anything (``np.empty``), and compiled code wraps whatever byte it loads.
    """
    if p.written or arr.size == 0 or not dt.is_sub_byte_int(p.dtype):
        return
    lo, hi = dt.int_range(p.dtype)
    least, greatest = int(arr.min()), int(arr.max())
    if least < lo or greatest > hi:
        bad = least if least < lo else greatest
        raise ArgumentError(
            f"{where} is {p.dtype} and must hold values in {lo}..{hi}, got {bad}; "
            f"wrap or clip the data first"
        )


def _check_one(sig: FunctionSignature, p: ParamSpec, x: Any) -> np.ndarray:
    arr = _as_array(sig, p, x)
    where = f"{sig.name}: argument '{p.name}'"
    if p.dtype == "bfloat16" and arr.dtype.name == "bfloat16" and arr.dtype.itemsize == 2:
        arr = arr.view(np.uint16)  # ml_dtypes' bfloat16 has the same bits
    want = _expected_dtype(p)
    if arr.dtype != want:
        raise ArgumentError(
            f"{where} expects dtype {dtype_text(want)}{_hint(p)}, got {dtype_text(arr.dtype)}"
            + _byte_order_fix(want, arr.dtype)
        )
    if arr.ndim != len(p.shape) or any(
        isinstance(want, int) and want != have for want, have in zip(p.shape, arr.shape)
    ):
        shape = "(" + ", ".join(map(str, p.shape)) + ("," if len(p.shape) == 1 else "") + ")"
        raise ArgumentError(f"{where} expects shape {shape}, got {tuple(arr.shape)}")
    if not arr.flags.c_contiguous:
        raise ArgumentError(
            f"{where} must be C-contiguous (row-major without gaps); pass np.ascontiguousarray(x)"
        )
    if not arr.flags.aligned:
        raise ArgumentError(f"{where} is not aligned to its element size; pass a copy")
    if p.written and not arr.flags.writeable:
        raise ArgumentError(f"{where} is written by the function but the array is read-only")
    _check_4bit_range(where, p, arr)
    return arr


def _check_scalar(sig: FunctionSignature, p: ParamSpec, x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise ArgumentError(
            f"{sig.name}: argument '{p.name}' is a {p.dtype} scalar; pass a Python int, "
            f"got {type(x).__name__}"
        )
    if p.minimum is not None and int(x) < p.minimum:
        raise ArgumentError(
            f"{sig.name}: argument '{p.name}' must be at least {p.minimum} (it is a split "
            f"factor or part count), got {int(x)}"
        )
    return int(x)


def check_call(sig: FunctionSignature, args: Sequence[Any]) -> tuple[list[Any], list[int]]:
    """The checked arguments (arrays, and ints for scalar parameters) and the values of
    ``sig.size_vars`` they define, or an ``ArgumentError`` saying what is wrong."""
    if len(args) != len(sig.params):
        names = ", ".join(p.name for p in sig.params)
        raise ArgumentError(
            f"{sig.name}: expected {len(sig.params)} arguments ({names}), got {len(args)}"
        )
    values = [
        _check_scalar(sig, p, x) if p.scalar else _check_one(sig, p, x)
        for p, x in zip(sig.params, args)
    ]
    sizes = call_sizes(sig, values)
    arrays = [(p, a) for p, a in zip(sig.params, values) if not p.scalar]
    for i, (p, a) in enumerate(arrays):
        if not p.written or a.size == 0:
            continue
        for j, (q, b) in enumerate(arrays):
            if j != i and b.size and np.may_share_memory(a, b):
                raise ArgumentError(
                    f"{sig.name}: output '{p.name}' overlaps argument '{q.name}'; compiled code "
                    "assumes outputs share no memory with other arguments, pass a separate array"
                )
    return values, sizes


def call_sizes(sig: FunctionSignature, values: Sequence[Any]) -> list[int]:
    """The values of ``sig.size_vars`` that checked arguments (arrays or anything with a
    ``shape``; ints for scalars) define, consistent and within range, else ArgumentError."""
    if not sig.size_vars:
        return []
    names = [n for n, _ in sig.size_vars]
    sizes = bind_sizes(sig.name, sig.params, values, names, dict(sig.size_vars))
    for n, v in zip(names, sizes):
        if n in sig.positive and v < 1:
            raise ArgumentError(
                f"{sig.name}: {n} = {v}, but it is a split factor or part count and must "
                "be at least 1"
            )
    return sizes


def check_arguments(sig: FunctionSignature, args: Sequence[Any]) -> list[Any]:
    """The checked arguments: arrays, and ints for scalar parameters (see :func:`check_call`)."""
    return check_call(sig, args)[0]


__all__ = ["FunctionSignature", "ParamSpec", "call_sizes", "check_arguments", "check_call"]
