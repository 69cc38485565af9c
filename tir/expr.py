"""Expression nodes of Ember's loop IR (TIR) and of tensor expressions.

Every node is a frozen, slotted dataclass with identity equality: two ``Var("i")``
are different variables, and nodes can be dict keys without hashing whole trees.
Structural comparison lives in :mod:`ember.tir.structural`. Operators on
expressions build nodes (``a + b``, ``i // 4``, ``x < y``, ``a == b``). As in TVM,
the node ``a == b`` builds is truthy only when ``a`` and ``b`` are the same object
(``a != b`` the reverse), so ``te.select(A[i] == 1, ...)`` compares values while
expressions still work as dict keys and in ``x in list``; hashing is identity.
Python ints and floats are promoted to constants of the other operand's dtype,
the way a user writes index arithmetic.

Closed families carry an enum operator (``BinOp(op=BinaryOp.ADD)``,
``Call(op=Intrinsic.EXP)``) so that backends, the interpreter and the
simplifier key their behaviour on tables.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ember.errors import ArgumentError, SymbolicTruthError
from ember.tir import dtype as dt
from ember.tir.functor import substitute
from ember.tir.node import IREnum, IRNode

if TYPE_CHECKING:
    from ember.tir.buffer import Buffer

_T = TypeVar("_T")


class BinaryOp(IREnum):
    """The binary operators of :class:`BinOp`; backends and folders key their tables on it."""

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


class CompareOp(IREnum):
    """The comparison operators of :class:`Compare`, keyed the same way by every backend."""

    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


class Intrinsic(IREnum):
    """The math and bit intrinsics a :class:`Call` can name; each backend maps every one."""

    # -- floating point, one argument; computed in the argument's type ------------------------
    EXP = "exp"
    EXP2 = "exp2"
    EXP10 = "exp10"
    LOG = "log"
    LOG2 = "log2"
    LOG10 = "log10"
    LOG1P = "log1p"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    ERF = "erf"
    SIGMOID = "sigmoid"
    ABS = "abs"  # integers too
    FLOOR = "floor"
    CEIL = "ceil"
    TRUNC = "trunc"
    ROUND = "round"  # halves away from zero, as C's round and TVM's tir.round
    NEARBYINT = "nearbyint"  # halves to even, as C's nearbyint / rint under the default mode
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    TANH = "tanh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    # -- floating point, two or three arguments -----------------------------------------------
    POW = "pow"
    FMOD = "fmod"  # C's fmod: the remainder of truncating division, the dividend's sign
    ATAN2 = "atan2"
    HYPOT = "hypot"
    COPYSIGN = "copysign"
    FMA = "fma"
    # -- floating point to bool -----------------------------------------------------------------
    ISNAN = "isnan"
    ISINF = "isinf"
    ISFINITE = "isfinite"
    # -- integers (bool too for the bitwise ones) -----------------------------------------------
    POPCOUNT = "popcount"
    CLZ = "clz"  # leading zero bits, as an int32; clz(0) is the bit width
    SHIFT_LEFT = "shift_left"
    SHIFT_RIGHT = "shift_right"  # arithmetic on signed types, logical on unsigned
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"
    BITWISE_NOT = "bitwise_not"
    # Exchanges between the 32 lanes of a GPU warp, as CUDA's ``__shfl_xor_sync`` and
    # ``__shfl_down_sync`` with a full mask: ``(value, lane offset)`` gives the value of
    # lane ``lane ^ offset`` (``lane + offset``), or the lane's own one past the warp.
    # Every lane of the warp must execute them together, so only device code has them.
    WARP_SHUFFLE_XOR = "warp_shuffle_xor"
    WARP_SHUFFLE_DOWN = "warp_shuffle_down"
    # -- control and foreign calls: every backend handles these by their structure ----------
    # ``(cond, t, f)``: only the branch ``cond`` picks is evaluated (TVM's tir.if_then_else),
    # unlike Select, so a guarded out-of-bounds read never happens.
    IF_THEN_ELSE = "if_then_else"
    # ``(StringImm(name), *args)``: a C / CUDA device function called by name (TVM's
    # call_pure_extern / call_extern); the pure one has no side effects.
    CALL_PURE_EXTERN = "call_pure_extern"
    CALL_EXTERN = "call_extern"
    # ``(StringImm(name), *args)``: a function of the global registry (TVM's call_packed),
    # called on the host; a buffer argument is a PACK_ARRAY. Result: an int32 status.
    CALL_PACKED = "call_packed"
    # ``(data, StringImm(dtype), *shape)``: a buffer handed to a packed call as an array
    # (TVM's tvm_stack_make_array); only an argument of CALL_PACKED.
    PACK_ARRAY = "pack_array"
    # The next ones are markers that carry no arithmetic value.
    LIKELY = "likely"  # a hint that a condition is usually true (loop partitioning)
    # ``(data, offset, StringImm(dtype), mask)``: the address of element ``offset`` of the buffer
    # whose pointer is ``data`` (TVM's ``Buffer.access_ptr``), a ``handle`` handed to a C or
    # CUDA function by ``call_extern``; compiled code only (no interpreter has addresses).
    ACCESS_PTR = "access_ptr"
    # ``(access_ptr,)``: a hint that the element at that address (an ``ACCESS_PTR`` call) is
    # read soon, so its cache line is fetched now (TVM's tir.prefetch, made by the schedule's
    # ``prefetch``). It never faults and changes no value: the LLVM backend emits
    # ``llvm.prefetch`` (read, locality 3, data cache); CUDA and the interpreters skip it.
    PREFETCH = "prefetch"
    # -- tensor cores (CUDA device code only; built and documented in tir.tensor_core) --------
    # Warp-collective statements on per-lane fragment registers (``local`` arrays) or on
    # opaque ``wmma.*`` fragments; their arguments are buffer pointers, offsets and
    # StringImm options, as TVM's intrinsics of the same names.
    PTX_MMA = "ptx_mma"
    PTX_LDMATRIX = "ptx_ldmatrix"
    TVM_FILL_FRAGMENT = "tvm_fill_fragment"
    TVM_LOAD_MATRIX_SYNC = "tvm_load_matrix_sync"
    TVM_MMA_SYNC = "tvm_mma_sync"
    TVM_STORE_MATRIX_SYNC = "tvm_store_matrix_sync"


WARP_SHUFFLES = frozenset({Intrinsic.WARP_SHUFFLE_XOR, Intrinsic.WARP_SHUFFLE_DOWN})
WARP_SIZE = 32  # lanes of a warp: what a full shuffle mask names
TENSOR_CORE_CALLS = frozenset(
    {
        Intrinsic.PTX_MMA,
        Intrinsic.PTX_LDMATRIX,
        Intrinsic.TVM_FILL_FRAGMENT,
        Intrinsic.TVM_LOAD_MATRIX_SYNC,
        Intrinsic.TVM_MMA_SYNC,
        Intrinsic.TVM_STORE_MATRIX_SYNC,
    }
)
EXTERN_CALLS = frozenset({Intrinsic.CALL_PURE_EXTERN, Intrinsic.CALL_EXTERN})
# Calls a backend handles by their structure, not by a per-operator table entry.
PACKED_CALLS = frozenset({Intrinsic.CALL_PACKED, Intrinsic.PACK_ARRAY})
_ADDRESSES = {Intrinsic.ACCESS_PTR, Intrinsic.PREFETCH}
STRUCTURAL_CALLS = EXTERN_CALLS | PACKED_CALLS | _ADDRESSES | {Intrinsic.IF_THEN_ELSE}
# Float arguments, bool result.
FLOAT_PREDICATES = frozenset({Intrinsic.ISNAN, Intrinsic.ISINF, Intrinsic.ISFINITE})
# Integer (and bool) operands; everything else but ABS and LIKELY takes floats.
INT_INTRINSICS = frozenset(
    {
        Intrinsic.POPCOUNT,
        Intrinsic.CLZ,
        Intrinsic.SHIFT_LEFT,
        Intrinsic.SHIFT_RIGHT,
        Intrinsic.BITWISE_AND,
        Intrinsic.BITWISE_OR,
        Intrinsic.BITWISE_XOR,
        Intrinsic.BITWISE_NOT,
    }
)
# Intrinsics whose result type is not their (first) argument's.
OWN_RESULT_TYPE = FLOAT_PREDICATES | {Intrinsic.CLZ}
# Calls whose value depends on their arguments alone (math, bit operations): a backend may
# compute one once for every place it is read
PURE_CALLS = (
    frozenset(Intrinsic)
    - EXTERN_CALLS
    - PACKED_CALLS
    - TENSOR_CORE_CALLS
    - WARP_SHUFFLES
    - {Intrinsic.IF_THEN_ELSE, Intrinsic.PREFETCH, Intrinsic.ACCESS_PTR}
)


class PrimExpr(IRNode):
    """Base of every expression; provides the arithmetic operator overloads.

    ``repr`` is the printer's text (see :mod:`ember.tir.node`)."""

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

    # -- comparisons --------------------------------------------------------------
    # `==` / `!=` build EQ / NE nodes whose truth value is object identity (see Compare).
    # Defining __eq__ would drop the inherited identity hash, so it is restored here.
    __hash__ = object.__hash__

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return _identity_compare(CompareOp.EQ, self, other)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return _identity_compare(CompareOp.NE, self, other)

    def __lt__(self, other: Any) -> PrimExpr:
        return _compare(CompareOp.LT, self, other)

    def __le__(self, other: Any) -> PrimExpr:
        return _compare(CompareOp.LE, self, other)

    def __gt__(self, other: Any) -> PrimExpr:
        return _compare(CompareOp.GT, self, other)

    def __ge__(self, other: Any) -> PrimExpr:
        return _compare(CompareOp.GE, self, other)

    # & | ^ ~ are logical on bools and bitwise on integers; << >> shift integers (TVM)
    def __and__(self, other: Any) -> PrimExpr:
        return _bitwise(Intrinsic.BITWISE_AND, self, other)

    def __rand__(self, other: Any) -> PrimExpr:
        return _bitwise(Intrinsic.BITWISE_AND, other, self)

    def __or__(self, other: Any) -> PrimExpr:
        return _bitwise(Intrinsic.BITWISE_OR, self, other)

    def __ror__(self, other: Any) -> PrimExpr:
        return _bitwise(Intrinsic.BITWISE_OR, other, self)

    def __xor__(self, other: Any) -> PrimExpr:
        return _bitwise(Intrinsic.BITWISE_XOR, self, other)

    def __rxor__(self, other: Any) -> PrimExpr:
        return _bitwise(Intrinsic.BITWISE_XOR, other, self)

    def __invert__(self) -> PrimExpr:
        if dt.is_bool(self.dtype):
            return logical_not(self)
        return int_call(Intrinsic.BITWISE_NOT, self)

    def __lshift__(self, other: Any) -> PrimExpr:
        return int_call(Intrinsic.SHIFT_LEFT, self, other)

    def __rlshift__(self, other: Any) -> PrimExpr:
        return int_call(Intrinsic.SHIFT_LEFT, other, self)

    def __rshift__(self, other: Any) -> PrimExpr:
        return int_call(Intrinsic.SHIFT_RIGHT, self, other)

    def __rrshift__(self, other: Any) -> PrimExpr:
        return int_call(Intrinsic.SHIFT_RIGHT, other, self)

    def __bool__(self) -> bool:
        raise SymbolicTruthError(
            f"the symbolic expression {self!r} has no truth value; build conditions with "
            "te.if_then_else / te.select (or te.all / te.any), not Python's if/and/or"
        )

    def astype(self, dtype: str) -> PrimExpr:
        return cast(dtype, self)

    def equal(self, other: ExprLike) -> PrimExpr:
        """``self == other`` as an expression (TVM's ``PrimExpr.equal``)."""
        return eq(self, other)


if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # Python 3.10: the marker only informs type checkers, so a no-op stands in

    def dataclass_transform(**_kwargs: Any) -> Callable[[_T], _T]:
        """Stand-in for ``typing.dataclass_transform``, which only informs type checkers."""
        return lambda decorated: decorated


@dataclass_transform(eq_default=False, frozen_default=True)
def ir_node(cls: type[_T]) -> type[_T]:
    """Make ``cls`` an IR node: a frozen, slotted dataclass with identity equality.

    ``dataclass_transform`` lets type checkers see the generated constructors.
    """
    return dataclass(frozen=True, slots=True, eq=False, repr=False)(cls)


@ir_node
class Var(PrimExpr):
    """A scalar variable: loop index, shape symbol, or let-bound value."""

    name: str
    dtype: str = "int32"


@ir_node
class SizeVar(Var):
    """A variable known to be ``>= 0`` (TVM's ``te.size_var``): a size the analyzer may
    assume non-negative when it simplifies or bounds expressions."""


@ir_node
class IntImm(PrimExpr):
    """An integer (or bool) constant; its dtype tells folding and codegen the width."""

    dtype: str
    value: int

    def __int__(self) -> int:  # int(te.const(3)), shape entries; as TVM
        return self.value


@ir_node
class FloatImm(PrimExpr):
    """A floating-point constant; its dtype says at which precision backends materialize it."""

    dtype: str
    value: float

    def __float__(self) -> float:
        return self.value


@ir_node
class StringImm(PrimExpr):
    """A string argument to an intrinsic or packed call (a kernel name, a message)."""

    value: str
    dtype: str = "handle"


@ir_node
class BinOp(PrimExpr):
    """Arithmetic or logic on two operands of one dtype; the operator says which."""

    dtype: str
    op: BinaryOp
    a: PrimExpr
    b: PrimExpr


@ir_node
class Compare(PrimExpr):
    """``a op b``. ``bool()`` of an EQ / NE is "same object" / "not the same object"
    (what lets ``x in list`` and dict lookups work on expressions, as in TVM); other
    comparisons have no truth value."""

    dtype: str  # "bool", or "boolxN" for vectors
    op: CompareOp
    a: PrimExpr
    b: PrimExpr

    def __bool__(self) -> bool:
        if self.op is CompareOp.EQ:
            return self.a is self.b
        if self.op is CompareOp.NE:
            return self.a is not self.b
        return PrimExpr.__bool__(self)


@ir_node
class Not(PrimExpr):
    """Logical negation of a bool expression."""

    dtype: str
    a: PrimExpr


@ir_node
class Select(PrimExpr):
    """``cond ? true_value : false_value``; both branches may be evaluated."""

    dtype: str
    cond: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr


@ir_node
class Cast(PrimExpr):
    """A conversion of ``value`` to ``dtype`` with C semantics (truncation toward zero)."""

    dtype: str
    value: PrimExpr


@ir_node
class Call(PrimExpr):
    """A math intrinsic; every backend maps each :class:`Intrinsic` in a table."""

    dtype: str
    op: Intrinsic
    args: tuple[PrimExpr, ...]


@ir_node
class Ramp(PrimExpr):
    """The vector ``base, base+stride, ..., base+(lanes-1)*stride``."""

    dtype: str
    base: PrimExpr
    stride: PrimExpr
    lanes: int


@ir_node
class Broadcast(PrimExpr):
    """A scalar repeated into every lane of a vector, as vectorized loops need."""

    dtype: str
    value: PrimExpr
    lanes: int


@ir_node
class Let(PrimExpr):
    """An expression that binds ``var`` to ``value`` once inside ``body``, to share a subterm."""

    dtype: str
    var: Var
    value: PrimExpr
    body: PrimExpr


@ir_node
class BufferLoad(PrimExpr):
    """Read of ``buffer[indices]``; after flattening, one index. A Ramp index reads a vector."""

    dtype: str
    buffer: Buffer
    indices: tuple[PrimExpr, ...]


@ir_node
class ProducerLoad(PrimExpr):
    """Read of a tensor-expression Tensor; exists only before lowering."""

    dtype: str
    producer: Any  # ember.tir.te.Tensor
    indices: tuple[PrimExpr, ...]


@ir_node
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
        return substitute(self.result, {self.lhs: a, self.rhs: b})


@ir_node
class TupleReducer:
    """A commutative reducer over tuples of values (TVM's ``CommReducer`` of several values).

    An argmax carries (index, value) pairs: ``results[k]`` is the k-th value of
    ``combine(lhs, rhs)``, written in the variables ``lhs`` (the running tuple) and ``rhs``
    (the next one); ``identities[k]`` is the k-th identity element.
    """

    name: str
    lhs: tuple[Var, ...]
    rhs: tuple[Var, ...]
    results: tuple[PrimExpr, ...]
    identities: tuple[PrimExpr, ...]

    def __call__(self, a: Sequence[PrimExpr], b: Sequence[PrimExpr]) -> tuple[PrimExpr, ...]:
        vmap = dict(zip(self.lhs, a)) | dict(zip(self.rhs, b))
        return tuple(substitute(r, vmap) for r in self.results)


@ir_node
class Reduce(PrimExpr):
    """A reduction over ``axis`` (IterVars) inside a compute; exists only before lowering.

    With a :class:`TupleReducer` the reduction yields several values, as in TVM: one
    ``Reduce`` per value, alike but for ``value_index``, each holding every value's
    source in ``sources`` (``source`` is ``sources[value_index]``) and its own ``init``.
    """

    dtype: str
    combiner: CommReducer | TupleReducer
    source: PrimExpr
    axis: tuple[Any, ...]  # tuple[IterVar, ...]
    condition: PrimExpr | None = None
    init: PrimExpr | None = None
    sources: tuple[PrimExpr, ...] = ()  # a tuple reducer's sources, one per value
    value_index: int = 0

    @property
    def all_sources(self) -> tuple[PrimExpr, ...]:
        return self.sources or (self.source,)

    @property
    def identities(self) -> tuple[PrimExpr, ...]:
        c = self.combiner
        return c.identities if isinstance(c, TupleReducer) else (c.identity,)

    def combine(self, acc: Sequence[PrimExpr], src: Sequence[PrimExpr]) -> tuple[PrimExpr, ...]:
        """Every value of ``combine(acc, src)``, for one value or a tuple alike."""
        c = self.combiner
        return c(acc, src) if isinstance(c, TupleReducer) else (c(acc[0], src[0]),)

    def map_exprs(self, f: Callable[[PrimExpr], PrimExpr]) -> Reduce:
        """This reduction with ``f`` applied to its sources, condition and init (a mutator's
        helper: the axes and the reducer stay)."""
        src = f(self.source)
        sources = tuple(f(x) for x in self.sources)
        cond = None if self.condition is None else f(self.condition)
        init = None if self.init is None else f(self.init)
        same = src is self.source and cond is self.condition and init is self.init
        if same and all(a is b for a, b in zip(sources, self.sources)):
            return self
        if sources:
            src = sources[self.value_index]
        return Reduce(
            self.dtype, self.combiner, src, self.axis, cond, init, sources, self.value_index
        )


@ir_node
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
            "bool" if isinstance(value, bool) else _int_dtype(value) if isinstance(value, int)
            else "float32"
        )  # fmt: skip
    dtype = dt.check_dtype(dtype)
    if dt.lanes_of(dtype) > 1:
        scalar = const(value, dt.element_of(dtype))
        return Broadcast(dtype, scalar, dt.lanes_of(dtype))
    if dt.is_float(dtype):
        return FloatImm(dtype, float(value))
    if dt.is_bool(dtype):
        return IntImm(dtype, int(bool(value)))
    try:
        ivalue = int(value)
    except (OverflowError, ValueError) as e:  # inf or nan has no integer value
        raise ArgumentError(f"cannot make a {dtype} constant of {value!r}: {e}") from e
    if dt.bits_of(dtype) < 32:
        lo, hi = dt.int_range(dtype)
        if not lo <= ivalue <= hi:  # as TVM's IntImm refuses a literal its type cannot hold
            raise ArgumentError(
                f"cannot make a {dtype} constant of {value!r}: {dtype} holds {lo}..{hi}"
            )
    return IntImm(dtype, ivalue)


def _wrap_narrow(value: int, dtype: str) -> int:
    """A folded result of an integer type narrower than 32 bits (int4, int8, uint16, ...)
    wrapped to its width, as the machine computes it (``int8(127) + 1`` is -128). int32 and
    int64 index arithmetic is left to the simplifier, which also wraps it."""
    if dt.is_bool(dtype) or dt.bits_of(dtype) >= 32:
        return value
    lo, hi = dt.int_range(dtype)
    return (value - lo) % (hi - lo + 1) + lo


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
        b = _const_like(b, a.dtype)
    elif isinstance(b, PrimExpr) and not isinstance(a, PrimExpr):
        a = _const_like(a, b.dtype)
    a, b = convert(a), convert(b)
    if a.dtype == b.dtype:
        return a, b
    return _unify(a, b)


def _int_dtype(value: int) -> str:
    """A Python int's dtype, as TVM converts it: int32, or int64 where int32 cannot hold it."""
    return "int32" if -(1 << 31) <= value < (1 << 31) else "int64"


def _const_like(value: ExprLike, dtype: str) -> PrimExpr:
    if isinstance(value, float) and not dt.is_float(dtype):
        # 2.5 * i: the float wins
        return const(value, "float32")
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and dtype == "int32"
        and _int_dtype(value) == "int64"
    ):
        return const(value, "int64")  # i + 2**40 widens i, as in TVM
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
        return IntImm(a.dtype, _wrap_narrow(_FOLD[op](a.value, b.value), a.dtype))
    return BinOp(a.dtype, op, a, b)


def _compare(op: CompareOp, a: ExprLike, b: ExprLike) -> PrimExpr:
    a, b = _promote(a, b)
    return Compare(dt.with_lanes("bool", dt.lanes_of(a.dtype)), op, a, b)


def _identity_compare(op: CompareOp, a: PrimExpr, other: Any) -> Any:
    """``a == other`` / ``a != other`` from the operators: an EQ / NE node whose truth
    value is identity. Anything that is not an expression operand compares unequal."""
    if isinstance(other, PrimExpr):
        if other.dtype == a.dtype:  # the common case (`x in vars`), kept cheap
            return Compare(dt.with_lanes("bool", dt.lanes_of(a.dtype)), op, a, other)
    elif not isinstance(other, (bool, int, float)) and not (
        hasattr(other, "dtype") and hasattr(other, "item")  # numpy scalar
    ):
        return NotImplemented  # None, strings, IterVars, tuples...: identity (unequal)
    try:
        return _compare(op, a, other)
    except (ArgumentError, ValueError, TypeError):  # operands that cannot meet (vector lengths)
        return NotImplemented


def _as_bool(x: ExprLike) -> PrimExpr:
    x = convert(x)
    if not dt.is_bool(x.dtype):
        raise ArgumentError(f"expected a boolean condition, got an expression of type {x.dtype}")
    return x


def eq(a: ExprLike, b: ExprLike) -> PrimExpr:
    """The node ``a == b``; Python's ``==`` on expressions is identity, as in TVM."""
    return _compare(CompareOp.EQ, a, b)


def ne(a: ExprLike, b: ExprLike) -> PrimExpr:
    """The node ``a != b``, for when a comparison node is wanted rather than identity."""
    return _compare(CompareOp.NE, a, b)


def logical_and(a: ExprLike, b: ExprLike) -> PrimExpr:
    """Short-circuit-free ``a and b`` on bool expressions (both sides are evaluated)."""
    a, b = _as_bool(a), _as_bool(b)
    return BinOp(a.dtype, BinaryOp.AND, a, b)


def logical_or(a: ExprLike, b: ExprLike) -> PrimExpr:
    """Short-circuit-free ``a or b`` on bool expressions (both sides are evaluated)."""
    a, b = _as_bool(a), _as_bool(b)
    return BinOp(a.dtype, BinaryOp.OR, a, b)


def logical_not(a: ExprLike) -> PrimExpr:
    """``not a`` as an expression; Python's ``not`` would ask for a truth value."""
    a = _as_bool(a)
    return Not(a.dtype, a)


def _bitwise(op: Intrinsic, a: ExprLike, b: ExprLike) -> PrimExpr:
    """``&`` ``|`` ``^``: C's ``&&``/``||`` (logical) on two bools, bitwise on integers."""
    x, y = _promote(a, b)
    if dt.is_bool(x.dtype) and op is not Intrinsic.BITWISE_XOR:
        return (logical_and if op is Intrinsic.BITWISE_AND else logical_or)(x, y)
    return int_call(op, x, y)


def int_call(op: Intrinsic, *args: ExprLike) -> PrimExpr:
    """A bit intrinsic (:data:`INT_INTRINSICS`) of integer or bool operands."""
    e = call(op, *args)
    assert isinstance(e, Call)
    for a in e.args:
        if dt.is_float(a.dtype):
            raise ArgumentError(
                f"{op.value} works on integers, got an operand of type {a.dtype}: {a!r}"
            )
    if op in (Intrinsic.CLZ, Intrinsic.POPCOUNT) and dt.is_sub_byte_int(e.args[0].dtype):
        # counted over 4 bits or over the byte a 4-bit value is stored in? Ask for the byte
        raise ArgumentError(
            f"{op.value} of a {e.args[0].dtype} value is not supported: cast it to "
            f"{'uint8' if dt.is_uint(e.args[0].dtype) else 'int8'} first"
        )
    if op is Intrinsic.CLZ:
        return Call(dt.with_lanes("int32", dt.lanes_of(e.dtype)), op, e.args)
    return e


def min_(a: ExprLike, b: ExprLike) -> PrimExpr:
    """The smaller of ``a`` and ``b``, promoted to one dtype (``min`` is the builtin's name)."""
    return _binary(BinaryOp.MIN, a, b)


def max_(a: ExprLike, b: ExprLike) -> PrimExpr:
    """The larger of ``a`` and ``b``, promoted to one dtype (``max`` is the builtin's name)."""
    return _binary(BinaryOp.MAX, a, b)


def floordiv(a: ExprLike, b: ExprLike) -> PrimExpr:
    """Division rounding toward minus infinity, as Python's ``//`` and index math need."""
    return _binary(BinaryOp.FLOORDIV, a, b)


def floormod(a: ExprLike, b: ExprLike) -> PrimExpr:
    """The remainder matching :func:`floordiv`, never negative for a positive divisor."""
    return _binary(BinaryOp.FLOORMOD, a, b)


def truncdiv(a: ExprLike, b: ExprLike) -> PrimExpr:
    """Division rounding toward zero, as C and the hardware divide."""
    return _binary(BinaryOp.TRUNCDIV, a, b)


def truncmod(a: ExprLike, b: ExprLike) -> PrimExpr:
    """The remainder matching :func:`truncdiv`, with the sign of the dividend (C's ``%``)."""
    return _binary(BinaryOp.TRUNCMOD, a, b)


def cast(dtype: str, value: ExprLike) -> PrimExpr:
    """``value`` converted to ``dtype``; a no-op when it already has that type."""
    value = convert(value)
    dtype = dt.check_dtype(dtype)
    if value.dtype == dtype:
        return value
    if dt.lanes_of(value.dtype) > 1 and dt.lanes_of(dtype) == 1:
        dtype = dt.with_lanes(dtype, dt.lanes_of(value.dtype))
    return Cast(dtype, value)


def select(cond: ExprLike, true_value: ExprLike, false_value: ExprLike) -> PrimExpr:
    """``true_value`` where ``cond`` holds, else ``false_value``; both sides are evaluated."""
    cond = _as_bool(cond)
    t, f = _promote(true_value, false_value)
    return Select(t.dtype, cond, t, f)


def if_then_else(cond: ExprLike, true_value: ExprLike, false_value: ExprLike) -> PrimExpr:
    """``cond ? t : f`` evaluating only the branch taken (a constant ``cond`` picks one)."""
    c = _as_bool(cond)
    if dt.lanes_of(c.dtype) != 1:
        raise ArgumentError(f"if_then_else: the condition must be a scalar, got {c.dtype}")
    t, f = _promote(true_value, false_value)
    if isinstance(c, IntImm):
        return t if c.value else f
    return Call(t.dtype, Intrinsic.IF_THEN_ELSE, (c, t, f))


def call(op: Intrinsic, *args: ExprLike, dtype: str | None = None) -> PrimExpr:
    """A call of intrinsic ``op``, its arguments promoted to one type as Python numbers would be."""
    # two operands promote as Python numbers meet expressions (`x << 2` keeps x's type)
    cargs = [convert(a) for a in args] if len(args) != 2 else list(_promote(*args))
    if len(cargs) == 3:
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
