"""Converters for ONNX's recurrent layers: LSTM, GRU and RNN, every opset form.

The time axis is static, so a layer is unrolled: per direction, one matmul projects
the input of every step at once (``X @ W^T``, with the biases that do not depend on
the state added), then one cell node per step (``frontend/ops/rnn.py``) does the
recurrent matmul and the gates. All steps of a direction share one compiled kernel:
a cell reads its step's row of the projection through a constant index tensor.
Outputs ``Y`` (the cells' ``y`` slices concatenated), ``Y_h`` and ``Y_c`` are built
only when the node asks for them.

``sequence_lens`` may be a runtime input: cells mask rows past their length (state
kept, output zero), and a reverse direction reverses each row over its own length
before and after the loop, as ONNX ReverseSequence does. Why not ``te.scan``: a
scan would make the whole layer one kernel, but its time loop needs a schedule of
its own on each target and Ember's generic graph schedules do not handle scans;
one cell kernel per step costs a call per step (a few microseconds on the CPU) and
reuses the matmul and elementwise schedules that already exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.tir.topi.rnn import ACTIVATION_NAMES

GATES = {"lstm": 4, "gru": 3, "rnn": 1}
DEFAULT_ACTS = {"lstm": ("sigmoid", "tanh", "tanh"), "gru": ("sigmoid", "tanh"), "rnn": ("tanh",)}
# onnxruntime's defaults, and which activations consume an alpha / a beta from the lists
ALPHA = {"affine": 1.0, "leakyrelu": 0.01, "thresholdedrelu": 1.0, "scaledtanh": 1.0,
         "hardsigmoid": 0.2, "elu": 1.0}  # fmt: skip
BETA = {"affine": 0.0, "scaledtanh": 1.0, "hardsigmoid": 0.5}


@dataclass
class Layer:
    """What every direction of one recurrent node shares."""

    kind: str
    x: str  # [T, B, I]
    steps: int
    batch: int
    hidden: int
    lens: str | None
    layout: int
    attrs: dict[str, Any]


def parse_activations(ctx: ConvertContext, kind: str, directions: int) -> tuple[Any, ...]:
    """``(name, alpha, beta)`` per activation of every direction; alphas and betas are
    consumed in order by the activations that take them, the rest get their defaults."""
    per_dir = len(DEFAULT_ACTS[kind])
    names = ctx.attr("activations", None)
    if names is None:
        names = DEFAULT_ACTS[kind] * directions
    names = tuple(str(n).lower() for n in names)
    if len(names) == per_dir and directions == 2:
        names = names * 2
    if len(names) != per_dir * directions:
        raise ArgumentError(
            f"{ctx.op_type}: 'activations' has {len(names)} entries, "
            f"expected {per_dir * directions} ({per_dir} per direction)"
        )
    alphas = list(ctx.attr("activation_alpha", ()))
    betas = list(ctx.attr("activation_beta", ()))
    out = []
    for name in names:
        if name not in ACTIVATION_NAMES:
            raise ArgumentError(f"{ctx.op_type}: activation '{name}' is not supported")
        alpha = float(alphas.pop(0)) if name in ALPHA and alphas else ALPHA.get(name, 0.0)
        beta = float(betas.pop(0)) if name in BETA and betas else BETA.get(name, 0.0)
        out.append((name, alpha, beta))
    return tuple(out)


def _take(ctx: ConvertContext, value: str, index: Any, axis: int) -> str:
    """``np.take(value, index, axis)`` with a constant index (a scalar drops the axis)."""
    return ctx.emit1(
        "gather", [value, ctx.const(np.asarray(index, dtype=np.int64))], {"axis": axis}
    )


CONCAT_FAN_IN = 32


def _concat(ctx: ConvertContext, values: Sequence[str], axis: int) -> str:
    """Concatenate in a tree of at most ``CONCAT_FAN_IN`` inputs per node: an element of a
    concat selects among all of its inputs, so one wide concat of T steps costs O(T^2)."""
    values = list(values)
    while len(values) > CONCAT_FAN_IN:
        chunks = [values[k : k + CONCAT_FAN_IN] for k in range(0, len(values), CONCAT_FAN_IN)]
        values = [_concat(ctx, c, axis) for c in chunks]
    return values[0] if len(values) == 1 else ctx.emit1("concat", values, {"axis": axis})


def _zeros(ctx: ConvertContext, shape: tuple[int, ...], dtype: str) -> str:
    return ctx.const(np.zeros(shape, dtype=dtype))


def _check_shape(ctx: ConvertContext, i: int, want: tuple[int, ...], what: str) -> None:
    got = ctx.type(i).shape
    if got != want:
        raise ArgumentError(f"{ctx.op_type}: {what} has shape {list(got)}, expected {list(want)}")


def _layer(ctx: ConvertContext, kind: str, directions: int) -> Layer:
    x_type = ctx.type(0)
    if not x_type.dtype.startswith("float") or x_type.ndim != 3 or not x_type.is_static:
        raise ArgumentError(f"{ctx.op_type}: X must be a static 3-D float tensor, got {x_type}")
    layout = int(ctx.attr("layout", 0)) if ctx.opset >= 14 else 0
    x = ctx.input(0)
    if layout:
        x = ctx.emit1("transpose", [x], {"perm": (1, 0, 2)})
    steps, batch, width = (int(d) for d in ctx.type_of(x).shape)
    hidden = int(ctx.type(2).shape[-1])
    if ctx.has_attr("hidden_size") and int(ctx.attr("hidden_size")) != hidden:
        raise ArgumentError(
            f"{ctx.op_type}: hidden_size {ctx.attr('hidden_size')} does not match R {ctx.type(2)}"
        )
    g = GATES[kind]
    _check_shape(ctx, 1, (directions, g * hidden, width), "W")
    _check_shape(ctx, 2, (directions, g * hidden, hidden), "R")
    if ctx.has_input(3):
        _check_shape(ctx, 3, (directions, 2 * g * hidden), "B")
    state = (batch, directions, hidden) if layout else (directions, batch, hidden)
    for i, what in ((5, "initial_h"), (6, "initial_c")):
        if ctx.has_input(i) and (i == 5 or kind == "lstm"):
            _check_shape(ctx, i, state, what)
    if kind == "lstm" and ctx.has_input(7):
        _check_shape(ctx, 7, (directions, 3 * hidden), "P")
    clip = ctx.attr("clip", None)
    if clip is not None and not float(clip) > 0:
        raise ArgumentError(f"{ctx.op_type}: clip must be positive, got {clip}")
    attrs: dict[str, Any] = {
        "activations": parse_activations(ctx, kind, directions),
        "clip": float(clip or 0.0),
    }
    return Layer(kind, x, steps, batch, hidden, _sequence_lens(ctx, steps, batch), layout, attrs)


def _sequence_lens(ctx: ConvertContext, steps: int, batch: int) -> str | None:
    """The lengths input, or None when it is absent or a constant of full lengths."""
    if not ctx.has_input(4):
        return None
    _check_shape(ctx, 4, (batch,), "sequence_lens")
    if not ctx.type(4).dtype.startswith(("int", "uint")):
        raise ArgumentError(f"{ctx.op_type}: sequence_lens must be integers, got {ctx.type(4)}")
    if ctx.is_constant(4):
        lens = ctx.constant(4)
        if np.any(lens < 0) or np.any(lens > steps):
            raise ArgumentError(f"{ctx.op_type}: sequence_lens {lens.tolist()} not in [0, {steps}]")
        if np.all(lens == steps):
            return None
    return ctx.input(4)


def _state(ctx: ConvertContext, layer: Layer, i: int, d: int, dtype: str) -> str:
    """Direction ``d``'s initial state from input ``i`` ([D, B, H], or [B, D, H] in layout 1)."""
    if not ctx.has_input(i):
        return _zeros(ctx, (layer.batch, layer.hidden), dtype)
    return _take(ctx, ctx.input(i), d, 1 if layer.layout else 0)


def _projection(ctx: ConvertContext, layer: Layer, d: int) -> tuple[str, str | None]:
    """``X @ W_d^T + biases`` for every step, and GRU's hidden-gate recurrence bias."""
    g, hid = GATES[layer.kind], layer.hidden
    wt = ctx.emit1("transpose", [_take(ctx, ctx.input(1), d, 0)], {"perm": (1, 0)})
    xp = ctx.emit1("matmul", [layer.x, wt])
    dtype = ctx.type(0).dtype
    rbh = _zeros(ctx, (hid,), dtype) if layer.kind == "gru" else None
    if ctx.has_input(3):
        b = _take(ctx, ctx.input(3), d, 0)
        wb = _take(ctx, b, np.arange(g * hid), 0)
        rb = _take(ctx, b, np.arange(g * hid, 2 * g * hid), 0)
        if layer.kind == "gru":  # the hidden gate's Rb belongs inside the reset product
            rbh = _take(ctx, rb, np.arange(2 * hid, 3 * hid), 0)
            keep = np.concatenate([np.ones(2 * hid), np.zeros(hid)]).astype(dtype)
            rb = ctx.emit1("multiply", [rb, ctx.const(keep)])
        xp = ctx.emit1("add", [xp, ctx.emit1("add", [wb, rb])])
    return xp, rbh


def _direction(ctx: ConvertContext, layer: Layer, d: int, reverse: bool) -> tuple[str, list[str]]:
    """Unroll one direction: its ``[T, 1, B, H]`` output and its final states."""
    dtype = ctx.type(0).dtype
    xp, rbh = _projection(ctx, layer, d)
    if reverse and layer.lens is not None:
        xp = ctx.emit1("reverse_sequence", [xp, layer.lens], {"time_axis": 0, "batch_axis": 1})
    rt = ctx.emit1("transpose", [_take(ctx, ctx.input(2), d, 0)], {"perm": (1, 0)})
    states = [_state(ctx, layer, 5, d, dtype)]
    if layer.kind == "lstm":
        states.append(_state(ctx, layer, 6, d, dtype))
        peep = _take(ctx, ctx.input(7), d, 0) if ctx.has_input(7) else None
        extra = [peep or _zeros(ctx, (3 * layer.hidden,), dtype)]
    else:
        extra = [rbh] if rbh is not None else []
    lens = [layer.lens] if layer.lens is not None else []
    per_dir = len(DEFAULT_ACTS[layer.kind])
    attrs = {**layer.attrs, "activations": layer.attrs["activations"][d * per_dir :][:per_dir]}
    by_time: dict[int, str] = {}
    for s in range(layer.steps):
        t = layer.steps - 1 - s if reverse and layer.lens is None else s
        tidx = ctx.const(np.array([t], dtype=np.int64))
        outs = ctx.emit(
            f"{layer.kind}_cell", [xp, tidx, states[0], *states[1:], rt, *extra, *lens], attrs
        )
        states = outs[: len(states)]
        by_time[t] = outs[len(states)]
    y = _concat(ctx, [by_time[t] for t in range(layer.steps)], 0)
    if reverse and layer.lens is not None:
        y = ctx.emit1("reverse_sequence", [y, layer.lens], {"time_axis": 0, "batch_axis": 2})
    return y, states


def convert_recurrent(ctx: ConvertContext, kind: str) -> list[str]:
    """The shared converter: ``[Y, Y_h, (Y_c)]`` for the outputs the node names."""
    direction = str(ctx.attr("direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ArgumentError(f"{ctx.op_type}: unknown direction '{direction}'")
    directions = 2 if direction == "bidirectional" else 1
    layer = _layer(ctx, kind, directions)
    if kind == "lstm":
        layer.attrs["input_forget"] = bool(ctx.attr("input_forget", 0))
    if kind == "gru":
        layer.attrs["linear_before_reset"] = bool(ctx.attr("linear_before_reset", 0))
    ys, finals = [], []
    for d in range(directions):
        y, states = _direction(ctx, layer, d, direction == "reverse" or d == 1)
        ys.append(y)
        finals.append(states)
    wanted = [k < ctx.num_outputs and ctx.node.output[k] != "" for k in range(3)]
    results = ["", "", ""]
    if wanted[0]:
        y = _concat(ctx, ys, 1)
        results[0] = ctx.emit1("transpose", [y], {"perm": (2, 0, 1, 3)}) if layer.layout else y
    for k in (1, 2):
        if wanted[k] and k - 1 < len(finals[0]):
            shape = (1, layer.batch, layer.hidden)
            parts = [ctx.emit1("reshape", [f[k - 1]], {"shape": shape}) for f in finals]
            out = _concat(ctx, parts, 0)
            results[k] = ctx.emit1("transpose", [out], {"perm": (1, 0, 2)}) if layer.layout else out
    return results[: max(ctx.num_outputs, 1)]


def _rules(op_type: str, kind: str, ranges: Sequence[tuple[int, int]]) -> None:
    # The forms differ in attributes read by the shared converter from ctx.opset:
    # output_sequence (before 7, ignored: Y is produced when named), linear_before_reset
    # (GRU from 3), layout (from 14); opset 22 adds bfloat16 only.
    for since, until in ranges:

        @converter(op_type, since=since, until=until)
        def convert(ctx: ConvertContext) -> list[str]:
            return convert_recurrent(ctx, kind)


_rules("LSTM", "lstm", [(1, 6), (7, 13), (14, 21), (22, 1 << 30)])
_rules("GRU", "gru", [(1, 2), (3, 6), (7, 13), (14, 21), (22, 1 << 30)])
_rules("RNN", "rnn", [(1, 6), (7, 13), (14, 21), (22, 1 << 30)])
