"""The Ember operator registry: what a graph op is, and how to add one.

A graph :class:`~ember.frontend.graph.Node` names an Ember op (``"conv"``,
``"add"``); this table says what that op means. Each op has

- ``name``: lower-case, unique (``"max_pool"``); the graph printer shows it.
- ``kind``: its :class:`~ember.frontend.op_kinds.OpKind` (fusion and the generic
  schedules read it: ELEMWISE/BROADCAST/INJECTIVE get the injective schedule,
  COMM_REDUCE/OUT_ELEMWISE_FUSABLE the reduction one).
- ``infer(types, attrs) -> list[TensorType]``: the shape and dtype rule. It gets
  one :class:`TensorType` per input and the node's attributes, and returns the
  output types. Optional inputs are trailing: an op taking 2 to 3 inputs sees 2
  when the bias is absent (a converter never passes a hole in the middle; it
  passes a constant or an attribute instead). It raises
  :class:`ember.ArgumentError` for inputs the op cannot take (the importer adds
  which ONNX node it was). Symbolic dims (strings) may pass through it.
- ``compute(inputs, attrs) -> list[te.Tensor]``: the tensor expression, built from
  one ``te.Tensor`` per input (placeholders, or an earlier op's outputs when ops are
  fused). It holds no schedule. Put the arithmetic in a pure function in
  ``tir/topi/`` and call it from here, so tuned templates and the graph share it.
  It may build several stages: the generic schedules (``codegen_*/schedules/generic.py``)
  inline every stage without a reduction except those tagged ``"pad"``, and keep
  reductions at the root.
- ``num_inputs``: (min, max) inputs it takes; ``num_outputs`` (default 1).

Attributes are normalized by the converter before they reach the op: plain
hashable values only (int, float, str, bool, tuples of them; never lists or numpy
arrays), every attribute the op reads present (no defaults hidden in ``compute``),
so ``(op, attrs, input types)`` is a complete cache key for the kernel (emitting a
node checks this, see :meth:`OpDef.check_attrs`). An op's
inputs are tensors only; anything that must be known at compile time (a reshape's
target shape, pads) is an attribute.

Worked example: a family module ``frontend/ops/<family>.py`` adding ``leaky_relu``::

    from ember.frontend.op_kinds import ELEMWISE
    from ember.frontend.ops.registry import register_op, same_as_input
    from ember.tir import topi

    @register_op("leaky_relu", ELEMWISE, infer=same_as_input, num_inputs=1)
    def leaky_relu(inputs, attrs):
        # attrs: {"alpha": float}, set by the ONNX converter
        return [topi.leaky_relu(inputs[0], attrs["alpha"])]

with ``tir/topi/elementwise.py`` holding the compute::

    def leaky_relu(x: Tensor, alpha: float) -> Tensor:
        return te.compute(x.shape, lambda *i: te.select(x[i] > 0, x[i], x[i] * alpha),
                          name="leaky_relu", tag="elementwise")

then list the module in ``frontend/ops/__init__.py`` (importing it registers the
ops), add an ONNX converter (see ``frontend/onnx_import/registry.py``), and test
against onnxruntime in ``tests/frontend/ops/`` with ``tests/frontend/onnx_models.py``
(``check_against_ort(single_node("LeakyRelu", {"x": x}, alpha=0.2), {"x": x})``);
``tests/frontend/test_node_suite.py`` picks up ONNX's node tests of the new op type.
The compiler finds the op by name through :func:`get_op`; nothing else needs editing.
For a custom shape rule, write ``infer`` as a function of ``(types, attrs)`` returning
``[TensorType(shape, dtype)]`` (see ``frontend/ops/transform.py`` for reshape and concat).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ember.errors import ArgumentError, InternalError
from ember.frontend.graph import TensorType
from ember.frontend.narrow_dtypes import check_op_takes
from ember.frontend.op_kinds import OpKind

InferFn = Callable[[Sequence[TensorType], dict[str, Any]], list[TensorType]]
ComputeFn = Callable[[Sequence[Any], dict[str, Any]], list[Any]]


@dataclass(frozen=True)
class OpDef:
    """One registered op: its pattern kind, shape rule and compute."""

    name: str
    kind: OpKind
    infer: InferFn
    compute: ComputeFn
    num_inputs: tuple[int, int]
    num_outputs: int = 1
    doc: str = ""

    def check_attrs(self, attrs: dict[str, Any]) -> None:
        """Attributes must be plain hashable values (they key the kernel cache)."""
        for key, value in attrs.items():
            if not _plain(value):
                raise InternalError(
                    f"op '{self.name}': attribute '{key}' = {value!r} is not a plain value "
                    "(int, float, str, bool, None or tuples of them); normalize it in the converter"
                )

    def infer_types(self, types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        """``infer`` with the arity checked first, so rules can unpack their inputs, and an
        element type the op cannot compute on (float8 in an ``add``) refused."""
        lo, hi = self.num_inputs
        if not lo <= len(types) <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise ArgumentError(f"op '{self.name}' takes {want} inputs, got {len(types)}")
        check_op_takes(self.name, [t.dtype for t in types])
        out = self.infer(types, attrs)
        if len(out) != self.num_outputs:
            raise InternalError(
                f"op '{self.name}' inferred {len(out)} outputs, declares {self.num_outputs}"
            )
        return out


def _plain(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


_OPS: dict[str, OpDef] = {}


def register_op(
    name: str,
    kind: OpKind,
    infer: InferFn,
    num_inputs: int | tuple[int, int] = 1,
    num_outputs: int = 1,
) -> Callable[[ComputeFn], ComputeFn]:
    """Decorator on an op's compute: registers ``name`` with its kind and shape rule."""
    arity = (num_inputs, num_inputs) if isinstance(num_inputs, int) else tuple(num_inputs)

    def deco(compute: ComputeFn) -> ComputeFn:
        if name in _OPS:
            raise InternalError(f"op '{name}' is registered twice")
        _OPS[name] = OpDef(name, kind, infer, compute, arity, num_outputs, compute.__doc__ or "")
        return compute

    return deco


def get_op(name: str) -> OpDef:
    """The definition of op ``name``. Every family is registered: this module is reached
    only through its package, whose ``__init__`` imports them all."""
    try:
        return _OPS[name]
    except KeyError:
        raise InternalError(f"no Ember op named '{name}'") from None


def list_ops() -> list[str]:
    """Every registered Ember op name, after importing the modules that register them."""
    return sorted(_OPS)


# ---- shape rules shared by many ops -------------------------------------------------


def same_as_input(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    """The output has the first input's shape and dtype (unary elementwise ops)."""
    return [types[0]]


def broadcast_shapes(a: Sequence[Any], b: Sequence[Any]) -> tuple[Any, ...]:
    """numpy's broadcasting of two shapes; symbolic dims broadcast with 1 or themselves."""
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ArgumentError(f"shapes {list(a)} and {list(b)} do not broadcast")
    return tuple(out)


def broadcast_same_dtype(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    """Output shape broadcast over all inputs; all inputs must share one dtype."""
    shape: tuple[Any, ...] = ()
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise ArgumentError(f"inputs have different dtypes {sorted(dtypes)}")
    for t in types:
        shape = broadcast_shapes(shape, t.shape)
    return [TensorType(shape, dtypes.pop())]


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """A possibly negative axis as an index in ``range(ndim)``; ArgumentError if out of range."""
    if not -ndim <= axis < ndim:
        raise ArgumentError(f"{what} {axis} is out of range for a {ndim}-D tensor")
    return axis % ndim
