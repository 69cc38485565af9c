"""Tensor intrinsics: a small computation declared in TE, and the code that performs it.

``decl_tensor_intrin(op, fcompute)`` (TVM's ``te.decl_tensor_intrin``) pairs the
computation of ``op`` (a compute over placeholders, e.g. a 16-lane dot product of 4)
with the statements that implement it (a call of a hardware instruction or of a C
function). ``fcompute(ins, outs)`` receives one :class:`Buffer` per input tensor and
one per output and returns the body, or a ``(body, reset, update)`` triple: ``reset``
zeroes the outputs and ``update`` accumulates into them, which tensorizing a reduction
whose reduce axis is split outside the tensorized loops needs. A returned expression
(a bare ``call_extern``) becomes an ``Evaluate``. ``s[C].tensorize(axis, intrin)``
(:mod:`ember.tir.schedule.tensorize`) matches a stage's loop nest against ``op`` and
puts the body in its place, with each buffer bound to the region of the real tensor.

The buffers come from ``binds`` where given (``decl_buffer`` with symbolic strides or
an ``elem_offset`` variable, as in TVM); otherwise they are dense, with an
``elem_offset`` variable so they bind anywhere in a tensor whose trailing strides
match. ``default_buffer_params`` (``{"scope": ..., "offset_factor": ...}``) sets the
defaults' scope.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """A declared intrinsic: its computation, its buffers and the statements for it."""

    name: str
    op: ComputeOp
    inputs: tuple[Tensor, ...]
    buffers: tuple[Buffer, ...]  # one per input, then one per output
    body: S.Stmt | None
    reduce_init: S.Stmt | None
    reduce_update: S.Stmt | None
    # variables of ``op`` that tensorizing binds to the stage's values (TVM's scalar_params)
    scalar_params: tuple[E.Var, ...] = ()

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"


def _as_stmt(x: Any, what: str, name: str) -> S.Stmt | None:
    if x is None or isinstance(x, S.Stmt):
        return x
    if isinstance(x, E.PrimExpr):
        return S.Evaluate(x)
    raise ArgumentError(
        f"decl_tensor_intrin '{name}': fcompute's {what} must be a statement (ir_builder's "
        f"get()) or an expression, got {type(x).__name__}"
    )


def _bound_buffer(
    t: Tensor, binds: Mapping[Tensor, Buffer], params: Mapping[str, Any], name: str
) -> Buffer:
    for key, buf in binds.items():
        if key is t or (key.op is t.op and key.value_index == t.value_index):
            if not isinstance(buf, Buffer):
                raise ArgumentError(f"decl_tensor_intrin '{name}': binds[{t.name}] is no buffer")
            if tuple(map(E.const_value, buf.shape)) != tuple(map(E.const_value, t.shape)):
                raise ArgumentError(
                    f"decl_tensor_intrin '{name}': the buffer bound to '{t.name}' has shape "
                    f"{list(buf.shape)}, the tensor {list(t.shape)}"
                )
            return buf
    return decl_buffer(
        t.shape,
        t.dtype,
        name=t.name,
        scope=params.get("scope", "global"),
        elem_offset=E.Var(f"{t.name}_elem_offset", "int32"),
    )


def decl_tensor_intrin(
    op: Operation | Tensor,
    fcompute: Callable[[list[Buffer], list[Buffer]], Any],
    name: str = "tensor_intrin",
    binds: Mapping[Tensor, Buffer] | None = None,
    default_buffer_params: Mapping[str, Any] | None = None,
    scalar_params: Sequence[E.Var] | None = None,
) -> TensorIntrin:
    """Declare a tensor intrinsic for ``op``'s computation, implemented by ``fcompute``.

    ``scalar_params`` (TVM's): variables of ``op``'s computation that stand for any scalar
    expression of the stage tensorized (``x[i] * v + w`` matches ``A[i, j] * (i + 1) +
    3.0`` with ``v = i + 1``, ``w = 3.0``); ``fcompute(ins, outs, scalar_params)`` then
    gets them as a third argument, and tensorizing puts the matched values in its
    statements. A value must not change inside the tensorized region."""
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp) or op.num_outputs != 1:
        raise ArgumentError(
            f"decl_tensor_intrin '{name}': op must be a single-output te.compute, got {op!r}"
        )
    inputs = tuple(op.input_tensors)
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise ArgumentError(
                f"decl_tensor_intrin '{name}': input '{t.name}' must be a te.placeholder"
            )
    binds = dict(binds or {})
    params = dict(default_buffer_params or {})
    bufs = [_bound_buffer(t, binds, params, name) for t in (*inputs, op.output(0))]
    sp = tuple(scalar_params or ())
    for v in sp:
        if not isinstance(v, E.Var):
            raise ArgumentError(f"decl_tensor_intrin '{name}': scalar_params are vars, got {v!r}")
    if sp:
        result = fcompute(bufs[: len(inputs)], bufs[len(inputs) :], list(sp))
    else:
        result = fcompute(bufs[: len(inputs)], bufs[len(inputs) :])
    if isinstance(result, (tuple, list)):
        if len(result) != 3:
            raise ArgumentError(
                f"decl_tensor_intrin '{name}': fcompute returns a body or a (body, reset, "
                f"update) triple, got {len(result)} items"
            )
        body, reset, update = (_as_stmt(x, w, name) for x, w in zip(result, _PARTS))
    else:
        body, reset, update = _as_stmt(result, "body", name), None, None
    if body is None and update is None:
        raise ArgumentError(f"decl_tensor_intrin '{name}': fcompute gave neither body nor update")
    return TensorIntrin(name, op, inputs, tuple(bufs), body, reset, update, sp)


_PARTS = ("body", "reset", "update")
