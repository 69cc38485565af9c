"""One helper to check a tensor-expression function against numpy on every executor.

``check(sch, args, reference, inputs)`` lowers the schedule, runs the TIR on the
reference interpreter and the LLVM build, and compares both with ``reference``
(a numpy function of the inputs) using dtype-aware tolerances. Inputs are
random, never zeros, so an unwritten output element cannot pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ember
from ember.tir import dtype as dt

TOLERANCE = {
    "float16": (2e-2, 2e-2),
    "bfloat16": (3e-2, 3e-2),
    "float32": (2e-4, 2e-4),
    "float64": (1e-9, 1e-9),
}


def random_array(
    shape: Sequence[int], dtype: str, rng: np.random.Generator, low: float = -1.0, high: float = 1.0
) -> np.ndarray:
    if dt.is_float(dtype) and dtype != "bfloat16":
        return rng.uniform(low, high, size=tuple(shape)).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=tuple(shape)).astype(bool)
    if dt.is_int(dtype):
        return rng.integers(-8 if not dt.is_uint(dtype) else 0, 9, size=tuple(shape)).astype(dtype)
    raise ValueError(dtype)


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, what: str = "") -> None:
    rtol, atol = TOLERANCE.get(dtype, (0, 0))
    np.testing.assert_allclose(
        got.astype(np.float64) if dt.is_float(dtype) else got,
        np.asarray(want).astype(got.dtype).astype(np.float64)
        if dt.is_float(dtype)
        else np.asarray(want).astype(got.dtype),
        rtol=rtol,
        atol=atol,
        err_msg=what,
    )


def check(
    sch: Any,
    args: Sequence[Any],
    reference: Callable[..., np.ndarray],
    rng: np.random.Generator,
    executors: Sequence[str] | None = None,
    n_inputs: int | None = None,
    **build_kwargs: Any,
) -> None:
    """Compare every executor with ``reference``.

    The first ``n_inputs`` args (default: all but the last) are inputs, the rest outputs.
    """
    if executors is None:
        executors = os.environ.get("EMBER_TEST_EXECUTORS", "interp,llvm").split(",")
    shapes = [tuple(int(s.value) for s in t.shape) for t in args]
    n_in = len(args) - 1 if n_inputs is None else n_inputs
    inputs = [random_array(shapes[i], args[i].dtype, rng) for i in range(n_in)]
    want = reference(*inputs)
    wants = want if isinstance(want, tuple) else (want,)
    for ex in executors:
        outs = [
            np.full(shapes[i], np.nan if dt.is_float(args[i].dtype) else 77, dtype=args[i].dtype)
            for i in range(n_in, len(args))
        ]
        if ex == "interp":
            from ember.tir.interp import run

            run(ember.lower(sch, args, **build_kwargs), *inputs, *outs)
        elif ex == "llvm":
            mod = ember.build(sch, args, target="llvm", **build_kwargs)
            mod(*inputs, *outs)
        else:
            raise ValueError(ex)
        for o, w in zip(outs, wants):
            assert_close(o, w, o.dtype.name, what=f"executor {ex}")
