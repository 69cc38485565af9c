"""How the ONNX selecting operators treat NaN: one place for the rules they share.

TIR's float ``max``/``min`` (``te.max``, ``E.max_``) are C's ``fmax``/``fmin`` on every
path (``llvm.maxnum``, CUDA's ``fmaxf``, the interpreter and the emulator): a NaN operand
is dropped. The ONNX operators want otherwise, and the computes in ``tir/topi`` use these
helpers instead:

- ReduceMax/ReduceMin, MaxPool and GlobalMaxPool give NaN where their window holds one
  (:data:`max_nan`, :data:`min_nan`), as numpy, PyTorch and ONNX's reference
  implementation do. onnxruntime's CPU kernels give NaN only in some positions (the
  result depends on where the NaN sits and on the SIMD path: ``[nan, 1, 2]`` reduces to
  NaN, ``[1, nan, 2]`` to 2); Ember deliberately propagates it everywhere.
- ArgMax/ArgMin point at the value ReduceMax/ReduceMin gives: the first NaN (the last
  with ``select_last_index``) of a row holding one (:func:`same_value`), as numpy's
  argmax/argmin and ONNX's reference implementation; never an index past the axis.
- TopK orders NaN above every number (:func:`before`), as onnxruntime and numpy's sort:
  first with ``largest=1``, last with ``largest=0``; equal values, NaNs included, keep
  their order.
"""

from __future__ import annotations

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import op as tir_op
from ember.tir.te import operation as te
from ember.tir.topi.broadcast import nan_max, nan_min

# reducers that keep a NaN (te.max / te.min, being fmax / fmin, drop it)
max_nan = te.comm_reducer(nan_max, te.min_value, name="max_nan")
min_nan = te.comm_reducer(nan_min, te.max_value, name="min_nan")


def reducer(kind: str):  # noqa: ANN201 - a comm_reducer
    """The NaN-propagating reducer for ``kind`` "max" or "min"."""
    return max_nan if kind == "max" else min_nan


def same_value(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    """``a == b``, with NaN equal to NaN (so a NaN maximum is found in its row)."""
    if not dt.is_float(a.dtype):
        return E.eq(a, b)
    return E.logical_or(E.eq(a, b), E.logical_and(tir_op.isnan(a), tir_op.isnan(b)))


def above(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    """``a > b`` in the total order that puts NaN above +inf (NaN is not above NaN)."""
    if not dt.is_float(a.dtype):
        return a > b
    return E.logical_or(a > b, E.logical_and(tir_op.isnan(a), E.logical_not(tir_op.isnan(b))))


def before(
    va: E.PrimExpr, ia: E.PrimExpr, vb: E.PrimExpr, ib: E.PrimExpr, largest: bool
) -> E.PrimExpr:
    """Whether ``(va, ia)`` comes before ``(vb, ib)`` in TopK's output: the larger (or
    smaller) value first in :func:`above`'s order, the lower position among equals."""
    wins = above(va, vb) if largest else above(vb, va)
    return E.logical_or(wins, E.logical_and(same_value(va, vb), ia < ib))
