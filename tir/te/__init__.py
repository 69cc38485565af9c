"""Tensor expressions: placeholders, computes, reductions, scans and externs.

Users reach them as ``ember.te`` (``ember/te.py``), which adds the schedule names that
sit above them; the schedule code builds on this package.
"""

from ember.tir import op as _op
from ember.tir.expr import max_ as max_expr
from ember.tir.expr import min_ as min_expr
from ember.tir.op import *  # noqa: F403 - the element-wise functions, as tvm.te has tvm.tir's
from ember.tir.te.extern import ExternOp, extern
from ember.tir.te.operation import (
    comm_reducer,
    compute,
    max,
    max_value,
    min,
    min_value,
    placeholder,
    reduce_axis,
    size_var,
    sum,
    thread_axis,
    var,
)
from ember.tir.te.scan import ScanOp, scan
from ember.tir.te.tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor
from ember.tir.te.tensor_intrin import decl_tensor_intrin

__all__ = [
    *_op.__all__,
    "ComputeOp",
    "ExternOp",
    "IterVar",
    "Operation",
    "PlaceholderOp",
    "ScanOp",
    "Tensor",
    "comm_reducer",
    "compute",
    "decl_tensor_intrin",
    "extern",
    "max",
    "max_expr",
    "max_value",
    "min",
    "min_expr",
    "min_value",
    "placeholder",
    "reduce_axis",
    "scan",
    "size_var",
    "sum",
    "thread_axis",
    "var",
]
