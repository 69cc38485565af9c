"""Tensors, iteration variables and the operations that produce tensors.

A tensor expression program is a DAG of operations: a ``PlaceholderOp`` is an
input, a ``ComputeOp`` gives every element of its output as an expression of
its axis variables (possibly a reduction over reduce axes). Indexing a
``Tensor`` (``A[i, k]``) builds a ``ProducerLoad``; lowering later turns those
into buffer reads. Operations are immutable: schedule primitives such as
``cache_write`` make new operations rather than editing old ones.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ember.errors import ArgumentError
from ember.tir.expr import PrimExpr, ProducerLoad, Range, Var, convert
from ember.tir.functor import post_order_visit


class IterKind(enum.Enum):
    """What an iteration axis is for: data-parallel, reduction, or a bound GPU thread."""

    DATA_PAR = "data_par"
    REDUCE = "reduce"
    THREAD = "thread"


@dataclass(frozen=True, slots=True, eq=False)
class IterVar:
    """A loop variable with its domain: an axis of a compute, a reduce axis or a thread axis."""

    var: Var
    dom: Range | None
    kind: IterKind = IterKind.DATA_PAR
    thread_tag: str = ""

    # TVM's iteration types (``tvm.te.schedule.IterVar.Vectorized``...), the values of
    # ``iter_type`` here and of ``Stage.iter_var_attrs[iv].iter_type``
    DataPar = 0
    ThreadIndex = 1
    CommReduce = 2
    Ordered = 3
    DimInfo = 4
    Unrolled = 5
    Vectorized = 6
    Parallelized = 7
    Tensorized = 8

    @property
    def iter_type(self) -> int:
        """TVM's type of this axis: DataPar, ThreadIndex or CommReduce."""
        return {IterKind.DATA_PAR: 0, IterKind.THREAD: 1, IterKind.REDUCE: 2}[self.kind]

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"IterVar({self.var.name}, {self.dom!r}, {self.kind.value})"

    # Iter vars are used directly in index arithmetic, as TVM users write `A[i, k]`.
    def __add__(self, o: Any) -> PrimExpr:
        return self.var + o

    def __radd__(self, o: Any) -> PrimExpr:
        return o + self.var

    def __sub__(self, o: Any) -> PrimExpr:
        return self.var - o

    def __rsub__(self, o: Any) -> PrimExpr:
        return o - self.var

    def __mul__(self, o: Any) -> PrimExpr:
        return self.var * o

    def __rmul__(self, o: Any) -> PrimExpr:
        return o * self.var

    def __floordiv__(self, o: Any) -> PrimExpr:
        return self.var // o

    def __mod__(self, o: Any) -> PrimExpr:
        return self.var % o

    def __lt__(self, o: Any) -> PrimExpr:
        return self.var < o

    def __le__(self, o: Any) -> PrimExpr:
        return self.var <= o

    def __gt__(self, o: Any) -> PrimExpr:
        return self.var > o

    def __ge__(self, o: Any) -> PrimExpr:
        return self.var >= o

    # `iv == 0` builds an EQ node as TVM does; between iteration variables (schedule code's
    # `iv in stage.leaf_iter_vars`) and with other objects it stays identity.
    __hash__ = object.__hash__

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        if isinstance(o, IterVar) or not isinstance(o, (PrimExpr, bool, int, float)):
            return self is o
        return self.var == o

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        if isinstance(o, IterVar) or not isinstance(o, (PrimExpr, bool, int, float)):
            return self is not o
        return self.var != o


class Operation:
    """Base of tensor-producing operations."""

    __slots__ = ()
    name: str

    def output(self, index: int = 0) -> Tensor:
        if not 0 <= index < self.num_outputs:
            raise ArgumentError(
                f"'{self.name}' has {self.num_outputs} output(s); output({index}) does not exist"
            )
        return Tensor(self, index)

    @property
    def num_outputs(self) -> int:
        return 1

    def output_dtype(self, index: int) -> str:
        return self.dtype  # type: ignore[attr-defined]

    def output_shape(self, index: int) -> tuple[PrimExpr, ...]:
        """The shape of output ``index`` (one shape for all but a multi-output extern)."""
        return self.shape  # type: ignore[attr-defined,no-any-return]

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return ()


@dataclass(frozen=True, slots=True, eq=False)
class PlaceholderOp(Operation):
    """The operation of an input tensor: it has a shape and a dtype but computes nothing."""

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: str

    def __repr__(self) -> str:
        return f"placeholder({self.name})"


@dataclass(frozen=True, slots=True, eq=False)
class ComputeOp(Operation):
    """``out[axis...] = body``; ``body`` may be a ``Reduce`` over ``reduce_axis``.

    A compute whose lambda returns a tuple has several outputs of one shape, computed
    by one loop nest: ``body`` is the first one's expression and ``extra_bodies`` the
    others' (TVM keeps them all in ``body``; Ember's single-output code reads ``body``).
    """

    name: str
    axis: tuple[IterVar, ...]
    reduce_axis: tuple[IterVar, ...]
    body: PrimExpr
    tag: str = ""
    attrs: tuple[tuple[str, Any], ...] = ()
    extra_bodies: tuple[PrimExpr, ...] = ()

    @property
    def bodies(self) -> tuple[PrimExpr, ...]:
        """Every output's expression, in output order."""
        return (self.body, *self.extra_bodies)

    @property
    def num_outputs(self) -> int:
        return 1 + len(self.extra_bodies)

    def output_dtype(self, index: int) -> str:
        return self.bodies[index].dtype

    @property
    def shape(self) -> tuple[PrimExpr, ...]:
        return tuple(iv.dom.extent for iv in self.axis)  # type: ignore[union-attr]

    @property
    def dtype(self) -> str:
        return self.body.dtype

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        found: dict[tuple[int, int], Tensor] = {}

        def visit(node: Any) -> None:
            if isinstance(node, ProducerLoad):
                t = node.producer
                found.setdefault((id(t.op), t.value_index), t)

        for body in self.bodies:
            post_order_visit(body, visit, once=True)
        return tuple(found.values())

    def __repr__(self) -> str:
        return f"compute({self.name})"


@dataclass(frozen=True, slots=True, eq=False)
class Tensor:
    """The ``value_index``-th output of ``op``. Two Tensor objects of one op output are equal."""

    op: Operation
    value_index: int = 0

    @property
    def shape(self) -> tuple[PrimExpr, ...]:
        return self.op.output_shape(self.value_index)

    @property
    def dtype(self) -> str:
        return self.op.output_dtype(self.value_index)

    @property
    def name(self) -> str:
        """The op's name; ``name.v<k>`` for the k-th output of a multi-output op, as in TVM."""
        if self.op.num_outputs == 1:
            return self.op.name
        return f"{self.op.name}.v{self.value_index}"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Tensor)
            and other.op is self.op
            and other.value_index == self.value_index
        )

    def __hash__(self) -> int:
        return hash((id(self.op), self.value_index))

    def __getitem__(self, indices: Any) -> PrimExpr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        idx = tuple(convert(i.var if isinstance(i, IterVar) else i) for i in indices)
        if 0 < len(idx) < len(self.shape):
            return TensorSlice(self, idx)  # type: ignore[return-value]  # TVM's A[i][j]
        if len(idx) != len(self.shape):
            raise ArgumentError(
                f"tensor '{self.name}' has {len(self.shape)} dimensions, indexed with {len(idx)}"
            )
        for i in idx:
            if i.dtype not in ("int32", "int64"):
                raise ArgumentError(
                    f"index of tensor '{self.name}' must be an integer expression, got {i.dtype}"
                )
        return ProducerLoad(self.dtype, self, idx)

    def __call__(self, *indices: Any) -> PrimExpr:
        """TVM's call spelling of an element read: ``A(i, j)`` is ``A[i, j]``."""
        return self[tuple(indices)]

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={list(self.shape)!r}, {self.dtype})"


class TensorSlice:
    """``A[i]`` of a tensor of more dimensions, which TVM indexes further: ``A[i][j]`` is
    ``A[i, j]``. Only indexing is defined on it."""

    __slots__ = ("indices", "tensor")

    def __init__(self, tensor: Tensor, indices: tuple[PrimExpr, ...]) -> None:
        self.tensor, self.indices = tensor, indices

    def __getitem__(self, more: Any) -> Any:
        more = more if isinstance(more, tuple) else (more,)
        return self.tensor[(*self.indices, *more)]

    def __repr__(self) -> str:
        return f"{self.tensor.name}[{', '.join(map(str, self.indices))}]"

    def _incomplete(self, *_: Any) -> Any:
        raise ArgumentError(
            f"tensor '{self.tensor.name}' has {len(self.tensor.shape)} dimensions, indexed "
            f"with {len(self.indices)} ({self!r}); index every dimension before computing"
        )

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _incomplete
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _incomplete
    __neg__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __pow__ = _incomplete


def reduce_axes_of(name: str, axis: Any) -> tuple[IterVar, ...]:
    """A reducer's ``axis=`` argument (one reduce axis or a sequence) as a checked tuple."""
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    for ax in axes:
        if not isinstance(ax, IterVar) or ax.kind is not IterKind.REDUCE:
            raise ArgumentError(f"{name}: axis must be made with te.reduce_axis, got {ax!r}")
    return axes
