"""``ember.te``: tensor expressions and schedules, the language users write operators in."""

from ember.tir.expr import (
    cast,
    const,
    floordiv,
    floormod,
    logical_and,
    logical_not,
    logical_or,
    truncdiv,
    truncmod,
)
from ember.tir.expr import max_ as max_expr
from ember.tir.expr import min_ as min_expr
from ember.tir.te.operation import (
    abs,
    ceil,
    comm_reducer,
    compute,
    cos,
    erf,
    exp,
    floor,
    fma,
    if_then_else,
    log,
    max,
    max_value,
    min,
    min_value,
    placeholder,
    pow,
    reduce_axis,
    round,
    rsqrt,
    select,
    sigmoid,
    sin,
    size_var,
    sqrt,
    sum,
    tanh,
    thread_axis,
    var,
)
from ember.tir.te.tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor

__all__ = [
    "ComputeOp",
    "IterVar",
    "Operation",
    "PlaceholderOp",
    "Tensor",
    "abs",
    "cast",
    "ceil",
    "comm_reducer",
    "compute",
    "const",
    "cos",
    "create_schedule",
    "erf",
    "exp",
    "floor",
    "floordiv",
    "floormod",
    "fma",
    "if_then_else",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "max",
    "max_expr",
    "max_value",
    "min",
    "min_expr",
    "min_value",
    "placeholder",
    "pow",
    "reduce_axis",
    "round",
    "rsqrt",
    "select",
    "sigmoid",
    "size_var",
    "sin",
    "sqrt",
    "sum",
    "tanh",
    "thread_axis",
    "truncdiv",
    "truncmod",
    "var",
]


def __getattr__(name: str):  # create_schedule lives with schedules; imported on demand
    if name in ("create_schedule", "Schedule", "Stage"):
        from ember.tir.schedule import schedule

        return getattr(schedule, name)
    raise AttributeError(f"module 'ember.te' has no attribute {name!r}")
