"""TVM's ``tvm.contrib.cblas``: ``matmul(lhs, rhs, transa, transb)`` as an extern op that
calls the packed function ``"tvm.contrib.cblas.matmul"``, registered on import.

TVM links a CBLAS library; Ember's function multiplies with numpy, whose ``matmul`` calls
the BLAS numpy was built with (OpenBLAS in the wheels), on the arrays in place. It runs on
the host, from CPU (``llvm``) modules, as any ``call_packed`` function does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember import tir
from ember.errors import ArgumentError
from ember.runtime.registry import get_global_func, register_func
from ember.tir.te import extern

NAME = "tvm.contrib.cblas.matmul"


def _matmul(a: Any, b: Any, c: Any, transa: Any = False, transb: Any = False) -> None:
    """``c = op(a) @ op(b)`` in place, ``op`` transposing when its flag is set."""
    lhs, rhs, out = np.asarray(a), np.asarray(b), np.asarray(c)
    lhs = lhs.T if transa else lhs
    rhs = rhs.T if transb else rhs
    if lhs.ndim != 2 or rhs.ndim != 2 or lhs.shape[1] != rhs.shape[0]:
        raise ArgumentError(f"{NAME}: cannot multiply {lhs.shape} by {rhs.shape}")
    if out.shape != (lhs.shape[0], rhs.shape[1]):
        raise ArgumentError(
            f"{NAME}: output is {out.shape}, the product {lhs.shape[0], rhs.shape[1]}"
        )
    np.matmul(lhs, rhs, out=out)


def matmul(lhs: Any, rhs: Any, transa: bool = False, transb: bool = False, **kwargs: Any) -> Any:
    """TVM's ``cblas.matmul``: the tensor ``op(lhs) @ op(rhs)`` computed by the extern BLAS
    call (a ``te.extern`` stage, which a compute may read as usual)."""
    n = lhs.shape[1] if transa else lhs.shape[0]
    m = rhs.shape[0] if transb else rhs.shape[1]
    return extern(
        (n, m),
        [lhs, rhs],
        lambda ins, outs: tir.call_packed(NAME, ins[0], ins[1], outs[0], transa, transb),
        name="C",
        dtype=lhs.dtype,
        **kwargs,
    )


if get_global_func(NAME, allow_missing=True) is None:
    register_func(NAME, _matmul)

__all__ = ["matmul"]
