"""Expression nodes of Ember's loop IR (TIR) and of tensor expressions.

Every node is a frozen, slotted dataclass with identity equality: two ``Var("i")``
are different variables, and nodes can be dict keys without hashing whole trees.
Structural comparison lives in :mod:`ember.tir.structural`. Operators on
expressions build nodes (``a + b``, ``i // 4``, ``x < y``); ``==`` is *not*
overloaded, use :func:`eq`. Python ints and floats are promoted to constants of
the other operand's dtype, the way a user writes index arithmetic.

Closed families carry an enum operator (``BinOp(op=BinaryOp.ADD)``,
``Call(op=Intrinsic.EXP)``) so that backends, the interpreter and the
simplifier key their behaviour on tables.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ember.errors import ArgumentError
from ember.tir import dtype as dt

if TYPE_CHECKING:
    from ember.tir.buffer import Buffer


class BinaryOp(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"  # true division; floats only
    FLOORDIV = "//"
    FLOORMOD = "%"
    TRUNCDIV = "truncdiv"
    TRUNCMOD = "truncmod"
    MIN = "min"
    MAX = "max"
    AND = "and"
    OR = "or"


class CompareOp(enum.Enum):
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


class Intrinsic(enum.Enum):
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    TANH = "tanh"
    ERF = "erf"
    SIGMOID = "sigmoid"
    POW = "pow"
    ABS = "abs"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    FMA = "fma"
    SIN = "sin"
    COS = "cos"
    # Exchanges between the 32 lanes of a GPU warp, as CUDA's ``__shfl_xor_sync`` and
    # ``__shfl_down_sync`` with a full mask: ``(value, lane offset)`` gives the value of
    # lane ``lane ^ offset`` (``lane + offset``), or the lane's own one past the warp.
    # Every lane of the warp must execute them together, so only device code has them.
    WARP_SHUFFLE_XOR = "warp_shuffle_xor"
    WARP_SHUFFLE_DOWN = "warp_shuffle_down"
    # The next ones are markers that carry no arithmetic value.
    LIKELY = "likely"  # a hint that a condition is usually true (loop partitioning)


WARP_SHUFFLES = frozenset({Intrinsic.WARP_SHUFFLE_XOR, Intrinsic.WARP_SHUFFLE_DOWN})
WARP_SIZE = 32  # lanes of a warp: what a full shuffle mask names


class PrimExpr:
    """Base of every expression; provides the arithmetic operator overloads."""

    __slots__ = ()
    dtype: str

    # -- arithmetic -----------------------------------------------------------
    def __add__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.ADD, self, other)

    def __radd__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.ADD, other, self)

    def __sub__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.SUB, self, other)

    def __rsub__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.SUB, other, self)

    def __mul__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.MUL, self, other)

    def __rmul__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.MUL, other, self)

    def __truediv__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.DIV, self, other)

    def __rtruediv__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.DIV, other, self)

    def __floordiv__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.FLOORDIV, self, other)

    def __rfloordiv__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.FLOORDIV, other, self)

    def __mod__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.FLOORMOD, self, other)

    def __rmod__(self, other: Any) -> PrimExpr:
        return _binary(BinaryOp.FLOORMOD, other, self)

    def __neg__(self) -> PrimExpr:
        return _binary(BinaryOp.SUB, const(0, self.dtype), self)

    # -- comparisons (== and != stay identity; use eq()/ne()) ----------------------
    def __lt__(self, other: Any) -> PrimExpr:
        return _compare(CompareOp.LT, self, other)

    def __le__(self, other: Any) -> PrimExpr:
        return _compare(CompareOp.LE, self, other)

    def __gt__(self, other: Any) -> PrimExpr:
        return _compare(CompareOp.GT, self, other)

    def __ge__(self, other: Any) -> PrimExpr:
        return _compare(CompareOp.GE, self, other)

    def __and__(self, other: Any) -> PrimExpr:
        return logical_and(self, other)

    def __or__(self, other: Any) -> PrimExpr:
        return logical_or(self, other)

    def __invert__(self) -> PrimExpr:
        return logical_not(self)

    def __bool__(self) -> bool:
        raise TypeError(
            "a symbolic expression has no truth value; build conditions with "
            "te.if_then_else / te.select, and compare with ember.tir.eq()"
        )

    def astype(self, dtype: str) -> PrimExpr:
        return cast(dtype, self)

    def __repr__(self) -> str:
        from ember.tir.printer import expr_to_str

        return expr_to_str(self)


def _node(cls: type) -> type:
    return dataclass(frozen=True, slots=True, eq=False, repr=False)(cls)


@_node
class Var(PrimExpr):
    """A scalar variable: loop index, shape symbol, or let-bound value."""

    name: str
    dtype: str = "int32"


@_node
class SizeVar(Var):
    """A variable known to be ``>= 0`` (TVM's ``te.size_var``): a size the analyzer may
    assume non-negative when it simplifies or bounds expressions."""


@_node
class IntImm(PrimExpr):
    dtype: str
    value: int


@_node
class FloatImm(PrimExpr):
    dtype: str
    value: float


@_node
class StringImm(PrimExpr):
    value: str
    dtype: str = "handle"


@_node
class BinOp(PrimExpr):
    dtype: str
    op: BinaryOp
    a: PrimExpr
    b: PrimExpr


@_node
class Compare(PrimExpr):
    dtype: str  # "bool", or "boolxN" for vectors
    op: CompareOp
    a: PrimExpr
    b: PrimExpr


@_node
class Not(PrimExpr):
    dtype: str
    a: PrimExpr


@_node
class Select(PrimExpr):
    """``cond ? true_value : false_value``; both branches may be evaluated."""

    dtype: str
    cond: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr


@_node
class Cast(PrimExpr):
    dtype: str
    value: PrimExpr


@_node
class Call(PrimExpr):
    """A math intrinsic; every backend maps each :class:`Intrinsic` in a table."""

    dtype: str
    op: Intrinsic
    args: tuple[PrimExpr, ...]


@_node
class Ramp(PrimExpr):
    """The vector ``base, base+stride, ..., base+(lanes-1)*stride``."""

    dtype: str
    base: PrimExpr
    stride: PrimExpr
    lanes: int


@_node
class Broadcast(PrimExpr):
    dtype: str
    value: PrimExpr
    lanes: int


@_node
class Let(PrimExpr):
    dtype: str
    var: Var
    value: PrimExpr
    body: PrimExpr


@_node
class BufferLoad(PrimExpr):
    """Read of ``buffer[indices]``; after flattening, one index. A Ramp index reads a vector."""

    dtype: str
    buffer: Buffer
    indices: tuple[PrimExpr, ...]


@_node
class ProducerLoad(PrimExpr):
    """Read of a tensor-expression Tensor; exists only before lowering."""

    dtype: str
    producer: Any  # ember.tir.te.Tensor
    indices: tuple[PrimExpr, ...]


@_node
class CommReducer:
    """A commutative reducer: ``combine(lhs, rhs)`` with an ``identity`` element.

    ``lhs`` and ``rhs`` are the variables ``result`` is written in.
    """

    name: str
    lhs: Var
    rhs: Var
    result: PrimExpr
    identity: PrimExpr

    def __call__(self, a: PrimExpr, b: PrimExpr) -> PrimExpr:
        from ember.tir.functor import substitute

        return substitute(self.result, {self.lhs: a, self.rhs: b})


@_node
class Reduce(PrimExpr):
    """A reduction over ``axis`` (IterVars) inside a compute; exists only before lowering."""

    dtype: str
    combiner: CommReducer
    source: PrimExpr
    axis: tuple[Any, ...]  # tuple[IterVar, ...]
    condition: PrimExpr | None = None
    init: PrimExpr | None = None


@_node
class Range:
    """``[min, min + extent)``."""

    min: PrimExpr
    extent: PrimExpr

    @staticmethod
    def from_extent(extent: ExprLike) -> Range:
        return Range(const(0, "int32"), convert(extent))

    def __repr__(self) -> str:
        return f"range(min={self.min!r}, extent={self.extent!r})"


ExprLike = PrimExpr | int | float | bool

# ------------------------------------------------------------------------------------
# Constructors with dtype promotion. They build nodes; they do not simplify, except
# that two constants of an integer op fold, so index arithmetic stays readable.
# ------------------------------------------------------------------------------------


def const(value: int | float | bool, dtype: str | None = None) -> PrimExpr:
    """A constant of ``dtype`` (inferred from the Python type when omitted)."""
    if dtype is None:
        dtype = (
            "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32"
        )
    dtype = dt.check_dtype(dtype)
    if dt.lanes_of(dtype) > 1:
        scalar = const(value, dt.element_of(dtype))
        return Broadcast(dtype, scalar, dt.lanes_of(dtype))
    if dt.is_float(dtype):
        return FloatImm(dtype, float(value))
    if dt.is_bool(dtype):
        return IntImm(dtype, int(bool(value)))
    return IntImm(dtype, int(value))


def convert(value: ExprLike, dtype: str | None = None) -> PrimExpr:
    """Turn a Python number into a constant; pass expressions through."""
    if isinstance(value, PrimExpr):
        return value
    value = _unwrap_iter_var(value)
    if isinstance(value, PrimExpr):
        return value
    if hasattr(value, "dtype") and hasattr(value, "item"):  # numpy scalar
        return const(value.item(), dtype or str(value.dtype))
    if isinstance(value, (bool, int, float)):
        return const(value, dtype)
    raise ArgumentError(f"cannot use {value!r} ({type(value).__name__}) as an expression")


def _unwrap_iter_var(x: Any) -> Any:
    """An IterVar (from ``ember.te``) stands for its loop variable in arithmetic."""
    if not isinstance(x, PrimExpr) and isinstance(getattr(x, "var", None), Var):
        return x.var
    return x


def _promote(a: ExprLike, b: ExprLike) -> tuple[PrimExpr, PrimExpr]:
    a, b = _unwrap_iter_var(a), _unwrap_iter_var(b)
    if isinstance(a, PrimExpr) and not isinstance(b, PrimExpr):
        return a, _const_like(b, a.dtype)
    if isinstance(b, PrimExpr) and not isinstance(a, PrimExpr):
        return _const_like(a, b.dtype), b
    a, b = convert(a), convert(b)
    if a.dtype == b.dtype:
        return a, b
    return _unify(a, b)


def _const_like(value: ExprLike, dtype: str) -> PrimExpr:
    if isinstance(value, float) and not dt.is_float(dtype):
        # 2.5 * i: the float wins
        return const(value, "float32")
    return const(value, dtype)


def _unify(a: PrimExpr, b: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
    """Implicit promotion for mixed dtypes: float over int, wider over narrower."""
    ta, tb = a.dtype, b.dtype
    if dt.lanes_of(ta) != dt.lanes_of(tb):
        if dt.lanes_of(ta) == 1:
            a = Broadcast(dt.with_lanes(ta, dt.lanes_of(tb)), a, dt.lanes_of(tb))
        elif dt.lanes_of(tb) == 1:
            b = Broadcast(dt.with_lanes(tb, dt.lanes_of(ta)), b, dt.lanes_of(ta))
        else:
            raise ArgumentError(f"cannot combine vectors of {ta} and {tb}")
        ta, tb = a.dtype, b.dtype
        if ta == tb:
            return a, b
    ea, eb = dt.element_of(ta), dt.element_of(tb)

    def rank(e: str) -> tuple[int, int]:
        return (2 if dt.is_float(e) else 1 if dt.is_int(e) else 0, dt.bits_of(e))

    target = ea if rank(ea) >= rank(eb) else eb
    if dt.is_float(ea) and dt.is_float(eb):
        target = ea if dt.bits_of(ea) >= dt.bits_of(eb) else eb
    lanes = dt.lanes_of(ta)
    target = dt.with_lanes(target, lanes)
    if ta != target:
        a = Cast(target, a)
    if tb != target:
        b = Cast(target, b)
    return a, b


_FOLD = {
    BinaryOp.ADD: lambda x, y: x + y,
    BinaryOp.SUB: lambda x, y: x - y,
    BinaryOp.MUL: lambda x, y: x * y,
}


def _binary(op: BinaryOp, a: ExprLike, b: ExprLike) -> PrimExpr:
    a, b = _promote(a, b)
    if op in (BinaryOp.DIV,) and not dt.is_float(a.dtype):
        # true division of integers is a user slip in index code: make it explicit
        raise ArgumentError(
            "'/' on integer expressions is ambiguous; use '//' (floor division) "
            "or ember.tir.truncdiv"
        )
    if isinstance(a, IntImm) and isinstance(b, IntImm) and op in _FOLD and not dt.is_bool(a.dtype):
        return IntImm(a.dtype, _FOLD[op](a.value, b.value))
    return BinOp(a.dtype, op, a, b)


def _compare(op: CompareOp, a: ExprLike, b: ExprLike) -> PrimExpr:
    a, b = _promote(a, b)
    return Compare(dt.with_lanes("bool", dt.lanes_of(a.dtype)), op, a, b)


def _as_bool(x: ExprLike) -> PrimExpr:
    x = convert(x)
    if not dt.is_bool(x.dtype):
        raise ArgumentError(f"expected a boolean condition, got an expression of type {x.dtype}")
    return x


def eq(a: ExprLike, b: ExprLike) -> PrimExpr:
    return _compare(CompareOp.EQ, a, b)


def ne(a: ExprLike, b: ExprLike) -> PrimExpr:
    return _compare(CompareOp.NE, a, b)


def logical_and(a: ExprLike, b: ExprLike) -> PrimExpr:
    a, b = _as_bool(a), _as_bool(b)
    return BinOp(a.dtype, BinaryOp.AND, a, b)


def logical_or(a: ExprLike, b: ExprLike) -> PrimExpr:
    a, b = _as_bool(a), _as_bool(b)
    return BinOp(a.dtype, BinaryOp.OR, a, b)


def logical_not(a: ExprLike) -> PrimExpr:
    a = _as_bool(a)
    return Not(a.dtype, a)


def min_(a: ExprLike, b: ExprLike) -> PrimExpr:
    return _binary(BinaryOp.MIN, a, b)


def max_(a: ExprLike, b: ExprLike) -> PrimExpr:
    return _binary(BinaryOp.MAX, a, b)


def floordiv(a: ExprLike, b: ExprLike) -> PrimExpr:
    return _binary(BinaryOp.FLOORDIV, a, b)


def floormod(a: ExprLike, b: ExprLike) -> PrimExpr:
    return _binary(BinaryOp.FLOORMOD, a, b)


def truncdiv(a: ExprLike, b: ExprLike) -> PrimExpr:
    return _binary(BinaryOp.TRUNCDIV, a, b)


def truncmod(a: ExprLike, b: ExprLike) -> PrimExpr:
    return _binary(BinaryOp.TRUNCMOD, a, b)


def cast(dtype: str, value: ExprLike) -> PrimExpr:
    value = convert(value)
    dtype = dt.check_dtype(dtype)
    if value.dtype == dtype:
        return value
    if dt.lanes_of(value.dtype) > 1 and dt.lanes_of(dtype) == 1:
        dtype = dt.with_lanes(dtype, dt.lanes_of(value.dtype))
    return Cast(dtype, value)


def select(cond: ExprLike, true_value: ExprLike, false_value: ExprLike) -> PrimExpr:
    cond = _as_bool(cond)
    t, f = _promote(true_value, false_value)
    return Select(t.dtype, cond, t, f)


def call(op: Intrinsic, *args: ExprLike, dtype: str | None = None) -> PrimExpr:
    cargs = [convert(a) for a in args]
    if len(cargs) == 2:
        cargs = list(_promote(cargs[0], cargs[1]))
    elif len(cargs) == 3:
        x, y = _promote(cargs[0], cargs[1])
        x, z = _promote(x, cargs[2])
        y, _ = _promote(y, z)
        cargs = [x, y, z]
    return Call(dtype or cargs[0].dtype, op, tuple(cargs))


def warp_shuffle(op: Intrinsic, value: ExprLike, offset: ExprLike) -> PrimExpr:
    """``op`` (a :data:`WARP_SHUFFLES` member) of a scalar ``value`` by an int32 lane offset.

    Built apart from :func:`call`, which would promote the offset to the value's dtype.
    """
    if op not in WARP_SHUFFLES:
        raise ArgumentError(f"warp_shuffle: {op} is not a warp shuffle")
    v, off = convert(value), convert(offset, "int32")
    if dt.lanes_of(v.dtype) > 1:
        raise ArgumentError(f"warp_shuffle: the value must be a scalar, got {v.dtype}")
    if off.dtype != "int32":
        raise ArgumentError(f"warp_shuffle: the lane offset must be int32, got {off.dtype}")
    return Call(v.dtype, op, (v, off))


def is_const_int(e: Any, value: int | None = None) -> bool:
    """True if ``e`` is an integer constant (equal to ``value`` when given)."""
    return isinstance(e, IntImm) and (value is None or e.value == value)


def const_value(e: PrimExpr) -> int | float | None:
    """The Python value of a constant node, else None."""
    if isinstance(e, (IntImm, FloatImm)):
        return e.value
    return None
