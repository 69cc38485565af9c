"""Symbolic tensors that record ONNX nodes while a module's ``forward`` runs.

``ember.frontend.nn`` builds models by tracing: ``export`` calls ``forward`` with
:class:`Tensor` placeholders, every operation on them appends an ONNX node to the
active :class:`Tracer`, and the result is a ``ModelProto`` that the ONNX importer
turns into an Ember graph (the same path an exported PyTorch model takes). Each
operation computes its output shape here, so ``forward`` can read ``x.shape`` to
reshape (multi-head attention needs the batch and sequence lengths).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError

OPSET = 20  # Gelu joined the default domain in opset 20


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise ArgumentError(f"nn: {op} cannot broadcast shapes {list(a)} and {list(b)}")
        out.append(max(x, y))
    return tuple(out)


class Tracer:
    """The ONNX nodes and initializers recorded so far, with fresh value names."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initializers: dict[str, np.ndarray] = {}
        self.counter = 0

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}_{self.counter}"

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        shape: tuple[int, ...],
        dtype: str = "float32",
        name: str = "",
        **attrs: Any,
    ) -> Tensor:
        from onnx import helper

        out = self.fresh(name or op_type.lower())
        node_name = name or out
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=node_name, **attrs))
        return Tensor(self, out, shape, dtype)

    def constant(self, array: np.ndarray, name: str) -> Tensor:
        array = np.asarray(array)
        key = name if name not in self.initializers else self.fresh(name)
        self.initializers[key] = array
        return Tensor(self, key, tuple(array.shape), str(array.dtype))


class Tensor:
    """A value of the traced model: a name, a static shape and a dtype."""

    def __init__(self, tracer: Tracer, name: str, shape: tuple[int, ...], dtype: str) -> None:
        self.tracer, self.name, self.shape, self.dtype = tracer, name, tuple(shape), dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _other(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            return other
        return self.tracer.constant(np.asarray(other, dtype=self.dtype), "scalar")

    def _binary(self, op: str, other: Any, swap: bool = False) -> Tensor:
        o = self._other(other)
        a, b = (o, self) if swap else (self, o)
        shape = broadcast_shapes(a.shape, b.shape, op)
        return self.tracer.node(op, [a.name, b.name], shape, self.dtype)

    def __add__(self, other: Any) -> Tensor:
        return self._binary("Add", other)

    def __radd__(self, other: Any) -> Tensor:
        return self._binary("Add", other, swap=True)

    def __sub__(self, other: Any) -> Tensor:
        return self._binary("Sub", other)

    def __rsub__(self, other: Any) -> Tensor:
        return self._binary("Sub", other, swap=True)

    def __mul__(self, other: Any) -> Tensor:
        return self._binary("Mul", other)

    def __rmul__(self, other: Any) -> Tensor:
        return self._binary("Mul", other, swap=True)

    def __truediv__(self, other: Any) -> Tensor:
        return self._binary("Div", other)

    def __matmul__(self, other: Tensor) -> Tensor:
        a, b = self.shape, other.shape
        if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
            raise ArgumentError(f"nn: matmul of shapes {list(a)} and {list(b)}")
        batch = broadcast_shapes(a[:-2], b[:-2], "matmul")
        return self.tracer.node("MatMul", [self.name, other.name], (*batch, a[-2], b[-1]))

    def reshape(self, *shape: int) -> Tensor:
        dims = list(shape[0] if len(shape) == 1 and isinstance(shape[0], Sequence) else shape)
        known = int(np.prod([d for d in dims if d != -1]))
        total = int(np.prod(self.shape))
        if dims.count(-1) > 1 or (known and total % known) or (-1 not in dims and known != total):
            raise ArgumentError(f"nn: cannot reshape {list(self.shape)} to {dims}")
        dims = [total // known if d == -1 else d for d in dims]
        target = self.tracer.constant(np.array(dims, dtype=np.int64), "shape")
        return self.tracer.node("Reshape", [self.name, target.name], tuple(dims), self.dtype)

    def transpose(self, *perm: int) -> Tensor:
        perm_t = tuple(perm[0] if len(perm) == 1 and isinstance(perm[0], Sequence) else perm)
        if sorted(perm_t) != list(range(self.ndim)):
            raise ArgumentError(f"nn: {list(perm_t)} is not a permutation of {self.ndim} axes")
        shape = tuple(self.shape[p] for p in perm_t)
        return self.tracer.node("Transpose", [self.name], shape, self.dtype, perm=list(perm_t))

    def softmax(self, axis: int = -1) -> Tensor:
        return self.tracer.node("Softmax", [self.name], self.shape, self.dtype, axis=axis)

    def unary(self, op_type: str, **attrs: Any) -> Tensor:
        return self.tracer.node(op_type, [self.name], self.shape, self.dtype, **attrs)

    def __repr__(self) -> str:
        return f"nn.Tensor({self.name}: {self.dtype}{list(self.shape)})"
