"""Data types as short strings (``"float32"``, ``"int8"``, ``"float32x8"``).

Every expression node carries one of these. A string is what users type, what
printers show and what tables key on, so Ember keeps dtypes as strings and puts
the few questions asked of them (lanes, element type, bit width, class) here.
A vector type is its element type with ``x<lanes>`` appended.

The module lives in the runtime, the bottom layer, as TVM's ``DataType`` does: compiled
modules check argument dtypes with it at call time and ``ember.nd`` allocates with it,
and the runtime may not import the IR. The IR reads it as ``ember.tir.dtype``.

``int4`` and ``uint4`` are TVM's 4-bit integers: every operation, cast and constant fold
wraps to 4 bits in two's complement (int4: -8..7, uint4: 0..15), on every path — the
simplifier, the reference interpreter, LLVM (``i4`` registers), the printed CUDA (C
``char`` arithmetic wrapped by ``ember_wrap_int4``/``ember_wrap_uint4``) and the SIMT
emulator. Where Ember deliberately differs from TVM:

- storage is one value per byte, an ``int8`` numpy array for int4 (sign-extended) and
  ``uint8`` for uint4 (zero-extended); TVM's NDArray and its LLVM buffers pack two
  values per byte. Arrays stay indexable, and a byte is never shared by two threads.
- a compiled function refuses an input array holding a value outside the type's range
  (``ArgumentError``); outputs and device-resident arrays are not scanned, and a byte
  out of range reads as its low 4 bits wherever it is loaded.
- a float converts through a 32-bit integer and wraps (``int4(9.7)`` is -7), where
  TVM's ``fptosi`` to ``i4`` leaves out-of-range values undefined; dividing -8 by -1
  gives -8 (8 wrapped), where LLVM's ``sdiv i4`` is undefined.
- ``popcount``/``clz`` of a 4-bit value are refused (cast to int8/uint8 first).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ember.errors import ArgumentError

SCALAR_DTYPES: tuple[str, ...] = (
    "bool",
    "int4",
    "uint4",
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
    "int4": 4,
    "uint4": 4,
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


# The 4-bit integers: values -8..7 and 0..15, held one per byte (see :func:`numpy_dtype`).
SUB_BYTE_INTS = ("int4", "uint4")

# ONNX element types a model's graph may carry (by ml_dtypes' names) that no kernel
# computes in, and the kernel dtype each is held in, one value per byte: float8 and float4
# as their bits, 4- and 2-bit integers as their values. Conversions look inside them
# (``tir/topi/minifloat.py``); a model converts them at its edge (``frontend/narrow_dtypes.py``).
HELD_AS_BYTES: dict[str, str] = {
    "float8_e4m3fn": "uint8",
    "float8_e4m3fnuz": "uint8",
    "float8_e5m2": "uint8",
    "float8_e5m2fnuz": "uint8",
    "float8_e8m0fnu": "uint8",
    "float4_e2m1fn": "uint8",
    "int4": "int8",
    "uint4": "uint8",
    "int2": "int8",
    "uint2": "uint8",
}


# The dtype queries below are cached: passes and code generators ask them of every node.
@cache
def split_lanes(dtype: str) -> tuple[str, int]:
    """``"float32x8"`` -> ``("float32", 8)``; a scalar has one lane."""
    if "x" in dtype:
        base, _, lanes = dtype.rpartition("x")
        if base in _BITS and lanes.isdigit():
            return base, int(lanes)
    return dtype, 1


@cache
def element_of(dtype: str) -> str:
    """The scalar type of a (possibly vector) dtype: ``"float32x4"`` -> ``"float32"``."""
    return split_lanes(dtype)[0]


@cache
def lanes_of(dtype: str) -> int:
    """How many lanes a dtype has (1 for scalars); backends size vector registers by it."""
    return split_lanes(dtype)[1]


def with_lanes(dtype: str, lanes: int) -> str:
    """``dtype``'s element type with ``lanes`` lanes, as vectorization rewrites loads and ops."""
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


@cache
def bits_of(dtype: str) -> int:
    """Width in bits of ``dtype``'s element type, for wrapping, promotion and storage sizes."""
    return _BITS[element_of(dtype)]


def bytes_of(dtype: str) -> int:
    """Storage size of one element (bool, int4 and uint4 are stored as one byte each)."""
    return max(1, _BITS[element_of(dtype)] // 8) * lanes_of(dtype)


@cache
def is_float(dtype: str) -> bool:
    """Whether arithmetic on ``dtype`` is floating point (IEEE or bfloat16), not integer."""
    return element_of(dtype) in ("float16", "bfloat16", "float32", "float64")


@cache
def is_int(dtype: str) -> bool:
    """Signed or unsigned integer (bool excluded)."""
    return element_of(dtype).startswith(("int", "uint"))


@cache
def is_uint(dtype: str) -> bool:
    """Whether ``dtype`` is unsigned: picks logical shifts, unsigned compares and zero-extension."""
    return element_of(dtype).startswith("uint")


@cache
def is_bool(dtype: str) -> bool:
    """Whether ``dtype`` is the 1-bit truth type that comparisons and selects produce."""
    return element_of(dtype) == "bool"


def is_sub_byte_int(dtype: str) -> bool:
    """int4 or uint4 (any lanes): integers narrower than their one-byte storage."""
    return element_of(dtype) in SUB_BYTE_INTS


def int_range(dtype: str) -> tuple[int, int]:
    """The least and greatest value of integer ``dtype`` (int4: -8, 7; uint4: 0, 15)."""
    bits = bits_of(dtype)
    if is_uint(dtype):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy storage type. bfloat16 has no numpy type and is stored as uint16 bits.

    int4 and uint4 are stored one value per byte, as ``int8`` (sign-extended) and
    ``uint8`` (zero-extended). TVM packs two 4-bit values into each byte of an NDArray;
    Ember deliberately does not, so an int4 tensor is an ordinary numpy array whose
    elements are indexable and whose values read as themselves.
    """
    base = element_of(dtype)
    if base == "bfloat16":
        return np.dtype("uint16")
    if base in SUB_BYTE_INTS:
        return np.dtype("int8" if base == "int4" else "uint8")
    if base == "handle":
        return np.dtype("uint64")
    return np.dtype(base)


def from_numpy(dtype: np.dtype) -> str:
    """Ember's dtype name for a numpy dtype; TIR names types as numpy does."""
    return np.dtype(dtype).name


__all__ = [
    "ALIASES",
    "HELD_AS_BYTES",
    "SCALAR_DTYPES",
    "SUB_BYTE_INTS",
    "bits_of",
    "bytes_of",
    "check_dtype",
    "element_of",
    "from_numpy",
    "int_range",
    "is_bool",
    "is_float",
    "is_int",
    "is_sub_byte_int",
    "is_uint",
    "lanes_of",
    "numpy_dtype",
    "split_lanes",
    "with_lanes",
]
