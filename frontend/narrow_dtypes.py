"""Graph element types that kernels hold in another type: bfloat16, int4/uint4, float8,
float4 and int2/uint2.

A graph names them as numpy does with ``ml_dtypes`` installed (``"bfloat16"``,
``"float8_e4m3fn"``, ``"int2"``...), which is what ONNX's ``numpy_helper`` gives for such
tensors: the users' arrays, ONNX initializers and the graph's params are of those types.
A kernel cannot be: it holds each in its *kernel dtype* (:func:`kernel_dtype`), one value
per byte (two for bfloat16), and the model's memory holds the matching numpy *storage*
(:func:`storage_dtype`). The executor converts at the model's edge only
(:func:`to_storage` for inputs and params, :func:`from_storage` for outputs): a float's
bits are viewed, not copied; a 4- or 2-bit integer's value is converted, since
ml_dtypes keeps it in a byte's low bits and a kernel sign-extends it.

bfloat16 is a kernel dtype itself (TIR computes with it, stored as ``uint16`` bits). The
others (:data:`BIT_STORED`) mean something their kernel dtype (``uint8``, ``int8``) does
not: only conversions look inside them (``tir/topi/minifloat.py``), so an op that
computes on their elements refuses them (:func:`check_op_takes`), and only ops that move
elements (:data:`MOVES_ELEMENTS`) or convert them take them: ONNX allows them in little
else. ``ml_dtypes`` (installed with onnx)
is imported only when one of these types is met.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError, UnsupportedOperatorError
from ember.frontend.string_tensors import STRING, STRING_NUMPY
from ember.runtime import dtype as rdt

# graph dtype -> the kernel dtype holding it
KERNEL_DTYPES: dict[str, str] = {"bfloat16": "bfloat16", **rdt.HELD_AS_BYTES}
NARROW_DTYPES = tuple(KERNEL_DTYPES)
BIT_STORED = frozenset(rdt.HELD_AS_BYTES)
_VIEWED = frozenset({"bfloat16", *(d for d in rdt.HELD_AS_BYTES if d.startswith("float"))})

# Ops that only move, copy or pick elements, and the ops that convert BIT_STORED types
# (they read which type from their attributes): the only ones that take those types.
MOVES_ELEMENTS = frozenset(
    {
        "concat", "copy", "expand", "gather", "gather_elements", "gather_nd", "if",
        "layout_transform", "loop", "reshape", "reverse_sequence", "scan", "slice",
        "tile", "transpose", "where",
    }
)  # fmt: skip
CONVERTS = frozenset({"cast_narrow", "quantize_linear", "dequantize_linear"})


def kernel_dtype(dtype: str) -> str:
    """The dtype a kernel's tensor of graph dtype ``dtype`` has."""
    return KERNEL_DTYPES.get(dtype, dtype)


def storage_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a model's buffers for values of graph dtype ``dtype``."""
    if dtype == STRING:  # a constant's array only: no kernel holds strings
        return STRING_NUMPY
    return rdt.numpy_dtype(KERNEL_DTYPES.get(dtype, dtype))


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a user's array of graph dtype ``dtype`` (ml_dtypes' for a narrow
    type), as a model's inputs must have and its outputs have."""
    if dtype == STRING:
        return STRING_NUMPY
    if dtype not in KERNEL_DTYPES:
        return np.dtype(dtype)
    return np.dtype(getattr(_ml_dtypes(dtype), dtype))


def _ml_dtypes(dtype: str) -> Any:
    try:
        # optional dependency: ml_dtypes (installed with onnx)
        import ml_dtypes
    except ImportError as e:
        raise ArgumentError(
            f"{dtype} arrays are ml_dtypes arrays, and ml_dtypes is not installed: "
            "pip install ember[onnx]"
        ) from e
    return ml_dtypes


def to_storage(array: np.ndarray, dtype: str) -> np.ndarray:
    """``array`` (of graph dtype ``dtype``'s numpy type) as its kernels hold it; the same
    array for a type that is not narrow, a view for a float."""
    if dtype not in KERNEL_DTYPES:
        return array
    store = storage_dtype(dtype)
    return array.view(store) if dtype in _VIEWED else array.astype(store)


def from_storage(array: np.ndarray, dtype: str) -> np.ndarray:
    """The user's array of graph dtype ``dtype`` from its storage (the inverse of
    :func:`to_storage`)."""
    if dtype not in KERNEL_DTYPES:
        return array
    want = numpy_dtype(dtype)
    return array.view(want) if dtype in _VIEWED else array.astype(want)


def check_op_takes(op: str, dtypes: Sequence[str]) -> None:
    """UnsupportedOperatorError when ``op`` would compute on a BIT_STORED type (its kernel
    would read a float8's bits as an integer)."""
    if op in MOVES_ELEMENTS or op in CONVERTS:
        return
    for d in dtypes:
        if d in BIT_STORED:
            raise UnsupportedOperatorError(
                f"op '{op}' on {d} data is not supported: Ember converts {d} (Cast, "
                "QuantizeLinear, DequantizeLinear) and moves it (Reshape, Transpose, Concat, "
                "Slice, Gather...), but computes on it in no other op; cast it first"
            )
