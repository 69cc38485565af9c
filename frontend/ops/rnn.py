"""Recurrent-step ops: one time step of an LSTM, GRU or RNN cell, and reverse_sequence.

The ONNX converters (``onnx_import/ops_rnn.py``) unroll a recurrent layer into one
cell node per time step and direction; the computes are in ``tir/topi/rnn.py``.
Inputs (``lens`` is the optional trailing ``[B]`` sequence lengths):

- ``lstm_cell``: xp ``[T, B, 4H]``, tidx ``[1]``, h ``[B, H]``, c ``[B, H]``,
  rt ``[H, 4H]``, p ``[3H]``, lens -> h, c, y ``[1, 1, B, H]``.
- ``gru_cell``: xp ``[T, B, 3H]``, tidx, h, rt ``[H, 3H]``, rbh ``[H]``, lens -> h, y, rh.
- ``rnn_cell``: xp ``[T, B, H]``, tidx, h, rt ``[H, H]``, lens -> h, y.
- ``reverse_sequence``: x, lens -> x reversed per batch row over its length.

Attributes: ``activations`` (tuple of ``(name, alpha, beta)``: 3 for LSTM, 2 for GRU,
1 for RNN), ``clip`` (float, 0 for none), ``input_forget`` (LSTM),
``linear_before_reset`` (GRU); reverse_sequence: ``time_axis``, ``batch_axis``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import OUT_ELEMWISE_FUSABLE
from ember.frontend.ops.registry import register_op
from ember.tir.topi import rnn as topi_rnn

Types = Sequence[TensorType]


def _check(
    types: Types, gates: int, state_inputs: int, extra: Sequence[tuple[int, int]]
) -> tuple[Any, Any]:
    """Check the common cell inputs; ``extra`` lists (input, length in units of H) for 1-D ones."""
    xp, tidx, h = types[0], types[1], types[2]
    if h.ndim != 2 or xp.ndim != 3:
        raise ArgumentError(f"recurrent cell: xp {xp} must be 3-D and h {h} 2-D")
    batch, hidden = h.shape
    if xp.shape[1:] != (batch, gates * hidden) or tidx.shape != (1,):
        raise ArgumentError(f"recurrent cell: xp {xp}, tidx {tidx} and h {h} do not fit")
    for k in range(3, 3 + state_inputs):
        if types[k].shape != (batch, hidden):
            raise ArgumentError(f"recurrent cell: state {types[k]} must be [{batch}, {hidden}]")
    rt = types[3 + state_inputs]
    if rt.shape != (hidden, gates * hidden):
        raise ArgumentError(f"recurrent cell: recurrence weights {rt} must be [H, {gates}H]")
    for k, units in extra:
        if types[k].shape != (units * hidden,):
            raise ArgumentError(f"recurrent cell: input {k} {types[k]} must be [{units}H]")
    n_fixed = 4 + state_inputs + len(extra)
    if len(types) > n_fixed and types[n_fixed].shape != (batch,):
        raise ArgumentError(f"recurrent cell: sequence lengths {types[n_fixed]} must be [B]")
    return batch, hidden


def _outputs(types: Types, n_state: int, batch: Any, hidden: Any) -> list[TensorType]:
    dtype = types[0].dtype
    state = TensorType((batch, hidden), dtype)
    return [state] * n_state + [TensorType((1, 1, batch, hidden), dtype)]


def _infer_lstm(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    batch, hidden = _check(types, 4, 1, [(5, 3)])
    return _outputs(types, 2, batch, hidden)


def _lens(inputs: Sequence[Any], n_fixed: int) -> Any:
    return inputs[n_fixed] if len(inputs) > n_fixed else None


@register_op("lstm_cell", OUT_ELEMWISE_FUSABLE, infer=_infer_lstm, num_inputs=(6, 7), num_outputs=3)
def lstm_cell(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """The LSTM recurrence over time steps, from the input projection computed before it."""
    xp, tidx, h, c, rt, p = inputs[:6]
    return topi_rnn.lstm_cell(
        xp,
        tidx,
        h,
        c,
        rt,
        p,
        _lens(inputs, 6),
        attrs["activations"],
        attrs["clip"],
        attrs["input_forget"],
    )


def _infer_gru(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    batch, hidden = _check(types, 3, 0, [(4, 1)])
    h, y = _outputs(types, 1, batch, hidden)
    return [h, y, h]


@register_op("gru_cell", OUT_ELEMWISE_FUSABLE, infer=_infer_gru, num_inputs=(5, 6), num_outputs=3)
def gru_cell(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """The GRU recurrence over time steps, from the input projection computed before it."""
    xp, tidx, h, rt, rbh = inputs[:5]
    return topi_rnn.gru_cell(
        xp,
        tidx,
        h,
        rt,
        rbh,
        _lens(inputs, 5),
        attrs["activations"],
        attrs["clip"],
        attrs["linear_before_reset"],
    )


def _infer_rnn(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    batch, hidden = _check(types, 1, 0, [])
    return _outputs(types, 1, batch, hidden)


@register_op("rnn_cell", OUT_ELEMWISE_FUSABLE, infer=_infer_rnn, num_inputs=(4, 5), num_outputs=2)
def rnn_cell(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """The plain RNN recurrence over time steps, with its activation and optional clip."""
    xp, tidx, h, rt = inputs[:4]
    (act,) = attrs["activations"]
    return topi_rnn.rnn_cell(xp, tidx, h, rt, _lens(inputs, 4), act, attrs["clip"])
