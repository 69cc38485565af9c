"""Symbolic tensors that record ONNX nodes while a module's ``forward`` runs.

``ember.frontend.nn`` builds models by tracing: ``export`` calls ``forward`` with
:class:`Tensor` placeholders, every operation on them appends an ONNX node to the
active :class:`Tracer`, and the result is a ``ModelProto`` that the ONNX importer
turns into an Ember graph (the same path an exported PyTorch model takes). Each
operation computes its output shape and dtype here, so ``forward`` can read
``x.shape`` to reshape (multi-head attention needs the batch and sequence lengths).

Arithmetic follows PyTorch's type promotion (``torch.result_type``): an integer
tensor times a Python float is float32 (PyTorch's default float dtype), ``/`` of
integers is float32, and a Python number never widens a tensor of its own kind
(``float16 * 2.5`` stays float16). The operands are cast to the result dtype with
ONNX ``Cast`` nodes before the operator, since ONNX arithmetic needs equal dtypes.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError

OPSET = 20  # Gelu joined the default domain in opset 20

# PyTorch's dtype for a Python number that promotes a tensor of a lower kind.
_DEFAULT_FOR_KIND = {0: "bool", 1: "int64", 2: "float32"}


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    """The numpy-broadcast shape of ``a`` and ``b``; a mismatch is an error naming ``op``."""
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise ArgumentError(f"nn: {op} cannot broadcast shapes {list(a)} and {list(b)}")
        out.append(max(x, y))
    return tuple(out)


def dtype_kind(dtype: str) -> int:
    """PyTorch's promotion category: 0 bool, 1 integer, 2 floating point."""
    kind = np.dtype(dtype).kind
    return {"b": 0, "i": 1, "u": 1, "f": 2}[kind]


def _promote_within(dtypes: Sequence[str]) -> str:
    """The promoted dtype of dtypes, PyTorch's way: the highest kind wins outright (int64 +
    float16 is float16, where numpy says float64); within one kind, numpy's lattice."""
    top = max(dtype_kind(d) for d in dtypes)
    same = [d for d in dtypes if dtype_kind(d) == top]
    out = np.dtype(same[0])
    for d in same[1:]:
        out = np.promote_types(out, d)
    if dtype_kind(str(out)) != top:  # uint64 with a signed int: numpy goes to float64
        raise ArgumentError(f"nn: no integer dtype holds both of {sorted(set(same))}")
    return str(out)


def result_dtype(tensors: Sequence[str], zero_dim: Sequence[str], numbers: Sequence[str]) -> str:
    """``torch.result_type`` over dimensioned tensors, 0-d arrays and Python numbers (given by
    the numpy dtype they would have): a 0-d array or number only counts when its kind is higher
    than the tensors'; a number then brings PyTorch's default dtype for its kind."""
    out = _promote_within(tensors)
    if zero_dim and max(map(dtype_kind, zero_dim)) > dtype_kind(out):
        out = _promote_within([out, *zero_dim])
    if numbers and max(map(dtype_kind, numbers)) > dtype_kind(out):
        out = _DEFAULT_FOR_KIND[max(map(dtype_kind, numbers))]
    return out


def _onnx_elem(dtype: str) -> int:
    # optional dependency: onnx
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


class Tracer:
    """The ONNX nodes and initializers recorded so far, with fresh value names."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self.nodes: list[Any] = []
        self.initializers: dict[str, np.ndarray] = {}
        self.counter = 0
        self.used: set[str] = set(reserved)  # the inputs' names, then every name handed out

    def fresh(self, base: str) -> str:
        while True:
            self.counter += 1
            name = f"{base}_{self.counter}"
            if name not in self.used:
                self.used.add(name)
                return name

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        shape: tuple[int, ...],
        dtype: str = "float32",
        name: str = "",
        **attrs: Any,
    ) -> Tensor:
        # optional dependency: onnx
        from onnx import helper

        out = self.fresh(name or op_type.lower())
        node_name = name or out
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=node_name, **attrs))
        return Tensor(self, out, shape, dtype)

    def constant(self, array: np.ndarray, name: str) -> Tensor:
        array = np.asarray(array)
        key = name if name not in self.used else self.fresh(name)
        self.used.add(key)
        self.initializers[key] = array
        return Tensor(self, key, tuple(array.shape), str(array.dtype))


class Tensor:
    """A value of the traced model: a name, a static shape and a dtype."""

    # numpy defers to our reflected operators (``np.float32(2) * x``, ``array @ x``)
    # instead of broadcasting over the Tensor as an object.
    __array_ufunc__ = None

    def __init__(self, tracer: Tracer, name: str, shape: tuple[int, ...], dtype: str) -> None:
        self.tracer, self.name, self.shape, self.dtype = tracer, name, tuple(shape), dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    # -- dtype handling ---------------------------------------------------------------

    def to(self, dtype: str) -> Tensor:
        """This tensor cast to ``dtype`` (an ONNX ``Cast``; the same tensor if it already is)."""
        dtype = str(np.dtype(dtype))
        if dtype == self.dtype:
            return self
        return self.tracer.node("Cast", [self.name], self.shape, dtype, to=_onnx_elem(dtype))

    def float(self) -> Tensor:
        return self.to("float32")

    def _operand(self, other: Any, op: str) -> tuple[Any, str, str]:
        """``other`` as (Tensor or numpy value, its dtype, its role: tensor/zero_dim/number)."""
        if isinstance(other, Tensor):
            return other, other.dtype, "tensor"
        if isinstance(other, (bool, int, float, np.generic)) and not isinstance(
            other, (complex, np.complexfloating)
        ):
            value = np.asarray(other)
            if value.dtype.kind not in "biuf":
                raise ArgumentError(f"nn: {op} with a {type(other).__name__} is not supported")
            return value, str(value.dtype), "number"
        try:
            value = np.asarray(other)
        except (TypeError, ValueError) as e:
            raise ArgumentError(f"nn: {op} with {type(other).__name__} is not supported") from e
        if value.dtype.kind not in "biuf":
            raise ArgumentError(f"nn: {op} with an array of dtype {value.dtype} is not supported")
        return value, str(value.dtype), "zero_dim" if value.ndim == 0 else "tensor"

    def _as_tensor(self, value: Any, dtype: str) -> Tensor:
        if isinstance(value, Tensor):
            return value.to(dtype)
        try:
            array = np.asarray(value).astype(dtype)  # wraps like PyTorch: int8 + 300
        except OverflowError as e:
            raise ArgumentError(f"nn: {value!r} does not fit in {dtype}") from e
        return self.tracer.constant(array, "scalar" if array.ndim == 0 else "const")

    def _promoted(self, other: Any, op: str, swap: bool) -> tuple[Tensor, Tensor, str]:
        """Both operands, in order and cast to their PyTorch result dtype."""
        value, dtype, role = self._operand(other, op)
        roles: dict[str, list[str]] = {"tensor": [self.dtype], "zero_dim": [], "number": []}
        roles[role].append(dtype)
        out = result_dtype(roles["tensor"], roles["zero_dim"], roles["number"])
        a, b = self.to(out), self._as_tensor(value, out)
        return (b, a, out) if swap else (a, b, out)

    def _binary(self, op: str, other: Any, swap: bool = False, true_div: bool = False) -> Tensor:
        a, b, dtype = self._promoted(other, op, swap)
        if true_div and dtype_kind(dtype) < 2:  # PyTorch: int / int is float32
            a, b, dtype = a.float(), b.float(), "float32"
        if dtype == "bool":
            raise ArgumentError(f"nn: {op} of two bool tensors is not supported; cast with .to()")
        shape = broadcast_shapes(a.shape, b.shape, op)
        return self.tracer.node(op, [a.name, b.name], shape, dtype)

    # -- arithmetic ------------------------------------------------------------------

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
        return self._binary("Div", other, true_div=True)

    def __rtruediv__(self, other: Any) -> Tensor:
        return self._binary("Div", other, swap=True, true_div=True)

    def __floordiv__(self, other: Any) -> Tensor:
        return self._floor_div(other, swap=False)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return self._floor_div(other, swap=True)

    def __mod__(self, other: Any) -> Tensor:
        return self._remainder(other, swap=False)

    def __rmod__(self, other: Any) -> Tensor:
        return self._remainder(other, swap=True)

    def __pow__(self, other: Any) -> Tensor:
        return self._pow(other, swap=False)

    def __rpow__(self, other: Any) -> Tensor:
        return self._pow(other, swap=True)

    def __neg__(self) -> Tensor:
        if self.dtype == "bool":
            raise ArgumentError("nn: negation of a bool tensor is not supported (as in PyTorch)")
        return self.unary("Neg")

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return self.unary("Abs")

    def _floor_div(self, other: Any, swap: bool) -> Tensor:
        """PyTorch's ``//`` rounds toward minus infinity (ONNX ``Div`` truncates integers):
        integers as (a - a mod b) / b, which is exact; floats as floor(a / b)."""
        a, b, dtype = self._promoted(other, "FloorDiv", swap)
        if dtype_kind(dtype) == 2:
            return a._binary("Div", b).unary("Floor")
        return a._binary("Sub", a._binary("Mod", b))._binary("Div", b)

    def _remainder(self, other: Any, swap: bool) -> Tensor:
        """PyTorch's ``%`` takes the divisor's sign (Python's rule): ONNX ``Mod`` with fmod=0
        for integers; a - floor(a / b) * b for floats, where ONNX offers only C's fmod."""
        a, b, dtype = self._promoted(other, "Mod", swap)
        if dtype_kind(dtype) == 2:
            return a - a._binary("Div", b).unary("Floor") * b
        if dtype == "bool":
            raise ArgumentError("nn: % of two bool tensors is not supported; cast with .to()")
        shape = broadcast_shapes(a.shape, b.shape, "Mod")
        return self.tracer.node("Mod", [a.name, b.name], shape, dtype, fmod=0)

    def _pow(self, other: Any, swap: bool) -> Tensor:
        value, _, role = self._operand(other, "Pow")
        if (
            not swap
            and role == "number"
            and dtype_kind(self.dtype) < 2
            and np.asarray(value).dtype.kind in "iu"
            and int(value) < 0
        ):
            raise ArgumentError("nn: integers to negative integer powers are not allowed")
        return self._binary("Pow", other, swap=swap)

    def __matmul__(self, other: Any) -> Tensor:
        return self._matmul(other, swap=False)

    def __rmatmul__(self, other: Any) -> Tensor:
        return self._matmul(other, swap=True)

    def _matmul(self, other: Any, swap: bool) -> Tensor:
        value, dtype, _ = self._operand(other, "matmul")
        o = value if isinstance(value, Tensor) else self.tracer.constant(value, "const")
        lhs, rhs = (o, self) if swap else (self, o)
        a, b = lhs.shape, rhs.shape
        if lhs.dtype != rhs.dtype:  # PyTorch refuses mixed-dtype matmul too
            raise ArgumentError(f"nn: matmul needs one dtype, got {lhs.dtype} and {rhs.dtype}")
        if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
            raise ArgumentError(f"nn: matmul of shapes {list(a)} and {list(b)}")
        batch = broadcast_shapes(a[:-2], b[:-2], "matmul")
        return self.tracer.node("MatMul", [lhs.name, rhs.name], (*batch, a[-2], b[-1]), lhs.dtype)

    # -- shape ----------------------------------------------------------------------

    def reshape(self, *shape: int) -> Tensor:
        dims = list(shape[0] if len(shape) == 1 and isinstance(shape[0], Sequence) else shape)
        try:
            dims = [operator.index(d) for d in dims]
        except TypeError as e:
            raise ArgumentError(f"nn: reshape dims must be ints, got {dims}") from e
        known = int(np.prod([d for d in dims if d != -1]))
        total = int(np.prod(self.shape))
        if (
            dims.count(-1) > 1
            or any(d < -1 for d in dims)
            or (known and total % known)
            or (-1 not in dims and known != total)
        ):
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
        if not -self.ndim <= axis < self.ndim:
            raise ArgumentError(f"nn: softmax dim {axis} is out of range for {self.ndim} dims")
        return self.tracer.node("Softmax", [self.name], self.shape, self.dtype, axis=axis)

    def mean(self, axes: Sequence[int], keepdims: bool = True) -> Tensor:
        """ReduceMean over ``axes`` (opset 18+: axes as an input)."""
        axes = sorted(a % self.ndim for a in axes)
        shape = tuple(
            1 if i in axes else d for i, d in enumerate(self.shape) if keepdims or i not in axes
        )
        ax = self.tracer.constant(np.array(axes, dtype=np.int64), "axes")
        return self.tracer.node(
            "ReduceMean", [self.name, ax.name], shape, self.dtype, keepdims=int(keepdims)
        )

    def unary(self, op_type: str, **attrs: Any) -> Tensor:
        return self.tracer.node(op_type, [self.name], self.shape, self.dtype, **attrs)

    def __repr__(self) -> str:
        return f"nn.Tensor({self.name}: {self.dtype}{list(self.shape)})"
