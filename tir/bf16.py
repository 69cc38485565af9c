"""bfloat16 as numpy sees it: 16-bit patterns in ``uint16`` arrays, values in float32.

numpy has no bfloat16, so Ember stores bfloat16 tensors as their raw bits in
``np.uint16`` arrays (see :func:`ember.tir.dtype.numpy_dtype`) and computes on them
in float32. These helpers convert between the two; the reference interpreter,
the code generators' tests and users preparing inputs share them so that every
executor rounds the same way: to nearest, ties to even, NaN kept a quiet NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_QUIET_NAN_BITS = np.uint32(0x7FC0)


def bf16_to_float32(bits: Any) -> np.ndarray:
    """Widen bfloat16 bit patterns (``uint16``) to float32 values; exact."""
    u16 = np.asarray(bits, dtype=np.uint16)
    return (u16.astype(np.uint32) << np.uint32(16)).view(np.float32)


def float32_to_bf16(values: Any) -> np.ndarray:
    """Round float32 values to bfloat16 bit patterns (``uint16``), ties to even."""
    f32 = np.asarray(values, dtype=np.float32)
    u32 = f32.view(np.uint32)
    lsb = (u32 >> np.uint32(16)) & np.uint32(1)
    rounded = (u32 + np.uint32(0x7FFF) + lsb) >> np.uint32(16)
    sign = (u32 >> np.uint32(16)) & np.uint32(0x8000)
    out = np.where(np.isnan(f32), sign | _QUIET_NAN_BITS, rounded)
    return out.astype(np.uint16)


def round_to_bf16(values: Any) -> np.ndarray:
    """Float32 values rounded to the nearest bfloat16, still as float32."""
    return bf16_to_float32(float32_to_bf16(values))


__all__ = ["bf16_to_float32", "float32_to_bf16", "round_to_bf16"]
