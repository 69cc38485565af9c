"""CUDA C for device kernels: the C printer plus CUDA's facts, kept in tables.

Input: kernels as ``split_host_device`` makes them (PrimFuncs with attrs ``kernel``
and ``launch``, flattened buffers, loops bound to ``blockIdx``/``threadIdx``,
``shared``/``local`` allocations, barriers). Output: one translation unit of
CUDA C that NVRTC compiles (:mod:`ember.codegen_cuda.nvrtc`). A loop bound to a
thread axis becomes ``int tx = threadIdx.x;`` (plus ``if (tx < extent)`` when it
covers fewer threads than the launch); ``float4``-style accesses are used for
contiguous vector loads and stores whose alignment is provable, scalar lane code
otherwise. ``half``/``__nv_bfloat16`` arithmetic is native, their math functions
run in float. Headers and the floor-division helpers appear only when used.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.codegen_cuda.printer_c import PRIMARY, UNARY, Text
from ember.codegen_cuda.printer_cuda_calls import print_structural_call
from ember.codegen_cuda.printer_cuda_mma import (
    fragment_count,
    fragment_layouts,
    print_fragment_allocation,
    print_tensor_core,
)
from ember.codegen_cuda.printer_cuda_vector import CUDAVectorMemory
from ember.codegen_cuda.shared_layout import SharedLayout, shared_layout
from ember.codegen_cuda.transform.inject_pipeline import async_source
from ember.errors import InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from ember.tir.structural import structural_equal
from ember.tir.tensor_core import WMMA_SCOPES, written_pointer

TYPE_NAMES: dict[str, str] = {
    "bool": "bool",
    "int4": "signed char",  # one 4-bit value per byte, wrapped by ember_wrap_int4
    "uint4": "unsigned char",
    "int8": "signed char",
    "int16": "short",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "uint16": "unsigned short",
    "uint32": "unsigned int",
    "uint64": "unsigned long long",
    "float16": "half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float",
    "float64": "double",
}
HEADERS: dict[str, str] = {"float16": "cuda_fp16.h", "bfloat16": "cuda_bf16.h"}
DYNAMIC_SHARED = "ember_dynamic_shared"  # the extern __shared__ array above 48 KiB

I = E.Intrinsic  # noqa: E741 - short alias for the tables below
# Math intrinsics: (float32 name, float64 name). float16/bfloat16 compute in float32.
MATH_NAMES: dict[E.Intrinsic, tuple[str, str]] = {
    I.EXP: ("expf", "exp"),
    I.EXP2: ("exp2f", "exp2"),
    I.EXP10: ("exp10f", "exp10"),
    I.LOG: ("logf", "log"),
    I.LOG2: ("log2f", "log2"),
    I.LOG10: ("log10f", "log10"),
    I.LOG1P: ("log1pf", "log1p"),
    I.SQRT: ("sqrtf", "sqrt"),
    I.RSQRT: ("rsqrtf", "rsqrt"),
    I.ERF: ("erff", "erf"),
    I.ABS: ("fabsf", "fabs"),
    I.FLOOR: ("floorf", "floor"),
    I.CEIL: ("ceilf", "ceil"),
    I.TRUNC: ("truncf", "trunc"),
    I.ROUND: ("roundf", "round"),  # halves away from zero, as TVM's round
    I.NEARBYINT: ("rintf", "rint"),  # halves to even, as the interpreter and LLVM
    I.SIN: ("sinf", "sin"),
    I.COS: ("cosf", "cos"),
    I.TAN: ("tanf", "tan"),
    I.ASIN: ("asinf", "asin"),
    I.ACOS: ("acosf", "acos"),
    I.ATAN: ("atanf", "atan"),
    I.SINH: ("sinhf", "sinh"),
    I.COSH: ("coshf", "cosh"),
    I.TANH: ("tanhf", "tanh"),
    I.ASINH: ("asinhf", "asinh"),
    I.ACOSH: ("acoshf", "acosh"),
    I.ATANH: ("atanhf", "atanh"),
    I.POW: ("powf", "pow"),
    I.FMOD: ("fmodf", "fmod"),
    I.ATAN2: ("atan2f", "atan2"),
    I.HYPOT: ("hypotf", "hypot"),
    I.COPYSIGN: ("copysignf", "copysign"),
    I.FMA: ("fmaf", "fma"),
}
# Faster, less accurate float32 versions used only with fast-math.
FAST_MATH_NAMES: dict[E.Intrinsic, str] = {
    I.EXP: "__expf",
    I.LOG: "__logf",
    I.SIN: "__sinf",
    I.COS: "__cosf",
    I.POW: "__powf",
}
# Warp shuffles, over all 32 lanes (full mask). CUDA overloads them for every scalar
# type Ember has (narrow integers and bool promote to int).
SHUFFLE_NAMES: dict[E.Intrinsic, str] = {
    I.WARP_SHUFFLE_XOR: "__shfl_xor_sync",
    I.WARP_SHUFFLE_DOWN: "__shfl_down_sync",
}
INT_ABS: dict[str, str] = {"int64": "llabs"}  # others: abs (narrow ints promote to int)
FLOAT_MIN_MAX: dict[str, tuple[str, str]] = {
    "float32": ("fminf", "fmaxf"),
    "float64": ("fmin", "fmax"),
    "float16": ("__hmin", "__hmax"),
    "bfloat16": ("__hmin", "__hmax"),
}
TO_FLOAT = {"float16": "__half2float", "bfloat16": "__bfloat162float"}
FROM_FLOAT = {"float16": "__float2half", "bfloat16": "__float2bfloat16"}
THREAD_TAGS = tuple(f"{p}.{a}" for p in ("blockIdx", "threadIdx") for a in "xyz")

# Floor division and modulo of signed integers, and floor modulo of floats, by (op, C type).
_HELPERS = {
    "floordiv": """\
__device__ __forceinline__ {t} ember_floordiv({t} a, {t} b) {{
  {t} q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}}
""",
    "floormod": """\
__device__ __forceinline__ {t} ember_floormod({t} a, {t} b) {{
  {t} r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}}
""",
    "float_floormod": """\
__device__ __forceinline__ {t} ember_floormod({t} a, {t} b) {{
  return a - {floor}(a / b) * b;
}}
""",
    # 4-bit integers: C computes char arithmetic in int, so every int4/uint4 result is
    # brought back to 4 bits (two's complement) before it is used or stored
    "wrap4": """\
__device__ __forceinline__ {t} ember_wrap_{name}(int x) {{
  return ({t})({body});
}}
""",
}
_WRAP4_BODY = {"int4": "((x & 15) ^ 8) - 8", "uint4": "x & 15"}
# the nodes whose int4/uint4 value C may leave outside 4 bits (constants, variables and
# selects of such values already are within them)
_WRAPPED_NODES = (E.BinOp, E.Cast, E.Call, E.BufferLoad)


# One cp.async of 4, 8 or 16 bytes from global to shared memory (sm_80+); 16-byte
# copies bypass L1 (.cg), the smaller ones may only go through it (.ca).
_CP_ASYNC = """\
__device__ __forceinline__ void ember_cp_async_{n}(void* dst, const void* src) {{
  unsigned int addr = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.{cache}.shared.global [%0], [%1], {n};\\n" :: "r"(addr), "l"(src));
}}
"""


# The same with a source size: 0 bytes read (the destination zero-filled) or all of them.
_CP_ASYNC_ZFILL = """\
__device__ __forceinline__ void ember_cp_async_zfill_{n}(void* dst, const void* src,
                                                        unsigned int bytes) {{
  unsigned int addr = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.{cache}.shared.global [%0], [%1], {n}, %2;\\n"
               :: "r"(addr), "l"(src), "r"(bytes));
}}
"""


def _helper_text(kind: str, ctype: str) -> str:
    if kind in ("cp_async", "cp_async_zfill"):
        text = _CP_ASYNC if kind == "cp_async" else _CP_ASYNC_ZFILL
        return text.format(n=ctype, cache="cg" if ctype == "16" else "ca")
    if kind == "wrap4":
        t = TYPE_NAMES[ctype]
        return _HELPERS[kind].format(t=t, name=ctype, body=_WRAP4_BODY[ctype])
    return _HELPERS[kind].format(t=ctype, floor="floorf" if ctype == "float" else "floor")


class CUDAPrinter(CUDAVectorMemory):
    """Prints one kernel; ``headers`` and ``helpers`` say what the translation unit needs."""

    reserved = CUDAVectorMemory.reserved | frozenset(
        [
            "threadIdx",
            "blockIdx",
            "blockDim",
            "gridDim",
            "half",
            "min",
            "max",
            "abs",
            DYNAMIC_SHARED,
            # math is printed by its C name (pow, fmod, isnan): a buffer must not shadow one
            *(op.value for op in E.Intrinsic),
        ]
    )

    def __init__(self, fast_math: bool = False) -> None:
        super().__init__()
        self.fast_math = fast_math
        self.headers: set[str] = set()
        self.helpers: set[tuple[str, str]] = set()  # (helper kind, C type) used
        self.launch: dict[str, int | E.PrimExpr] = {}
        self.shared = SharedLayout()
        self.fragment_layouts: dict[E.Var, str] = {}  # wmma matrix_a/b fragment -> layout
        self.fragment_scopes: dict[E.Var, str] = {}

    # -- types and constants ----------------------------------------------------------
    def type_name(self, dtype: str) -> str:
        if dt.lanes_of(dtype) > 1:
            raise InternalError(f"no scalar C type for vector dtype {dtype}")
        if dtype in HEADERS:
            self.headers.add(HEADERS[dtype])
        name = TYPE_NAMES.get(dtype)
        if name is None:
            raise InternalError(f"dtype {dtype} has no CUDA type")
        return name

    def print_literal(self, e: E.IntImm | E.FloatImm) -> Text:
        dtype = e.dtype
        if isinstance(e, E.FloatImm):
            return self._float_literal(dtype, e.value)
        v = e.value
        if dtype == "bool":
            return ("true" if v else "false"), PRIMARY
        suffix = {"int64": "LL", "uint32": "u", "uint64": "ull"}.get(dtype, "")
        bits = dt.bits_of(dtype)
        if v == -(1 << (bits - 1)) and dtype in ("int32", "int64"):
            return f"({v + 1}{suffix} - 1{suffix})", PRIMARY  # -2147483648 is not a literal
        text = f"{v}{suffix}"
        if dtype not in ("int32", "int64", "uint32", "uint64"):
            return f"({self.type_name(dtype)}){text}", UNARY
        return text, (UNARY if v < 0 else PRIMARY)

    def _float_literal(self, dtype: str, v: float) -> Text:
        if dtype in FROM_FLOAT:
            self.type_name(dtype)
            inner = self._float_literal("float32", v)[0]
            return f"{FROM_FLOAT[dtype]}({inner})", PRIMARY
        if v != v or v in (float("inf"), float("-inf")):
            if dtype == "float64":
                bits = {"inf": "0x7ff0000000000000", "-inf": "0xfff0000000000000"}
                return f"__longlong_as_double({bits.get(repr(v), '0x7ff8000000000000')}LL)", 16
            bits32 = {"inf": "0x7f800000", "-inf": "0xff800000"}
            return f"__int_as_float({bits32.get(repr(v), '0x7fc00000')})", PRIMARY
        text = repr(float(v))
        if dtype == "float32":
            text += "f"
        return text, (UNARY if v < 0 else PRIMARY)

    # -- 4-bit integers ---------------------------------------------------------------
    def print(self, e: E.PrimExpr, lane: int | None = None) -> Text:
        """As :meth:`CPrinter.print`, with every computed int4/uint4 value wrapped to 4 bits."""
        base = dt.element_of(e.dtype)
        if base not in dt.SUB_BYTE_INTS or not isinstance(e, _WRAPPED_NODES):
            return super().print(e, lane)
        if isinstance(e, E.Cast):
            if dt.element_of(e.value.dtype) == base:
                return self.print(e.value, lane)
            # through int, as LLVM converts through i32: (signed char)1e3f would be undefined
            text = f"(int){self.wrap(self._as_c_number(e.value, lane), UNARY)}"
        else:
            text = super().print(e, lane)[0]
        self.helpers.add(("wrap4", base))
        return f"ember_wrap_{base}({text})", PRIMARY

    def _as_c_number(self, e: E.PrimExpr, lane: int | None) -> Text:
        """``e`` as a value C can convert to int (half types through float)."""
        if dt.element_of(e.dtype) in TO_FLOAT:
            return self.to_float(e, lane), PRIMARY
        return self.print(e, lane)

    # -- conversions and math ---------------------------------------------------------
    def to_float(self, e: E.PrimExpr, lane: int | None) -> str:
        """``e`` as a float (or double) value, for math that half types do in float."""
        base = dt.element_of(e.dtype)
        if base in TO_FLOAT:
            self.type_name(base)
            return f"{TO_FLOAT[base]}({self.expr(e, lane)})"
        return self.expr(e, lane)

    def from_float(self, dtype: str, text: str) -> Text:
        if dtype in FROM_FLOAT:
            self.type_name(dtype)
            return f"{FROM_FLOAT[dtype]}({text})", PRIMARY
        return text, PRIMARY

    def print_cast(self, to: str, value: E.PrimExpr, lane: int | None) -> Text:
        frm = dt.element_of(value.dtype)
        if frm == to:
            return self.print(value, lane)
        if to in FROM_FLOAT:
            inner = self.to_float(value, lane) if frm in TO_FLOAT else None
            if inner is None:
                v = self.print(value, lane)
                inner = v[0] if frm == "float32" else f"(float){self.wrap(v, UNARY)}"
            return self.from_float(to, inner)
        if frm in TO_FLOAT:
            inner = self.to_float(value, lane)
            return (
                (inner, PRIMARY) if to == "float32" else (f"({self.type_name(to)}){inner}", UNARY)
            )
        return f"({self.type_name(to)}){self.wrap(self.print(value, lane), UNARY)}", UNARY

    def print_call(self, e: E.Call, lane: int | None) -> Text:
        base = dt.element_of(e.dtype)
        if e.op is I.LIKELY:
            return self.print(e.args[0], lane)
        if e.op in SHUFFLE_NAMES:
            value, offset = (self.expr(a, lane) for a in e.args)
            return f"{SHUFFLE_NAMES[e.op]}(0xffffffffu, {value}, {offset})", PRIMARY
        structural = print_structural_call(self, e, lane)
        if structural is not None:
            return structural
        if not dt.is_float(base):
            if e.op is I.ABS and dt.is_int(base):
                return f"{INT_ABS.get(base, 'abs')}({self.expr(e.args[0], lane)})", PRIMARY
            raise InternalError(f"intrinsic {e.op.value} has no CUDA form for {e.dtype}")
        args = [self.to_float(a, lane) for a in e.args]
        wide = base == "float64"
        if e.op is I.SIGMOID:
            one, exp = ("1.0", "exp") if wide else ("1.0f", self._math_name(I.EXP, False))
            arg = f"({args[0]})" if args[0].startswith("-") else args[0]  # never "--x"
            text = f"{one} / ({one} + {exp}(-{arg}))"
        else:
            text = f"{self._math_name(e.op, wide)}({', '.join(args)})"
        return self.from_float(base, text)

    def _math_name(self, op: E.Intrinsic, wide: bool) -> str:
        names = MATH_NAMES.get(op)
        if names is None:
            raise InternalError(f"intrinsic {op.value} has no CUDA math function")
        if self.fast_math and not wide and op in FAST_MATH_NAMES:
            return FAST_MATH_NAMES[op]
        return names[1] if wide else names[0]

    def print_special_binop(self, e: E.BinOp, lane: int | None) -> Text:
        base = dt.element_of(e.dtype)
        op = e.op
        if op in (E.BinaryOp.MIN, E.BinaryOp.MAX):
            return self._min_max(e, base, lane)
        if dt.is_float(base):
            return self._float_division(e, base, lane)
        if op in (E.BinaryOp.TRUNCDIV, E.BinaryOp.FLOORDIV) and (
            op is E.BinaryOp.TRUNCDIV or dt.is_uint(base) or self._plain_division(e)
        ):
            return self.binary("/", 13, e.a, e.b, lane)
        if op in (E.BinaryOp.TRUNCMOD, E.BinaryOp.FLOORMOD) and (
            op is E.BinaryOp.TRUNCMOD or dt.is_uint(base) or self._plain_division(e)
        ):
            return self.binary("%", 13, e.a, e.b, lane)
        ctype = self.type_name("int64" if base == "int64" else "int32")
        kind = "floordiv" if op is E.BinaryOp.FLOORDIV else "floormod"
        self.helpers.add((kind, ctype))
        fn = "ember_" + kind
        return f"{fn}({self.expr(e.a, lane)}, {self.expr(e.b, lane)})", PRIMARY

    def _plain_division(self, e: E.BinOp) -> bool:
        """Floor and truncating division agree when the dividend is >= 0 and the divisor > 0."""
        return dt.lanes_of(e.dtype) == 1 and self.nonnegative(e.a) and self.positive(e.b)

    def _min_max(self, e: E.BinOp, base: str, lane: int | None) -> Text:
        first = e.op is E.BinaryOp.MIN
        a, b = self.expr(e.a, lane), self.expr(e.b, lane)
        if base in FLOAT_MIN_MAX:
            self.type_name(base)
            return f"{FLOAT_MIN_MAX[base][0 if first else 1]}({a}, {b})", PRIMARY
        fn = "min" if first else "max"
        if dt.bits_of(base) < 32:
            a, b = f"(int){a}", f"(int){b}"  # CUDA's min/max have no narrow overloads
        return f"{fn}({a}, {b})", PRIMARY

    def _float_division(self, e: E.BinOp, base: str, lane: int | None) -> Text:
        wide = base == "float64"
        a, b = self.to_float(e.a, lane), self.to_float(e.b, lane)
        ctype = "double" if wide else "float"
        if e.op is E.BinaryOp.FLOORDIV:
            text = f"{'floor' if wide else 'floorf'}({a} / {b})"
        elif e.op is E.BinaryOp.TRUNCDIV:
            text = f"{'trunc' if wide else 'truncf'}({a} / {b})"
        elif e.op is E.BinaryOp.TRUNCMOD:
            text = f"{'fmod' if wide else 'fmodf'}({a}, {b})"
        else:
            self.helpers.add(("float_floormod", ctype))
            text = f"ember_floormod({a}, {b})"
        return self.from_float(base, text)

    # -- statements -------------------------------------------------------------------
    def print_thread_loop(self, s: S.For) -> None:
        tag = s.thread_tag
        if tag not in THREAD_TAGS or tag not in self.launch:
            raise InternalError(
                f"loop '{s.loop_var.name}' is bound to '{tag}', which the kernel's launch "
                "dimensions do not cover; 'split_host_device' should have recorded it"
            )
        launch = self.launch[tag]
        if not isinstance(launch, int):  # a symbolic grid extent: the launch is the loop's
            if not structural_equal(s.extent, launch, map_free_vars=False):
                raise InternalError(
                    f"loop '{s.loop_var.name}' bound to {tag} has extent {s.extent!r}, not the "
                    f"launch's {launch!r}"
                )
            name = self.names.bind(s.loop_var, s.loop_var.name)
            ctype = self.type_name(s.loop_var.dtype)
            value = tag if E.is_const_int(s.min, 0) else f"({ctype}){tag} + {self.expr(s.min)}"
            self.line(f"{ctype} {name} = {value};")
            self.learn(s.loop_var, E.Range(s.min, s.extent))
            self.stmt(s.body)
            return
        if not isinstance(s.extent, E.IntImm) or s.extent.value > self.launch[tag]:
            raise InternalError(
                f"loop '{s.loop_var.name}' bound to {tag} has extent {s.extent!r}, more than "
                f"the launch's {self.launch[tag]}"
            )
        ctype = self.type_name(s.loop_var.dtype)
        value = tag if E.is_const_int(s.min, 0) else f"({ctype}){tag} + {self.expr(s.min)}"
        name = self.names.bind(s.loop_var, s.loop_var.name)
        self.line(f"{ctype} {name} = {value};")
        self.learn(s.loop_var, E.Range(s.min, s.extent))
        if s.extent.value < self.launch[tag]:
            index = name if E.is_const_int(s.min, 0) else tag
            with self.block(f"if ({index} < {s.extent.value})"):
                self.stmt(s.body)
        else:
            self.stmt(s.body)

    def stmt_Evaluate(self, s: S.Evaluate) -> None:
        if isinstance(s.value, E.Call) and s.value.op in E.TENSOR_CORE_CALLS:
            print_tensor_core(self, s.value)
            return
        if isinstance(s.value, E.Call) and s.value.op is E.Intrinsic.PREFETCH:
            return  # Stage.prefetch is a CPU cache hint; GPU code emits nothing for it
        super().stmt_Evaluate(s)

    def print_allocate(self, s: S.Allocate) -> None:
        buf = s.buffer
        if buf.scope in WMMA_SCOPES:
            self.line(print_fragment_allocation(self, buf, fragment_count(buf)))
            self.stmt(s.body)
            return
        if buf.scope not in ("shared", "local"):
            raise InternalError(
                f"allocation of '{buf.name}' in scope '{buf.scope}' inside a kernel; "
                "'split_host_device' should have made it a workspace parameter"
            )
        size = buf.flat_size() if len(buf.shape) != 1 else buf.shape[0]
        if not isinstance(size, E.IntImm):
            raise InternalError(f"'{buf.name}' ({buf.scope}) has a non-constant size {size!r}")
        name = self.names.bind(buf.data, buf.name)
        self._declared_dtype[buf.data] = buf.dtype
        ctype = self.type_name(buf.dtype)
        if buf.scope == "shared" and self.shared.dynamic:
            offset = self.shared.offsets[id(s)]
            where = f"({DYNAMIC_SHARED} + {offset})" if offset else DYNAMIC_SHARED
            self.line(f"{ctype}* {name} = ({ctype}*){where};")
        else:
            prefix = "__shared__ " if buf.scope == "shared" else ""
            self.line(f"{prefix}__align__(16) {ctype} {name}[{size.value}];")
        self.stmt(s.body)

    def print_barrier(self, s: S.Barrier) -> None:
        if s.scope == "shared":
            self.line("__syncthreads();")
        elif s.scope == "warp":
            self.line("__syncwarp();")
        else:
            raise InternalError(f"no CUDA barrier for scope '{s.scope}'")

    # -- asynchronous copies (inject_pipeline) --------------------------------------------
    def stmt_AsyncCopy(self, s: S.AsyncCopy) -> None:
        store = s.store
        load = async_source(store.value)
        if load is None:
            raise InternalError(f"asynchronous copy of {store.value!r}: not a global load")
        nbytes = dt.bytes_of(load.dtype)
        dst = self.flat_index(store.buffer, store.indices)
        src = self.flat_index(load.buffer, load.indices)
        dst_base = dst.base if isinstance(dst, E.Ramp) else dst
        src_base = src.base if isinstance(src, E.Ramp) else src
        dst_ref = f"&{self.buffer_ref(store.buffer)}[{self.expr(dst_base)}]"
        src_ref = f"&{self.buffer_ref(load.buffer)}[{self.expr(src_base)}]"
        if not isinstance(store.value, E.Select):
            self.helpers.add(("cp_async", str(nbytes)))
            self.line(f"ember_cp_async_{nbytes}({dst_ref}, {src_ref});")
            return
        cond = store.value.cond
        cond = cond.value if isinstance(cond, E.Broadcast) else cond
        flag = self.names.fresh("copy")
        self.helpers.add(("cp_async_zfill", str(nbytes)))
        self.line(f"bool {flag} = {self.expr(cond)};")
        # where nothing is read the source need not be valid: point at the buffer itself
        self.line(
            f"ember_cp_async_zfill_{nbytes}({dst_ref}, {flag} ? (const void*)({src_ref}) : "
            f"(const void*){self.buffer_ref(load.buffer)}, {flag} ? {nbytes}u : 0u);"
        )

    def stmt_AsyncCommit(self, s: S.AsyncCommit) -> None:
        self.line('asm volatile("cp.async.commit_group;\\n" ::);')

    def stmt_AsyncWait(self, s: S.AsyncWait) -> None:
        self.line(f'asm volatile("cp.async.wait_group {s.pending};\\n" ::);')

    # -- the kernel -------------------------------------------------------------------
    def print_function(self, func: S.PrimFunc) -> str:
        """The kernel's definition (without headers)."""
        launch = func.attr("launch")
        if launch is None:
            raise InternalError(
                f"'{func.name}' has no launch dimensions; run 'split_host_device' first"
            )
        grid, block = launch
        for axis, g, b in zip("xyz", grid, block):
            self.launch[f"blockIdx.{axis}"] = g
            self.launch[f"threadIdx.{axis}"] = b
        threads = block[0] * block[1] * block[2]
        name = self.names.fresh(func.attr("global_symbol") or func.name)
        params = self._params(func)
        self.shared = shared_layout(func)
        self.fragment_layouts = fragment_layouts(func.body)
        if self.shared.dynamic:  # the runtime reads this line's number (resources.py too)
            self.line(f"// {name}: {self.shared.total_bytes} bytes of dynamic shared memory")
        self.line(f'extern "C" __global__ void __launch_bounds__({threads}) {name}(')
        self.lines[-1] += ", ".join(params) + ") {"
        self.depth += 1
        if self.shared.dynamic:
            self.line(f"extern __shared__ __align__(16) unsigned char {DYNAMIC_SHARED}[];")
        self.stmt(func.body)
        self.depth -= 1
        self.line("}")
        return self.source()

    def _params(self, func: S.PrimFunc) -> list[str]:
        stored: set[E.Var] = set()

        def visit(n: object) -> None:
            if isinstance(n, S.BufferStore):
                stored.add(n.buffer.data)
            elif isinstance(n, E.Call) and n.op in E.TENSOR_CORE_CALLS:
                stored.add(written_pointer(n))  # type: ignore[arg-type]
            elif isinstance(n, E.Call) and n.op is E.Intrinsic.ACCESS_PTR:
                if E.const_value(n.args[3]) != 1:  # not read-only: a callee writes through it
                    stored.add(n.args[0])  # type: ignore[arg-type]

        post_order_visit(func.body, visit, once=True)
        datas = [b.data for b in func.buffers]
        restrict = " __restrict__" if len(set(datas)) == len(datas) else ""
        out = []
        for var in func.size_vars():
            self.names.bind(var, var.name)
        for buf in func.buffers:
            if self.names.get(buf.data) is not None:
                raise InternalError(f"buffer '{buf.name}' is passed twice to '{func.name}'")
            pname = self.names.bind(buf.data, buf.name)
            self._declared_dtype[buf.data] = buf.dtype
            const = "" if buf.data in stored else "const "
            out.append(f"{const}{self.type_name(dt.element_of(buf.dtype))}*{restrict} {pname}")
        for var in func.size_vars():  # sizes by value, after the pointers (the launch order)
            out.append(f"{self.type_name(var.dtype)} {self.names.get(var)}")
        return out


def print_module(funcs: Sequence[S.PrimFunc], fast_math: bool | None = None) -> str:
    """One CUDA translation unit holding every kernel, with only the headers they use."""
    headers: set[str] = set()
    helpers: set[tuple[str, str]] = set()
    bodies: list[str] = []
    for func in funcs:
        fm = bool(func.attr("fast_math", False)) if fast_math is None else fast_math
        printer = CUDAPrinter(fast_math=fm)
        bodies.append(printer.print_function(func))
        headers |= printer.headers
        helpers |= printer.helpers
    parts = [
        "// Generated by Ember: "
        + ", ".join(f.attr("global_symbol") or f.name for f in funcs)
        + "\n"
    ]
    if headers:
        parts.append("".join(f"#include <{h}>\n" for h in sorted(headers)))
    if helpers:
        parts.append("".join(_helper_text(kind, ctype) for kind, ctype in sorted(helpers)))
    parts.extend(bodies)
    return "\n".join(parts)


def print_kernel(func: S.PrimFunc, fast_math: bool | None = None) -> str:
    """One kernel's CUDA source, including the headers and helpers it needs."""
    return print_module([func], fast_math=fast_math)


__all__ = ["CUDAPrinter", "print_kernel", "print_module"]
