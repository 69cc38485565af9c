"""Data types as short strings (``"float32"``, ``"int8"``, ``"float32x8"``), for the IR.

The helpers live in :mod:`ember.runtime.dtype` (the bottom layer, since compiled modules
check argument dtypes with them at call time); the IR and everything above it keep
reading them here, under the name they always had.
"""

from __future__ import annotations

from ember.runtime.dtype import (
    ALIASES,
    SCALAR_DTYPES,
    SUB_BYTE_INTS,
    bits_of,
    bytes_of,
    check_dtype,
    element_of,
    from_numpy,
    int_range,
    is_bool,
    is_float,
    is_int,
    is_sub_byte_int,
    is_uint,
    lanes_of,
    numpy_dtype,
    split_lanes,
    with_lanes,
)

__all__ = [
    "ALIASES",
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
