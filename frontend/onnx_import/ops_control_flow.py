"""Converters for ONNX control flow: If, Loop and Scan.

An If whose condition is a constant at import is replaced by its taken branch,
inlined. Otherwise it becomes an ``if`` node holding both branches as Graphs
(``Node.subgraphs``); the compiler runs it on the host (``ember/control_flow.py``).
Both branches must give outputs of the same static types. A branch that cannot be
imported for the model's shapes is left out (the node's ``refused_<branch>`` attribute
keeps why) and refused at run time if the condition takes it.

A Loop whose trip count is a constant, whose condition starts true and that the
body passes through unchanged (or sets to a constant true), runs exactly that many
times: it is unrolled when small (``UNROLL_LIMIT`` body nodes in all) or when its
carried values change shape between iterations. Any other Loop becomes a ``loop``
node over its body Graph, iterated on the host. Scan outputs are stacked along a
new first axis; since Ember's shapes are static, a Loop with scan outputs needs a
constant trip count, and at run time it must run exactly that many iterations.

Scan (opset 9 on) is unrolled over its static scan length when small, else it
becomes a host ``scan`` node that slices its inputs and stacks its outputs. Scan 8
(a leading batch axis) runs one such scan per batch row; its sequence_lens must be a
constant of full lengths.

Every opset form from 1 on converts the same way: later forms admit sequence and
optional types. An If whose branches give sequences of the same lengths (and optionals
of the same presence) flattens them to its tensors; where the branches differ in them,
Ember needs the condition at compile time (``NeedsConstantError``: the model compiles per
value of it). A Loop that carries sequences or optionals is always unrolled, its trip
count and condition needed at compile time the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.errors import ArgumentError, NeedsConstantError
from ember.frontend.graph import Graph, Node, TensorType
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.frontend.onnx_import.sequences import Bound, Layout, describe, rebuild
from ember.frontend.onnx_import.subgraph import (
    import_branch,
    import_subgraph,
    inline_subgraph,
    inline_values,
    reads_structured,
    with_inputs,
)

UNROLL_LIMIT = 64
UNROLL_CAP = 4096
"""The most iterations Ember unrolls a Loop that carries sequences (its trip count may be
INT64_MAX, the condition ending it)."""
FORMS = (1, 11, 13, 16, 19, 21, 23, 24, 25)
SCAN_FORMS = (9, 11, 16, 19, 21, 23, 24, 25)


def _scalar_bool(ctx: ConvertContext, i: int, what: str) -> None:
    t = ctx.type(i)
    if t.dtype != "bool" or not t.is_static or t.size != 1:
        raise ArgumentError(f"{ctx.op_type}: {what} must be a single bool, got {t}")


def convert_if(ctx: ConvertContext) -> list[Bound]:
    """ONNX If: inlines the taken branch when the condition is a constant, else imports both as
    subgraphs."""
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    _scalar_bool(ctx, 0, "the condition")
    if ctx.is_constant(0):
        return inline_values(ctx, then_g if bool(ctx.constant(0).reshape(-1)[0]) else else_g)
    branches = {"then_branch": _try_import(ctx, then_g), "else_branch": _try_import(ctx, else_g)}
    refused = {k: b for k, b in branches.items() if isinstance(b, ArgumentError)}
    if len(refused) == 2:
        raise refused["then_branch"]
    imported = {k: b for k, b in branches.items() if not isinstance(b, ArgumentError)}
    layouts = _same_layouts(ctx, [lay for _, _, lay in imported.values()])
    caps = [v for _, c, _ in imported.values() for v in c]
    order = list(dict.fromkeys(caps))
    types = {v: ctx.type_of(v) for v in order}
    subs = {k: with_inputs(g, c, order, types).verify() for k, (g, c, _) in imported.items()}
    out_types = [[v.type for v in g.outputs] for g in subs.values()]
    if len(out_types) == 2 and out_types[0] != out_types[1]:
        then_t, else_t = out_types
        raise ArgumentError(
            f"If: the branches give outputs of different types ({', '.join(map(str, then_t))} "
            f"vs {', '.join(map(str, else_t))}); Ember compiles static shapes only"
        )
    # a branch that cannot run on these shapes is refused when taken, as onnxruntime does
    attrs = {f"refused_{k}": str(e.message) for k, e in refused.items()}
    node = Node("if", ctx.name, (ctx.input(0), *order), (), attrs, ctx.op_type, subgraphs=subs)
    flat = iter(ctx.builder.add_node(node, out_types[0]))
    return [rebuild(layout, flat) for layout in layouts]


def _same_layouts(ctx: ConvertContext, layouts: list[list[Layout]]) -> list[Layout]:
    """The branches' output layouts (sequences flattened to their tensors), which must
    agree: a sequence's length or an optional's presence is part of the compiled model,
    so where the branches differ in them Ember needs the condition at compile time (and
    compiles the model per value of it, ``ember/graph/dynamic_model.py``)."""
    if len(layouts) == 2 and layouts[0] != layouts[1]:
        cond = ctx.node.input[0]
        raise NeedsConstantError(
            f"If '{ctx.name}': the branches give sequences or optionals of different lengths "
            f"or presence, so Ember needs the condition ('{cond}') at compile time",
            cond,
        )
    return layouts[0]


def _try_import(
    ctx: ConvertContext, branch: Any
) -> tuple[Graph, dict[str, str], list[Layout]] | ArgumentError:
    """A runtime If's branch as a Graph, or the ArgumentError that says why it cannot run
    on the shapes the model was imported with.

    Exporters put paths for other input sizes behind an If on a run-time value (Silero
    VAD's 8 kHz branch expects a shorter input than its 16 kHz one): onnxruntime runs
    such a model and fails only if the other branch is taken, and so does Ember."""
    try:
        return import_branch(ctx, branch)
    except ArgumentError as e:
        return e


def _body_keeps_cond(body: Graph) -> bool:
    """Whether the body's condition output is its condition input or a constant true."""
    out = body.outputs[0].name
    if out == body.inputs[1].name:
        return True
    return out in body.params and bool(np.all(body.params[out]))


def convert_loop(ctx: ConvertContext) -> list[Bound]:
    """ONNX Loop: imports the body as a subgraph with its carried and scan outputs."""
    body_g = ctx.attr("body")
    n_carried = ctx.num_inputs - 2
    n_scan = len(body_g.output) - 1 - n_carried
    if n_carried < 0 or n_scan < 0:
        raise ArgumentError(
            f"Loop: {ctx.num_inputs} inputs and a body of {len(body_g.output)} outputs do not fit"
        )
    if ctx.has_input(1):
        _scalar_bool(ctx, 1, "the condition")
    if _carries_structured(ctx, body_g, n_carried):
        return _unroll_structured(ctx, body_g, n_carried, n_scan)
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
    return [*ctx.builder.add_node(node, [*formal[2:], *scan_types])]


def _carries_structured(ctx: ConvertContext, body_g: Any, n_carried: int) -> bool:
    """Whether the Loop carries a sequence or optional (given one, or declared by its body),
    or its body reads one from outside (a SequenceAt by iteration number)."""
    given = any(not isinstance(ctx.value(2 + k), str) for k in range(n_carried))
    declared = any(
        vi.type.HasField("sequence_type") or vi.type.HasField("optional_type")
        for vi in body_g.input[2:]
    )
    return given or declared or reads_structured(ctx, body_g)


def _unroll_structured(
    ctx: ConvertContext, body_g: Any, n_carried: int, n_scan: int
) -> list[Bound]:
    """A Loop carrying (or reading) sequences or optionals: their lengths are part of the
    compiled model, so it is unrolled, which needs its trip count and condition at compile
    time (a model feeding them compiles per value of them) and its body's condition known
    once the iteration number is; at most ``UNROLL_CAP`` iterations."""
    trip = int(_known(ctx, 0, "trip count").reshape(-1)[0]) if ctx.has_input(0) else None
    cond = bool(_known(ctx, 1, "condition").reshape(-1)[0]) if ctx.has_input(1) else True
    carried = [ctx.value(2 + k) for k in range(n_carried)]
    return _unroll(ctx, body_g, carried, n_scan, trip if cond else 0, until_false=True)


def _known(ctx: ConvertContext, i: int, what: str) -> np.ndarray:
    if not ctx.is_constant(i):
        name = ctx.node.input[i]
        raise NeedsConstantError(
            f"Loop '{ctx.name}' carries sequences or optionals, so Ember unrolls it: its "
            f"{what} ('{name}') must be known at compile time",
            name,
        )
    return ctx.constant(i)


def _still_true(ctx: ConvertContext, cond: Bound) -> bool:
    """The body's condition output in an unrolled iteration, which must be a constant."""
    value = ctx.value_of(cond) if isinstance(cond, str) else None
    if value is None:
        raise ArgumentError(
            f"Loop '{ctx.name}' carries sequences or optionals, so Ember unrolls it, but its "
            "body's condition depends on run-time data; not supported"
        )
    return bool(value.reshape(-1)[0])


def _unroll(
    ctx: ConvertContext,
    body_g: Any,
    carried: list[Bound],
    n_scan: int,
    trip: int | None,
    until_false: bool = False,
) -> list[Bound]:
    """The Loop's body inlined once per iteration: ``trip`` times, or (``until_false``)
    until the body's condition output turns false."""
    names = [vi.name for vi in body_g.input]
    scans: list[list[str]] = [[] for _ in range(n_scan)]
    values = list(carried)
    i = 0
    while trip is None or i < trip:
        if until_false and i == UNROLL_CAP:
            raise ArgumentError(
                f"Loop '{ctx.name}' runs more than {UNROLL_CAP} iterations; Ember unrolls a "
                "Loop carrying sequences or optionals no further"
            )
        bindings: dict[str, Bound] = {
            names[0]: ctx.const(np.array(i, dtype=np.int64)),
            names[1]: ctx.const(np.array(True)),
            **dict(zip(names[2:], values)),
        }
        outs = inline_values(ctx, body_g, bindings)
        values = outs[1 : 1 + len(carried)]
        for k, s in enumerate(outs[1 + len(carried) :]):
            if not isinstance(s, str):
                raise ArgumentError(f"Loop '{ctx.name}': scan output {k} is {describe(s)}")
            t = ctx.type_of(s)
            scans[k].append(ctx.emit1("reshape", [s], {"shape": (1, *t.shape)}))
        i += 1
        if until_false and not _still_true(ctx, outs[0]):
            break
    if n_scan and i == 0:
        raise ArgumentError("Loop: zero iterations give empty scan outputs, which Ember lacks")
    stacked = [p[0] if len(p) == 1 else ctx.emit1("concat", p, {"axis": 0}) for p in scans]
    return [*values, *stacked]


for _since, _until in zip(FORMS, (*(v - 1 for v in FORMS[1:]), 1 << 30)):
    converter("If", since=_since, until=_until)(convert_if)
    converter("Loop", since=_since, until=_until)(convert_loop)


def _axes(ctx: ConvertContext, name: str, ranks: list[int]) -> list[int]:
    given = ctx.attr(name, None)
    axes = [0] * len(ranks) if given is None else [int(a) for a in given]
    if len(axes) != len(ranks):
        raise ArgumentError(f"Scan: '{name}' has {len(axes)} entries, expected {len(ranks)}")
    out = []
    for a, r in zip(axes, ranks):
        if not -r <= a < r:
            raise ArgumentError(f"Scan: axis {a} in '{name}' is out of range for rank {r}")
        out.append(a % r)
    return out


def _scan_spec(ctx: ConvertContext, states: list[str], xs: list[str], n_out: int) -> dict:
    """Scan's attributes, normalized, and the scan length every scan input must share."""
    in_axes = _axes(ctx, "scan_input_axes", [ctx.type_of(x).ndim for x in xs])
    lengths = {ctx.type_of(x).shape[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1 or not all(isinstance(n, int) for n in lengths):
        raise ArgumentError(f"Scan: the scan inputs have lengths {sorted(map(str, lengths))}")
    dirs = ctx.attr("directions" if ctx.opset < 9 else "scan_input_directions", None)
    dirs = dirs or (0,) * len(xs)
    out_dirs = ctx.attr("scan_output_directions", None) or (0,) * n_out
    return {
        "num_states": len(states),
        "length": lengths.pop(),
        "in_axes": tuple(in_axes),
        "in_dirs": tuple(int(d) for d in dirs),
        "out_dirs": tuple(int(d) for d in out_dirs),
    }


def convert_scan(ctx: ConvertContext) -> list[str]:
    """Scan (opset 9 on)."""
    n_in = int(ctx.attr("num_scan_inputs"))
    values = ctx.inputs()
    return _scan(ctx, values[: len(values) - n_in], values[len(values) - n_in :])


def convert_scan_8(ctx: ConvertContext) -> list[str]:
    """Scan 8: every input has a leading batch axis; each batch row is a Scan 9 of its own
    (scan axis 0 after the row is taken), and the rows' results are stacked again."""
    n_in = int(ctx.attr("num_scan_inputs"))
    values = [ctx.input(i) for i in range(1, ctx.num_inputs)]
    batch = ctx.type_of(values[0]).shape[0]
    if ctx.has_input(0):
        lens = ctx.constant(0)
        length = ctx.type_of(values[-1]).shape[1]
        if not np.all(lens == length):
            raise ArgumentError(f"Scan: sequence_lens {lens.tolist()} shorter than {length}")
    rows: list[list[str]] = []
    for b in range(batch):
        idx = ctx.const(np.array(b, dtype=np.int64))
        row = [ctx.emit1("gather", [v, idx], {"axis": 0}) for v in values]
        rows.append(_scan(ctx, row[: len(row) - n_in], row[len(row) - n_in :]))
    outs = []
    for k in range(len(rows[0])):
        shape = ctx.type_of(rows[0][k]).shape
        parts = [ctx.emit1("reshape", [r[k]], {"shape": (1, *shape)}) for r in rows]
        outs.append(parts[0] if batch == 1 else ctx.emit1("concat", parts, {"axis": 0}))
    return outs


def _scan(ctx: ConvertContext, states: list[str], xs: list[str]) -> list[str]:
    """Unrolled when small, else a host ``scan`` node over the body."""
    body_g = ctx.attr("body")
    n_out = len(body_g.output) - len(states)
    spec = _scan_spec(ctx, states, xs, n_out)
    slice_types = []
    for x, a in zip(xs, spec["in_axes"]):
        t = ctx.type_of(x)
        slice_types.append(TensorType(t.shape[:a] + t.shape[a + 1 :], t.dtype))
    body, captures = import_subgraph(ctx, body_g, [*map(ctx.type_of, states), *slice_types])
    elems = [v.type for v in body.outputs[len(states) :]]
    ranks = [t.ndim + 1 for t in elems]
    spec["out_axes"] = tuple(_axes(ctx, "scan_output_axes", ranks))
    if spec["length"] * max(len(body_g.node), 1) <= UNROLL_LIMIT:
        return _unroll_scan(ctx, body_g, states, xs, spec)
    out_types = []
    for t, a in zip(elems, spec["out_axes"]):
        out_types.append(TensorType((*t.shape[:a], spec["length"], *t.shape[a:]), t.dtype))
    node = Node(
        "scan",
        ctx.name,
        (*states, *xs, *captures),
        (),
        spec,
        ctx.op_type,
        subgraphs={"body": body},
    )
    return ctx.builder.add_node(node, [*(ctx.type_of(s) for s in states), *out_types])


def _unroll_scan(
    ctx: ConvertContext, body_g: Any, states: list[str], xs: list[str], spec: dict
) -> list[str]:
    names = [vi.name for vi in body_g.input]
    n, length = len(states), spec["length"]
    parts: list[list[str]] = [[] for _ in body_g.output[n:]]
    for i in range(length):
        slices = []
        for x, a, d in zip(xs, spec["in_axes"], spec["in_dirs"]):
            idx = ctx.const(np.array(length - 1 - i if d else i, dtype=np.int64))
            slices.append(ctx.emit1("gather", [x, idx], {"axis": a}))
        outs = inline_subgraph(ctx, body_g, dict(zip(names, [*states, *slices])))
        states = outs[:n]
        for k, (e, a) in enumerate(zip(outs[n:], spec["out_axes"])):
            shape = ctx.type_of(e).shape
            parts[k].append(ctx.emit1("reshape", [e], {"shape": (*shape[:a], 1, *shape[a:])}))
    stacked = []
    for p, a, d in zip(parts, spec["out_axes"], spec["out_dirs"]):
        p = p[::-1] if d else p
        stacked.append(p[0] if len(p) == 1 else ctx.emit1("concat", p, {"axis": a}))
    return [*states, *stacked]


for _since, _until in zip(SCAN_FORMS, (*(v - 1 for v in SCAN_FORMS[1:]), 1 << 30)):
    converter("Scan", since=_since, until=_until)(convert_scan)
converter("Scan", since=8, until=8)(convert_scan_8)
