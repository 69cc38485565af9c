"""``ember.te``: tensor expressions and schedules, the language users write operators in."""

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
    "create_schedule",  # noqa: F405 - module __getattr__
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


def __getattr__(name: str):  # create_schedule lives with schedules; imported on demand
    if name in ("create_schedule", "Schedule", "Stage", "schedule"):
        from ember.tir.schedule import schedule  # TVM's tvm.te.schedule module, too

        return schedule if name == "schedule" else getattr(schedule, name)
    raise AttributeError(f"module 'ember.te' has no attribute {name!r}")
