"""What every TVM-era script test needs: random inputs, NaN-filled outputs, and the
two places a GPU schedule runs without a GPU (the SIMT emulator and, for a CPU
schedule of the same compute, LLVM)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import ember as tvm

CUDA = "cuda -arch=sm_80"


def empty_like(tensor: Any, shape: Sequence[int] | None = None) -> np.ndarray:
    """An output buffer full of NaN (or 77 for integers): an unwritten element shows."""
    shape = tuple(int(d.value) for d in tensor.shape) if shape is None else tuple(shape)
    dtype = np.dtype(tensor.dtype)
    fill = np.nan if dtype.kind == "f" else 77
    return np.full(shape, fill, dtype=dtype)


def run_llvm(s: Any, args: Sequence[Any], *arrays: np.ndarray) -> None:
    tvm.build(s, list(args), target="llvm")(*arrays)


def run_emulated(s: Any, args: Sequence[Any], *arrays: np.ndarray) -> Any:
    """Build for CUDA (NVRTC compiles it when installed) and run it in the emulator."""
    mod = tvm.build(s, list(args), target=CUDA)
    mod.emulate(*arrays)
    return mod
