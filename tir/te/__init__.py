"""``ember.te``: tensor expressions and schedules, the language users write operators in."""

from ember.tir import op as _op
from ember.tir.expr import max_ as max_expr
from ember.tir.expr import min_ as min_expr
from ember.tir.op import *  # noqa: F403 - the element-wise functions, as tvm.te has tvm.tir's
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
from ember.tir.te.tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor

__all__ = [
    *_op.__all__,
    "ComputeOp",
    "IterVar",
    "Operation",
    "PlaceholderOp",
    "Tensor",
    "comm_reducer",
    "compute",
    "create_schedule",  # noqa: F405 - module __getattr__
    "max",
    "max_expr",
    "max_value",
    "min",
    "min_expr",
    "min_value",
    "placeholder",
    "reduce_axis",
    "size_var",
    "sum",
    "thread_axis",
    "var",
]


def __getattr__(name: str):  # create_schedule lives with schedules; imported on demand
    if name in ("create_schedule", "Schedule", "Stage"):
        from ember.tir.schedule import schedule

        return getattr(schedule, name)
    raise AttributeError(f"module 'ember.te' has no attribute {name!r}")
