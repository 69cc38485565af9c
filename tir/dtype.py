"""Data types as short strings (``"float32"``, ``"int8"``, ``"float32x8"``).

Every expression node carries one of these. A string is what users type, what
printers show and what tables key on, so Ember keeps dtypes as strings and puts
the few questions asked of them (lanes, element type, bit width, class) here.
A vector type is its element type with ``x<lanes>`` appended.
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError

SCALAR_DTYPES: tuple[str, ...] = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)

_BITS = {
    "bool": 1,
    "int8": 8,
    "int16": 16,
    "int32": 32,
    "int64": 64,
    "uint8": 8,
    "uint16": 16,
    "uint32": 32,
    "uint64": 64,
    "float16": 16,
    "bfloat16": 16,
    "float32": 32,
    "float64": 64,
    "handle": 64,
}


def split_lanes(dtype: str) -> tuple[str, int]:
    """``"float32x8"`` -> ``("float32", 8)``; a scalar has one lane."""
    if "x" in dtype:
        base, _, lanes = dtype.rpartition("x")
        if base in _BITS and lanes.isdigit():
            return base, int(lanes)
    return dtype, 1


def element_of(dtype: str) -> str:
    return split_lanes(dtype)[0]


def lanes_of(dtype: str) -> int:
    return split_lanes(dtype)[1]


def with_lanes(dtype: str, lanes: int) -> str:
    base = element_of(dtype)
    return base if lanes == 1 else f"{base}x{lanes}"


# TVM's short names (``DataType("float")`` is float32), with or without lanes.
ALIASES = {"float": "float32", "int": "int32", "uint": "uint32"}


def check_dtype(dtype: str) -> str:
    """Return ``dtype`` normalised, or raise naming the accepted types."""
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        dtype = np.dtype(dtype).name
    if not isinstance(dtype, str):
        raise ArgumentError(f"dtype must be a string such as 'float32', got {dtype!r}")
    head, _, tail = dtype.partition("x")
    if head in ALIASES and (not tail or tail.isdigit()):
        dtype = ALIASES[head] + (f"x{tail}" if tail else "")
    base, lanes = split_lanes(dtype)
    if base not in _BITS or lanes < 1:
        raise ArgumentError(f"unknown dtype {dtype!r}; expected one of {', '.join(SCALAR_DTYPES)}")
    return dtype


def bits_of(dtype: str) -> int:
    return _BITS[element_of(dtype)]


def bytes_of(dtype: str) -> int:
    """Storage size of one element (bool is stored as one byte)."""
    return max(1, _BITS[element_of(dtype)] // 8) * lanes_of(dtype)


def is_float(dtype: str) -> bool:
    return element_of(dtype) in ("float16", "bfloat16", "float32", "float64")


def is_int(dtype: str) -> bool:
    """Signed or unsigned integer (bool excluded)."""
    return element_of(dtype).startswith(("int", "uint"))


def is_uint(dtype: str) -> bool:
    return element_of(dtype).startswith("uint")


def is_bool(dtype: str) -> bool:
    return element_of(dtype) == "bool"


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy storage type. bfloat16 has no numpy type and is stored as uint16 bits."""
    base = element_of(dtype)
    if base == "bfloat16":
        return np.dtype("uint16")
    if base == "handle":
        return np.dtype("uint64")
    return np.dtype(base)


def from_numpy(dtype: np.dtype) -> str:
    return np.dtype(dtype).name
