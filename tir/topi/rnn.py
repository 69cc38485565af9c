"""Recurrent cell computes: one time step of an LSTM, GRU or simple RNN, and ReverseSequence.

The ONNX frontend unrolls a recurrent layer over its (static) time axis and calls
one of these cells per step and direction. A cell takes the input projection of
every step at once (``xp``: ``[T, B, gates*H]``, computed by one matmul before the
loop, biases folded in) and reads the row of its step through ``tidx`` (a 1-element
int tensor), so all steps share one compiled kernel. It returns the new state and
``y``, the step's slice of the layer output ``Y`` shaped ``[1, 1, B, H]`` so the
steps concatenate without reshapes. When ``lens`` (``[B]`` sequence lengths) is
given, a batch row past its length keeps its state and writes zeros to ``y`` (a row
of length 0 ends with a zero state, as in onnxruntime).

Activations are ``(name, alpha, beta)`` triples with ONNX's lower-cased names;
``clip`` (0 for none) bounds every gate's input before its activation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir import op as _op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor

Activation = tuple[str, float, float]
Expr = E.PrimExpr


def _c(value: float, like: Expr) -> Expr:
    return E.const(value, like.dtype)


def _softplus(x: Expr) -> Expr:
    # log(1 + e^x) without overflow for large x: max(x, 0) + log(1 + e^-|x|)
    return E.max_(x, _c(0.0, x)) + _op.log(_c(1.0, x) + _op.exp(-_op.abs(x)))


_ACTIVATIONS: dict[str, Callable[[Expr, float, float], Expr]] = {
    "relu": lambda x, a, b: E.max_(x, _c(0.0, x)),
    "tanh": lambda x, a, b: _op.tanh(x),
    "sigmoid": lambda x, a, b: _op.sigmoid(x),
    "affine": lambda x, a, b: x * _c(a, x) + _c(b, x),
    "leakyrelu": lambda x, a, b: E.select(x >= _c(0.0, x), x, x * _c(a, x)),
    "thresholdedrelu": lambda x, a, b: E.select(x > _c(a, x), x, _c(0.0, x)),
    "scaledtanh": lambda x, a, b: _c(a, x) * _op.tanh(x * _c(b, x)),
    "hardsigmoid": lambda x, a, b: E.min_(E.max_(x * _c(a, x) + _c(b, x), _c(0.0, x)), _c(1.0, x)),
    "elu": lambda x, a, b: E.select(x >= _c(0.0, x), x, _c(a, x) * (_op.exp(x) - _c(1.0, x))),
    "softsign": lambda x, a, b: x / (_c(1.0, x) + _op.abs(x)),
    "softplus": lambda x, a, b: _softplus(x),
}

ACTIVATION_NAMES = tuple(_ACTIVATIONS)


def activate(x: Expr, act: Activation, clip: float = 0.0) -> Expr:
    """``act`` applied to ``x`` after clipping it to ``[-clip, clip]`` (no clip when 0)."""
    name, alpha, beta = act
    fn = _ACTIVATIONS.get(name)
    if fn is None:
        raise ArgumentError(f"unknown recurrent activation '{name}'; known: {ACTIVATION_NAMES}")
    if clip > 0:
        x = E.min_(E.max_(x, _c(-clip, x)), _c(clip, x))
    return fn(x, alpha, beta)


def _dims(t: Tensor) -> tuple[int, ...]:
    return tuple(int(s.value) for s in t.shape)  # type: ignore[attr-defined]


def _recurrent(h: Tensor, rt: Tensor, offset: int, cols: int, name: str) -> Tensor:
    """``h @ rt[:, offset:offset+cols]``: the recurrent projection of the previous state."""
    batch, hidden = _dims(h)
    k = te.reduce_axis((0, hidden), name="k")
    return te.compute(
        (batch, cols),
        lambda b, j: te.sum(h[b, k] * rt[k, j + offset], axis=k),
        name=name,
    )


def _active(tidx: Tensor, lens: Tensor | None, b: Expr) -> Expr | None:
    """Whether batch row ``b`` is still inside its sequence at this step (None: always)."""
    if lens is None:
        return None
    return E.cast("int32", tidx[0]) < E.cast("int32", lens[b])


def _held(tidx: Tensor, prev: Expr) -> Expr:
    """The state of a row past its length: kept, except that a sequence of length 0 ends
    with a zero state (as onnxruntime gives); only such a row is inactive at step 0."""
    return E.select(E.cast("int32", tidx[0]).equal(0), _c(0.0, prev), prev)


def _step_outputs(
    new: Callable[[Expr, Expr], Expr], h: Tensor, tidx: Tensor, lens: Tensor | None, name: str
) -> tuple[Tensor, Tensor]:
    """The state ``h_new`` (kept where a row is past its length) and the output slice ``y``."""
    batch, hidden = _dims(h)

    def state(b: Expr, j: Expr) -> Expr:
        live = _active(tidx, lens, b)
        return new(b, j) if live is None else E.select(live, new(b, j), _held(tidx, h[b, j]))

    h_new = te.compute((batch, hidden), state, name=f"{name}_h")

    def out(d0: Expr, d1: Expr, b: Expr, j: Expr) -> Expr:
        live = _active(tidx, lens, b)
        return h_new[b, j] if live is None else E.select(live, h_new[b, j], _c(0.0, h_new[b, j]))

    y = te.compute((1, 1, batch, hidden), out, name=f"{name}_y")
    return h_new, y


def lstm_cell(
    xp: Tensor,
    tidx: Tensor,
    h: Tensor,
    c: Tensor,
    rt: Tensor,
    p: Tensor,
    lens: Tensor | None,
    acts: Sequence[Activation],
    clip: float = 0.0,
    input_forget: bool = False,
) -> list[Tensor]:
    """One LSTM step (gates i, o, f, c; peepholes ``p`` = [Pi, Po, Pf]): ``[h, c, y]``."""
    batch, hidden = _dims(h)
    f, g, hact = acts
    pre = _recurrent(h, rt, 0, 4 * hidden, "lstm_gates")

    def gate(b: Expr, j: Expr, k: int) -> Expr:
        return xp[tidx[0], b, j + k * hidden] + pre[b, j + k * hidden]

    def input_gate(b: Expr, j: Expr) -> Expr:
        return activate(gate(b, j, 0) + p[j] * c[b, j], f, clip)

    def cell(b: Expr, j: Expr) -> Expr:
        i = input_gate(b, j)
        forget = (
            _c(1.0, i) - i
            if input_forget
            else activate(gate(b, j, 2) + p[j + 2 * hidden] * c[b, j], f, clip)
        )
        value = forget * c[b, j] + i * activate(gate(b, j, 3), g, clip)
        live = _active(tidx, lens, b)
        return value if live is None else E.select(live, value, _held(tidx, c[b, j]))

    c_new = te.compute((batch, hidden), cell, name="lstm_c")

    def hidden_state(b: Expr, j: Expr) -> Expr:
        o = activate(gate(b, j, 1) + p[j + hidden] * c_new[b, j], f, clip)
        return o * activate(c_new[b, j], hact)

    h_new, y = _step_outputs(hidden_state, h, tidx, lens, "lstm")
    return [h_new, c_new, y]


def gru_cell(
    xp: Tensor,
    tidx: Tensor,
    h: Tensor,
    rt: Tensor,
    rbh: Tensor,
    lens: Tensor | None,
    acts: Sequence[Activation],
    clip: float = 0.0,
    linear_before_reset: bool = False,
) -> list[Tensor]:
    """One GRU step (gates z, r, h): ``[h, y, rh]``.

    ``rbh`` is the recurrence bias of the hidden gate (the other biases are in ``xp``).
    ``rh`` is ``r * h_prev`` (or ``r`` itself with ``linear_before_reset``), an output
    only so that it is computed once: without linear_before_reset the hidden gate's
    matmul reads it, and an inlined sigmoid would run once per multiply-add.
    """
    batch, hidden = _dims(h)
    f, g = acts
    zr = _recurrent(h, rt, 0, 2 * hidden, "gru_zr")

    def gate(b: Expr, j: Expr, k: int) -> Expr:
        return xp[tidx[0], b, j + k * hidden] + zr[b, j + k * hidden]

    def reset(b: Expr, j: Expr) -> Expr:
        r = activate(gate(b, j, 1), f, clip)
        return r if linear_before_reset else r * h[b, j]

    rh = te.compute((batch, hidden), reset, name="gru_rh")
    source = h if linear_before_reset else rh
    hh = _recurrent(source, rt, 2 * hidden, hidden, "gru_hh")

    def hidden_state(b: Expr, j: Expr) -> Expr:
        z = activate(gate(b, j, 0), f, clip)
        x_part = xp[tidx[0], b, j + 2 * hidden]
        if linear_before_reset:
            pre = x_part + rh[b, j] * (hh[b, j] + rbh[j])
        else:
            pre = x_part + hh[b, j] + rbh[j]
        cand = activate(pre, g, clip)
        return (_c(1.0, z) - z) * cand + z * h[b, j]

    h_new, y = _step_outputs(hidden_state, h, tidx, lens, "gru")
    return [h_new, y, rh]


def rnn_cell(
    xp: Tensor,
    tidx: Tensor,
    h: Tensor,
    rt: Tensor,
    lens: Tensor | None,
    act: Activation,
    clip: float = 0.0,
) -> list[Tensor]:
    """One simple-RNN step ``h = f(x W^T + h R^T + b)``: ``[h, y]``."""
    _, hidden = _dims(h)
    pre = _recurrent(h, rt, 0, hidden, "rnn_pre")

    def hidden_state(b: Expr, j: Expr) -> Expr:
        return activate(xp[tidx[0], b, j] + pre[b, j], act, clip)

    h_new, y = _step_outputs(hidden_state, h, tidx, lens, "rnn")
    return [h_new, y]
