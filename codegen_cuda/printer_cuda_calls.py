"""CUDA C for the calls the math-function table does not cover: bits, float tests,
``if_then_else`` and C functions called by name.

Used by :meth:`ember.codegen_cuda.printer_cuda.CUDAPrinter.print_call`. Bitwise
operators and shifts print as C operators; C promotes integers narrower than
``int`` before operating, so their result is cast back to the operand type (TIR
says an ``int8`` shift wraps in 8 bits). ``popcount`` and ``clz`` use CUDA's
``__popc``/``__clz`` (``ll`` versions for 64 bits) on the zero-extended bits.
``if_then_else`` is C's conditional operator, which evaluates only the branch
taken (a vector one with one condition for all lanes: an ``if`` around whole-vector
loads, see ``printer_cuda_vector``). An extern call prints the function's name and
arguments unchanged.
"""

from __future__ import annotations

from ember.codegen_cuda.printer_c import COND, PRIMARY, UNARY, Text
from ember.codegen_cuda.printer_cuda_protocol import CUDAPrinting
from ember.errors import CompileError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.op import REINTERPRET_NAME

I = E.Intrinsic  # noqa: E741
SHIFT, BIT_AND, BIT_XOR, BIT_OR = 11, 8, 7, 6  # C precedences (see printer_c)
BIT_SYNTAX: dict[E.Intrinsic, tuple[str, int]] = {
    I.SHIFT_LEFT: ("<<", SHIFT),
    I.SHIFT_RIGHT: (">>", SHIFT),  # arithmetic on signed types, as TIR says
    I.BITWISE_AND: ("&", BIT_AND),
    I.BITWISE_XOR: ("^", BIT_XOR),
    I.BITWISE_OR: ("|", BIT_OR),
}
# float test -> CUDA function (float and double overloads; half computes in float)
PREDICATE_NAMES: dict[E.Intrinsic, str] = {
    I.ISNAN: "isnan",
    I.ISINF: "isinf",
    I.ISFINITE: "isfinite",
}
BIT_COUNT_NAMES: dict[E.Intrinsic, tuple[str, str]] = {  # (32-bit, 64-bit)
    I.POPCOUNT: ("__popc", "__popcll"),
    I.CLZ: ("__clz", "__clzll"),
}


def _narrow(p: CUDAPrinting, dtype: str, text: str, prec: int) -> Text:
    """``text`` of C type int (after promotion) back in ``dtype`` when that is narrower."""
    base = dt.element_of(dtype)
    if dt.bits_of(base) >= 32 and not dt.is_bool(base):
        return text, prec
    return f"({p.type_name(base)})({text})", UNARY


def print_bits(p: CUDAPrinting, e: E.Call, lane: int | None) -> Text:
    """Shifts, bitwise operators and bit counts of integer (and bool) operands."""
    base = dt.element_of(e.args[0].dtype)
    if e.op in BIT_SYNTAX:
        op, prec = BIT_SYNTAX[e.op]
        return _narrow(p, e.dtype, p.binary(op, prec, e.args[0], e.args[1], lane)[0], prec)
    if e.op is I.BITWISE_NOT:
        if dt.is_bool(base):
            return "!" + p.wrap(p.print(e.args[0], lane), UNARY), UNARY
        return _narrow(p, e.dtype, "~" + p.wrap(p.print(e.args[0], lane), UNARY), UNARY)
    bits = dt.bits_of(base)
    narrow, wide = BIT_COUNT_NAMES[e.op]
    x = p.wrap(p.print(e.args[0], lane), UNARY)
    if bits == 64:
        arg = f"(unsigned long long){x}" if e.op is I.POPCOUNT else f"(long long){x}"
        text = f"{wide}({arg})"
    else:
        unsigned = p.type_name(f"uint{bits}") if bits < 32 else None
        bits_of_x = f"({unsigned}){x}" if unsigned else x
        arg = f"(unsigned int){bits_of_x}" if e.op is I.POPCOUNT else f"(int){bits_of_x}"
        text = f"{narrow}({arg})"
        if e.op is I.CLZ and bits < 32:
            return f"({text} - {32 - bits})", PRIMARY
    if e.op is I.CLZ:
        return text, PRIMARY  # an int, the int32 clz gives
    return f"({p.type_name(base)}){text}", UNARY


def print_predicate(p: CUDAPrinting, e: E.Call, lane: int | None) -> Text:
    """CUDA C for ``isnan``/``isinf``/``isfinite``; half types are tested as floats."""
    return f"{PREDICATE_NAMES[e.op]}({p.to_float(e.args[0], lane)})", PRIMARY


def print_if_then_else(p: CUDAPrinting, e: E.Call, lane: int | None) -> Text:
    """``c ? t : f``: C evaluates only the branch taken. A vector one with a scalar
    condition becomes an ``if``/``else`` filling a lane array before the statement, so
    a whole-vector load in a side stays inside its branch."""
    cond, t, f = e.args
    if lane is not None and dt.lanes_of(e.dtype) > 1 and dt.lanes_of(cond.dtype) == 1:
        return p.print_guarded_vector(e, lane)
    c = p.wrap(p.print(cond, lane), UNARY)
    a = p.wrap(p.print(t, lane), COND + 1)
    b = p.wrap(p.print(f, lane), COND)
    return f"{c} ? {a} : {b}", COND


# CUDA's built-in vector types (``char4``...) by element type, for vector extern arguments.
_CUDA_VECTOR_ELEMENTS = {
    "int8": "char", "uint8": "uchar", "int16": "short", "uint16": "ushort", "int32": "int",
    "uint32": "uint", "int64": "longlong", "uint64": "ulonglong", "float32": "float",
    "float64": "double",
}  # fmt: skip


def _extern_arg(p: CUDAPrinting, a: E.PrimExpr, lane: int | None) -> str:
    """A scalar argument as it is; a vector one (TVM's ``__dp4a`` on int8x4) as CUDA's
    vector type built from its lanes, ``make_char4(a0, a1, a2, a3)``."""
    base, lanes = dt.split_lanes(a.dtype)
    if lanes == 1:
        return p.expr(a, lane)
    elem = _CUDA_VECTOR_ELEMENTS.get(base)
    if elem is None or lanes > 4:
        raise CompileError(
            f"call_extern: CUDA has no vector type for a {a.dtype} argument; pass the lanes "
            "as scalars"
        )
    return f"make_{elem}{lanes}({', '.join(p.expr(a, k) for k in range(lanes))})"


# tir.reinterpret between a float and an integer of its width: CUDA's bit-cast intrinsics
# (integers of one width convert bit for bit with a plain cast)
_BIT_CASTS = {
    ("float32", "int32"): "__float_as_int({})",
    ("float32", "uint32"): "__float_as_uint({})",
    ("int32", "float32"): "__int_as_float({})",
    ("uint32", "float32"): "__uint_as_float({})",
    ("float64", "int64"): "__double_as_longlong({})",
    ("float64", "uint64"): "(unsigned long long)__double_as_longlong({})",
    ("int64", "float64"): "__longlong_as_double({})",
    ("uint64", "float64"): "__longlong_as_double((long long)({}))",
    ("float16", "int16"): "__half_as_short({})",
    ("float16", "uint16"): "__half_as_ushort({})",
    ("int16", "float16"): "__short_as_half({})",
    ("uint16", "float16"): "__ushort_as_half({})",
}


def print_extern(p: CUDAPrinting, e: E.Call, lane: int | None) -> Text:
    """CUDA C for a call of an external device function named by the first argument."""
    name = e.args[0]
    assert isinstance(name, E.StringImm)
    if name.value == REINTERPRET_NAME:
        (value,) = e.args[1:]
        form = _BIT_CASTS.get((value.dtype, e.dtype))
        if form is None:
            raise CompileError(
                f"reinterpret: CUDA code has no bit cast from {value.dtype} to {e.dtype}"
            )
        return form.format(p.expr(value, lane)), PRIMARY
    return f"{name.value}({', '.join(_extern_arg(p, a, lane) for a in e.args[1:])})", PRIMARY


def print_structural_call(p: CUDAPrinting, e: E.Call, lane: int | None) -> Text | None:
    """The call printed by one of the functions above, or None for a math-table call."""
    if e.op is I.IF_THEN_ELSE:
        return print_if_then_else(p, e, lane)
    if e.op in E.EXTERN_CALLS:
        return print_extern(p, e, lane)
    if e.op is I.ACCESS_PTR:  # Buffer.access_ptr: pointer arithmetic on the typed pointer
        data, offset, _, _ = e.args
        return f"({p.expr(data, lane)} + {p.expr(offset, lane)})", PRIMARY
    if e.op in E.FLOAT_PREDICATES:
        return print_predicate(p, e, lane)
    if e.op in E.INT_INTRINSICS:
        return print_bits(p, e, lane)
    return None
