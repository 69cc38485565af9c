"""Constant folding at import: evaluate an op whose inputs are all constants, with Ember itself.

The importer calls :func:`evaluate` when every input of a new node is a param, so
shape subgraphs (Shape -> Gather -> Concat -> Reshape) collapse to constants. The
op's own compute is evaluated (never a second numpy implementation): on the
reference interpreter for small tensors, where building native code would cost
more than interpreting it, and as a compiled CPU kernel for large ones: the model
compiler, which sits above the frontend, registers that as the global function
``ember.fold.compiled`` (``ember/__init__.py``); without it everything is interpreted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.frontend.graph import TensorType
from ember.frontend.narrow_dtypes import from_storage, numpy_dtype, storage_dtype, to_storage
from ember.frontend.to_te import op_to_te
from ember.runtime.registry import get_global_func

# Above this many elements (outputs, or inputs in all) a folded op is compiled.
INTERPRET_LIMIT = 4096


def evaluate(
    op: str, attrs: dict[str, Any], arrays: Sequence[np.ndarray], out_types: Sequence[TensorType]
) -> list[np.ndarray]:
    """Run ``op`` on constant ``arrays``; returns one array per output type."""
    if all(t.size == 0 for t in out_types):
        return [np.empty(t.shape, dtype=numpy_dtype(t.dtype)) for t in out_types]
    in_types = [TensorType(tuple(a.shape), str(a.dtype)) for a in arrays]
    work = sum(t.size for t in out_types) + sum(a.size for a in arrays)
    compiled = get_global_func("ember.fold.compiled", allow_missing=True)
    stored = [to_storage(a, t.dtype) for a, t in zip(arrays, in_types)]  # as kernels hold them
    if work > INTERPRET_LIMIT and compiled is not None:
        results = compiled(op, attrs, in_types, stored)
    else:
        results = _interpret(op, attrs, in_types, stored, out_types)
    return [from_storage(r, t.dtype) for r, t in zip(results, out_types)]


def _interpret(
    op: str,
    attrs: dict[str, Any],
    in_types: Sequence[TensorType],
    arrays: Sequence[np.ndarray],
    out_types: Sequence[TensorType],
) -> list[np.ndarray]:
    # start-up cost: tir.interp and schedule lowering (~0.3 s), loaded by the first fold
    from ember.tir import interp
    from ember.tir.schedule.lower import schedule_to_primfunc
    from ember.tir.schedule.schedule import create_schedule

    placeholders, outs = op_to_te(op, attrs, in_types)
    sch = create_schedule([t.op for t in outs])
    func = schedule_to_primfunc(sch, [*placeholders, *outs], f"fold_{op}")
    results = [np.empty(t.shape, dtype=storage_dtype(t.dtype)) for t in out_types]
    interp.run(func, *[np.require(a, requirements="C") for a in arrays], *results)
    return results
