"""``te.extern``: a stage whose body is given as statements over buffers, as TVM's.

``te.extern(shape, inputs, fcompute)`` calls ``fcompute(ins, outs)`` once with a
buffer per input tensor and one for the output, and keeps the statement (or the
expression, evaluated for its effect) it returns — usually a call of a library or
of a registered Python function::

    B = te.extern((n,), [A], lambda ins, outs: tir.call_packed("my.func", ins[0], outs[0]))

Lowering (``tir/schedule/extern_lower.py``) substitutes the buffers of the real
tensors for these placeholder buffers; the inputs are computed whole before it,
and stages that read the output are scheduled as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.te.operation import _shape
from ember.tir.te.tensor import Operation, Tensor


@dataclass(frozen=True, slots=True, eq=False)
class ExternOp(Operation):
    """``body`` computes ``output_placeholders`` from ``input_placeholders`` (``inputs``'
    buffers); the op's tensor is the first output."""

    name: str
    inputs: tuple[Tensor, ...]
    input_placeholders: tuple[Buffer, ...]
    output_placeholders: tuple[Buffer, ...]
    body: S.Stmt
    tag: str = ""
    attrs: tuple[tuple[str, Any], ...] = ()

    @property
    def shape(self) -> tuple[E.PrimExpr, ...]:
        return self.output_placeholders[0].shape

    @property
    def dtype(self) -> str:
        return self.output_placeholders[0].dtype

    @property
    def num_outputs(self) -> int:
        return len(self.output_placeholders)

    def output_dtype(self, index: int) -> str:
        return self.output_placeholders[index].dtype

    def output_shape(self, index: int) -> tuple[E.PrimExpr, ...]:
        return self.output_placeholders[index].shape

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return self.inputs

    def __repr__(self) -> str:
        return f"extern({self.name})"


def extern(
    shape: Any,
    inputs: Sequence[Tensor],
    fcompute: Callable[[list[Buffer], list[Buffer]], S.Stmt | E.PrimExpr],
    name: str = "extern",
    dtype: str | Sequence[str] | None = None,
    in_buffers: Buffer | Sequence[Buffer] | None = None,
    out_buffers: Buffer | Sequence[Buffer] | None = None,
    tag: str = "",
    attrs: dict[str, Any] | None = None,
) -> Tensor:
    """The tensor ``fcompute(ins, outs)`` writes (see the module docstring).

    ``dtype`` defaults to the first input's; ``in_buffers``/``out_buffers`` give the
    buffers ``fcompute`` sees (their shapes and dtypes must match). A list of shapes makes
    an extern op of several outputs, as in TVM: ``fcompute`` gets one ``outs`` buffer per
    shape, ``dtype`` may be a list (one per output), and a list of tensors is returned.
    """
    several = _is_shape_list(shape)
    shapes = list(shape) if several else [shape]
    if not shapes:
        raise ArgumentError(f"extern '{name}': no output shape given")
    inputs = list(inputs)
    for t in inputs:
        if not isinstance(t, Tensor):
            raise ArgumentError(f"extern '{name}': inputs must be tensors, got {t!r}")
    if dtype is None:
        if not inputs:
            raise ArgumentError(f"extern '{name}': give dtype= (there are no inputs)")
        dtype = inputs[0].dtype
    dtypes = [dtype] * len(shapes) if isinstance(dtype, str) else list(dtype)
    if len(dtypes) != len(shapes):
        raise ArgumentError(
            f"extern '{name}': {len(dtypes)} dtypes for {len(shapes)} output shapes"
        )
    out_specs = [
        (_shape(sh, f"extern '{name}'"), dt.check_dtype(d), name if k == 0 else f"{name}.v{k}")
        for k, (sh, d) in enumerate(zip(shapes, dtypes))
    ]
    ins = _buffers(in_buffers, [(t.shape, t.dtype, t.name) for t in inputs], name, "in")
    outs = _buffers(out_buffers, out_specs, name, "out")
    body = fcompute(list(ins), list(outs))
    if isinstance(body, E.PrimExpr):
        body = S.Evaluate(body)
    if not isinstance(body, S.Stmt):
        raise ArgumentError(
            f"extern '{name}': fcompute must return a statement or an expression "
            f"(e.g. tir.call_packed(...)), got {body!r}"
        )
    op = ExternOp(name, tuple(inputs), ins, outs, body, tag, tuple((attrs or {}).items()))
    if len(outs) > 1:
        return [op.output(k) for k in range(len(outs))]  # type: ignore[return-value]
    return op.output(0)


def _is_shape_list(shape: Any) -> bool:
    return isinstance(shape, (list, tuple)) and bool(shape) and isinstance(shape[0], (list, tuple))


def _buffers(
    given: Buffer | Sequence[Buffer] | None,
    specs: Sequence[tuple[Sequence[E.PrimExpr], str, str]],
    name: str,
    which: str,
) -> tuple[Buffer, ...]:
    if given is None:
        return tuple(decl_buffer(tuple(s), d, name=n) for s, d, n in specs)
    bufs = (given,) if isinstance(given, Buffer) else tuple(given)
    if len(bufs) != len(specs):
        raise ArgumentError(
            f"extern '{name}': {len(bufs)} {which}_buffers for {len(specs)} tensors"
        )
    for buf, (shape, dtype, tname) in zip(bufs, specs):
        if buf.dtype != dtype or len(buf.shape) != len(shape):
            raise ArgumentError(
                f"extern '{name}': {which}_buffer '{buf.name}' is {buf.dtype} with "
                f"{len(buf.shape)} dimensions, but tensor '{tname}' is {dtype} with {len(shape)}"
            )
    return bufs
