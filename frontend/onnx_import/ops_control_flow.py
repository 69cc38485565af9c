"""Converters for ONNX control flow: If and Loop.

An If whose condition is a constant at import is replaced by its taken branch,
inlined. Otherwise it becomes an ``if`` node holding both branches as Graphs
(``Node.subgraphs``); the compiler runs it on the host (``ember/control_flow.py``).
Both branches must give outputs of the same static types.

A Loop whose trip count is a constant, whose condition starts true and that the
body passes through unchanged (or sets to a constant true), runs exactly that many
times: it is unrolled when small (``UNROLL_LIMIT`` body nodes in all) or when its
carried values change shape between iterations. Any other Loop becomes a ``loop``
node over its body Graph, iterated on the host. Scan outputs are stacked along a
new first axis; since Ember's shapes are static, a Loop with scan outputs needs a
constant trip count, and at run time it must run exactly that many iterations.

Every opset form from 1 on converts the same way: later forms only admit sequence
and optional types, which Ember does not support.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.graph import Graph, Node, TensorType
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.frontend.onnx_import.subgraph import import_subgraph, inline_subgraph, with_inputs

UNROLL_LIMIT = 64
FORMS = (1, 11, 13, 16, 19, 21, 23, 24, 25)


def _scalar_bool(ctx: ConvertContext, i: int, what: str) -> None:
    t = ctx.type(i)
    if t.dtype != "bool" or not t.is_static or t.size != 1:
        raise ArgumentError(f"{ctx.op_type}: {what} must be a single bool, got {t}")


def convert_if(ctx: ConvertContext) -> list[str]:
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    _scalar_bool(ctx, 0, "the condition")
    if ctx.is_constant(0):
        return inline_subgraph(ctx, then_g if bool(ctx.constant(0).reshape(-1)[0]) else else_g)
    then_sub, then_caps = import_subgraph(ctx, then_g)
    else_sub, else_caps = import_subgraph(ctx, else_g)
    order = list(dict.fromkeys([*then_caps, *else_caps]))
    types = {v: ctx.type_of(v) for v in order}
    then_sub = with_inputs(then_sub, then_caps, order, types).verify()
    else_sub = with_inputs(else_sub, else_caps, order, types).verify()
    then_t = [v.type for v in then_sub.outputs]
    else_t = [v.type for v in else_sub.outputs]
    if then_t != else_t:
        raise ArgumentError(
            f"If: the branches give outputs of different types ({', '.join(map(str, then_t))} "
            f"vs {', '.join(map(str, else_t))}); Ember compiles static shapes only"
        )
    node = Node(
        "if",
        ctx.name,
        (ctx.input(0), *order),
        (),
        {},
        ctx.op_type,
        subgraphs={"then_branch": then_sub, "else_branch": else_sub},
    )
    return ctx.builder.add_node(node, then_t)


def _body_keeps_cond(body: Graph) -> bool:
    """Whether the body's condition output is its condition input or a constant true."""
    out = body.outputs[0].name
    if out == body.inputs[1].name:
        return True
    return out in body.params and bool(np.all(body.params[out]))


def convert_loop(ctx: ConvertContext) -> list[str]:
    body_g = ctx.attr("body")
    n_carried = ctx.num_inputs - 2
    n_scan = len(body_g.output) - 1 - n_carried
    if n_carried < 0 or n_scan < 0:
        raise ArgumentError(
            f"Loop: {ctx.num_inputs} inputs and a body of {len(body_g.output)} outputs do not fit"
        )
    if ctx.has_input(1):
        _scalar_bool(ctx, 1, "the condition")
    trip = int(ctx.constant(0).reshape(-1)[0]) if ctx.is_constant(0) else None
    cond = bool(ctx.constant(1).reshape(-1)[0]) if ctx.is_constant(1) else not ctx.has_input(1)
    carried = [ctx.input(2 + k) for k in range(n_carried)]
    formal = [TensorType((), "int64"), TensorType((), "bool"), *(ctx.type_of(v) for v in carried)]
    body, captures = import_subgraph(ctx, body_g, formal)
    steady = [v.type for v in body.outputs[1 : 1 + n_carried]] == formal[2:]
    fixed = trip is not None and _body_keeps_cond(body) and (cond or not ctx.has_input(1))
    if fixed and (not steady or trip * max(len(body_g.node), 1) <= UNROLL_LIMIT):
        return _unroll(ctx, body_g, carried, n_scan, trip if cond else 0)  # type: ignore[arg-type]
    if not steady:
        raise ArgumentError(
            "Loop: the body changes the shapes of its carried values; Ember can only unroll "
            "such a loop, which needs a constant trip count and no data-dependent condition"
        )
    if n_scan and trip is None:
        if ctx.has_input(0):
            ctx.constant(0)  # raises: the trip count must be a constant
        raise ArgumentError("Loop: scan outputs need a trip count (their shape must be static)")
    scan_types = [
        TensorType((trip, *v.type.shape), v.type.dtype) for v in body.outputs[1 + n_carried :]
    ]
    given = [ctx.input(i) for i in (0, 1) if ctx.has_input(i)]
    node = Node(
        "loop",
        ctx.name,
        (*given, *carried, *captures),
        (),
        {"has_trip": ctx.has_input(0), "has_cond": ctx.has_input(1), "num_carried": n_carried},
        ctx.op_type,
        subgraphs={"body": body},
    )
    return ctx.builder.add_node(node, [*formal[2:], *scan_types])


def _unroll(
    ctx: ConvertContext, body_g: Any, carried: list[str], n_scan: int, trip: int
) -> list[str]:
    names = [vi.name for vi in body_g.input]
    scans: list[list[str]] = [[] for _ in range(n_scan)]
    values = list(carried)
    for i in range(trip):
        bindings = {
            names[0]: ctx.const(np.array(i, dtype=np.int64)),
            names[1]: ctx.const(np.array(True)),
            **dict(zip(names[2:], values)),
        }
        outs = inline_subgraph(ctx, body_g, bindings)
        values = outs[1 : 1 + len(carried)]
        for k, s in enumerate(outs[1 + len(carried) :]):
            t = ctx.type_of(s)
            scans[k].append(ctx.emit1("reshape", [s], {"shape": (1, *t.shape)}))
    if n_scan and trip == 0:
        raise ArgumentError("Loop: zero iterations give empty scan outputs, which Ember lacks")
    stacked = [p[0] if len(p) == 1 else ctx.emit1("concat", p, {"axis": 0}) for p in scans]
    return [*values, *stacked]


for _since, _until in zip(FORMS, (*(v - 1 for v in FORMS[1:]), 1 << 30)):
    converter("If", since=_since, until=_until)(convert_if)
    converter("Loop", since=_since, until=_until)(convert_loop)
