"""Linear quantization computes: quantize, dequantize, requantize, integer matmul and conv.

ONNX's quantized operators share a few pieces of arithmetic, kept here so each is
written once: a scale or zero point read per tensor, per axis or per block
(:func:`param_reader`); ``saturate(round_half_even(x / scale) + zp)``
(:func:`quantize_linear`); ``(x - zp) * scale`` (:func:`dequantize_linear`); an int32
accumulator scaled back into 8 bits (:func:`requantize`). Integer products subtract
the zero points in int32 before multiplying, so a padded tap (read as 0 after the
shift) is the zero point and the accumulator is exact. The float steps follow
onnxruntime's order of operations (divide, not multiply by a reciprocal; the
requantization multiplier ``a_scale * b_scale / y_scale``) so results match it bit
for bit. Float inputs are computed in float32; the caller picks the output dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir import op as _op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi import nan_order
from ember.tir.topi.broadcast import nan_max, nan_min
from ember.tir.topi.conv import conv_nd
from ember.tir.topi.linalg import matmul_nd
from ember.tir.topi.minifloat import MINIFLOATS, STORED_AS, decode, encode
from ember.tir.topi.transform import static_shape

QRANGE = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
    # held one value per byte (tir/topi/minifloat.py)
    "uint4": (0, 15),
    "int4": (-8, 7),
    "uint2": (0, 3),
    "int2": (-2, 1),
}
# the float types quantize_linear rounds to (a zero point is read for float4 only)
QFLOATS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")

Index = Sequence[E.PrimExpr]
Reader = Callable[[Index], E.PrimExpr]


def param_layout(ps: Sequence[int], shape: Sequence[int], axis: int, block_size: int = 0) -> str:
    """``"tensor"``, ``"axis"`` or ``"block"``: how a scale or zero point of shape ``ps``
    spreads over data of ``shape``. One element: per tensor. 1-D with ``shape[axis]``
    elements: per axis. Same rank as the data with ``ceil(shape[axis] / block_size)``
    along ``axis``: per block. Anything else raises ArgumentError."""
    size = 1
    for d in ps:
        size *= d
    if size == 1 and block_size == 0:
        return "tensor"
    if block_size > 0:
        nblk = -(-shape[axis] // block_size)
        want = tuple(nblk if d == axis else n for d, n in enumerate(shape))
        if tuple(ps) != want:
            raise ArgumentError(
                f"a blocked scale or zero point for data {list(shape)}, axis {axis} and "
                f"block_size {block_size} must have shape {list(want)}, got {list(ps)}"
            )
        return "block"
    if len(ps) == 1 and len(shape) > 0 and ps[0] == shape[axis]:
        return "axis"
    raise ArgumentError(
        f"a scale or zero point of shape {list(ps)} fits neither per-tensor nor per-axis "
        f"(axis {axis} of {list(shape)}) quantization"
    )


def param_reader(P: Tensor, shape: Sequence[int], axis: int, block_size: int = 0) -> Reader:
    """How an element at index ``i`` of a ``shape`` tensor finds its scale or zero point."""
    ps = static_shape(P)
    layout = param_layout(ps, shape, axis, block_size)
    if layout == "tensor":
        return lambda i: P[(E.const(0, "int32"),) * len(ps)]
    if layout == "block":
        return lambda i: P[tuple(ix // block_size if d == axis else ix for d, ix in enumerate(i))]
    return lambda i: P[(i[axis],)]


def _f32(v: E.PrimExpr) -> E.PrimExpr:
    return v if v.dtype == "float32" else E.cast("float32", v)


def _i32(v: E.PrimExpr) -> E.PrimExpr:
    return v if v.dtype == "int32" else E.cast("int32", v)


def saturate_round(value: E.PrimExpr, zp: E.PrimExpr | None, out_dtype: str) -> E.PrimExpr:
    """``clamp(round_half_even(value) + zp, range of out_dtype)`` as ``out_dtype``.

    Clamping in float before the conversion keeps the float-to-int cast in range
    (out-of-range conversions are undefined in LLVM and C).
    """
    if out_dtype not in QRANGE:
        raise ArgumentError(f"quantizing to {out_dtype} is not supported (8- to 16-bit integers)")
    lo, hi = QRANGE[out_dtype]
    q = _op.nearbyint(value)
    if zp is not None:
        q = q + _f32(zp)
    q = E.min_(E.max_(q, E.const(float(lo), "float32")), E.const(float(hi), "float32"))
    return E.cast(STORED_AS.get(out_dtype, out_dtype), E.cast("int32", q))


def round_to_float(
    value: E.PrimExpr, zp: E.PrimExpr | None, out_dtype: str, saturate: bool
) -> E.PrimExpr:
    """``value`` rounded to minifloat ``out_dtype`` (its bits), as ONNX's reference
    quantizes: float8 with ``saturate`` and no zero point (ONNX's are zero), float4 with
    its zero point added first and always saturating."""
    fmt = MINIFLOATS[out_dtype]
    if zp is not None and fmt.style == "finite":
        value = value + decode(zp, fmt)
    return encode(value, fmt, saturate)


def quantize_linear(
    X: Tensor,
    scale: Tensor,
    zero_point: Tensor | None,
    axis: int,
    block_size: int,
    out_dtype: str,
    name: str = "quantize",
    saturate: bool = True,
) -> Tensor:
    """``saturate(round_half_even(x / scale) + zero_point)``; to a float type,
    :func:`round_to_float` (``saturate`` is ONNX's attribute for float8)."""
    xs = static_shape(X)
    s_at = param_reader(scale, xs, axis, block_size)
    z_at = param_reader(zero_point, xs, axis, block_size) if zero_point is not None else None

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        zp = z_at(i) if z_at is not None else None
        value = _f32(X[i]) / _f32(s_at(i))
        if out_dtype in QFLOATS:
            return round_to_float(value, zp, out_dtype, saturate)
        return saturate_round(value, zp, out_dtype)

    return te.compute(xs, f, name=name, tag="elementwise")


def dequantize_linear(
    X: Tensor,
    scale: Tensor,
    zero_point: Tensor | None,
    axis: int,
    block_size: int,
    out_dtype: str,
    name: str = "dequantize",
    x_dtype: str = "",
) -> Tensor:
    """``(x - zero_point) * scale``, the difference taken exactly in int32; ``x_dtype``
    names a minifloat ``X`` holds the bits of (``X``'s own dtype cannot say), which is
    widened instead, its zero point not read (ONNX's reference ignores it)."""
    xs = static_shape(X)
    s_at = param_reader(scale, xs, axis, block_size)
    z_at = param_reader(zero_point, xs, axis, block_size) if zero_point is not None else None
    fmt = MINIFLOATS.get(x_dtype)

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        if fmt is not None:
            y = decode(X[i], fmt) * _f32(s_at(i))
        else:
            q = _i32(X[i])
            if z_at is not None:
                q = q - _i32(z_at(i))
            y = E.cast("float32", q) * _f32(s_at(i))
        return y if out_dtype == "float32" else E.cast(out_dtype, y)

    return te.compute(xs, f, name=name, tag="elementwise")


def requantize(
    acc: Tensor,
    multiplier: Callable[[Index], E.PrimExpr],
    zero_point: Callable[[Index], E.PrimExpr],
    out_dtype: str,
    name: str = "requantize",
) -> Tensor:
    """``saturate(round_half_even(float(acc) * multiplier) + zero_point)`` (onnxruntime's
    requantization: an int32 accumulator back to 8 bits through a float32 multiplier)."""

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        return saturate_round(E.cast("float32", acc[i]) * multiplier(i), zero_point(i), out_dtype)

    return te.compute(acc.shape, f, name=name, tag="elementwise")


def shift_to_int32(X: Tensor, zp_at: Reader | None, name: str) -> Tensor:
    """``int32(x) - zero_point``: the operand of an exact integer product."""

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        v = _i32(X[i])
        return v - _i32(zp_at(i)) if zp_at is not None else v

    return te.compute(X.shape, f, name=name, tag="elementwise")


def vector_reader(P: Tensor, dim: int | None, size: int, what: str, per: str = "") -> Reader:
    """A parameter of an integer product: one value for every element, or ``size`` values
    indexed along ``dim`` (a row or column of a matmul, a conv's output channel)."""
    ps = static_shape(P)
    if _numel(P) == 1:
        return lambda i: P[(E.const(0, "int32"),) * len(ps)]
    if dim is not None and ps == (size,):
        return lambda i: P[(i[dim],)]
    also = f" or have {size} values, one per {per}" if dim is not None else ""
    raise ArgumentError(f"{what} of shape {list(ps)} must be a scalar{also}")


def matmul_integer(
    A: Tensor, B: Tensor, a_zp: Tensor | None, b_zp: Tensor | None, name: str = "matmul_int"
) -> Tensor:
    """``(A - a_zp) @ (B - b_zp)`` accumulated exactly in int32 (numpy matmul broadcasting);
    ``a_zp`` per tensor or per row of A, ``b_zp`` per tensor or per column of B."""
    sa, sb = static_shape(A), static_shape(B)
    a_at = b_at = None
    if a_zp is not None:
        rows = (len(sa) - 2, sa[-2]) if len(sa) >= 2 else (None, 1)
        a_at = vector_reader(a_zp, *rows, "A's zero point", "row")
    if b_zp is not None:
        cols = (len(sb) - 1, sb[-1]) if len(sb) >= 2 else (None, 1)
        b_at = vector_reader(b_zp, *cols, "B's zero point", "column")
    a32 = shift_to_int32(A, a_at, f"{name}_a")
    b32 = shift_to_int32(B, b_at, f"{name}_b")
    return matmul_nd(a32, b32, name=name)


def matmul_int8_packed(A: Tensor, P: Tensor, N: int, K: int, name: str = "matmul_int8") -> Tensor:
    """``A @ W`` in int32 for u8 A (M, K) and s8 W given packed, ``P[x, g, z, q] =
    W[4g + q, 16x + z]`` (the layout of the VNNI kernel, which the CPU uses instead)."""
    M = static_shape(A)[0]
    k = te.reduce_axis((0, K), name="k")

    def body(m, n):  # noqa: ANN001, ANN202
        w = P[n // 16, k // 4, n % 16, k % 4]
        return te.sum(A[m, k].astype("int32") * w.astype("int32"), axis=k)

    return te.compute((M, N), body, name=name)


def conv_integer(
    X: Tensor,
    W: Tensor,
    x_zp: Tensor | None,
    w_zp: Tensor | None,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    groups: int,
    name: str = "conv_int",
) -> Tensor:
    """``conv(X - x_zp, W - w_zp)`` in int32; ``x_zp`` per tensor, ``w_zp`` per tensor or
    per output channel. Padding reads 0 after the shift, i.e. the zero point."""
    ws = static_shape(W)
    x_at = vector_reader(x_zp, None, 1, "the input zero point") if x_zp is not None else None
    w_at = None
    if w_zp is not None:
        w_at = vector_reader(w_zp, 0, ws[0], "the weight zero point", "output channel")
    x32 = shift_to_int32(X, x_at, f"{name}_x")
    w32 = shift_to_int32(W, w_at, f"{name}_w")
    return conv_nd(x32, w32, None, strides, pads, dilations, groups, name=name)


def _numel(t: Tensor) -> int:
    n = 1
    for d in static_shape(t):
        n *= d
    return n


def _multiplier(in_a: Reader, in_b: Reader, y_scale: Reader) -> Reader:
    """onnxruntime's requantization multiplier ``a_scale * b_scale / y_scale`` in float32."""
    return lambda i: (_f32(in_a(i)) * _f32(in_b(i))) / _f32(y_scale(i))


def qlinear_matmul(
    A: Tensor,
    a_scale: Tensor,
    a_zp: Tensor,
    B: Tensor,
    b_scale: Tensor,
    b_zp: Tensor,
    y_scale: Tensor,
    y_zp: Tensor,
    name: str = "qlinear_matmul",
) -> Tensor:
    """ONNX QLinearMatMul: an exact int32 product requantized to ``y_zp``'s dtype; A's
    scale and zero point per tensor or per row, B's per tensor or per column."""
    sa, sb = static_shape(A), static_shape(B)
    acc = matmul_integer(A, B, a_zp, b_zp, name=f"{name}_acc")
    out = static_shape(acc)
    r = len(out)  # a 1-D operand's unit axis is dropped from the output: no row or column
    row = (r - 2 if len(sb) >= 2 else r - 1) if len(sa) >= 2 else None
    col = r - 1 if len(sb) >= 2 else None
    mult = _multiplier(
        vector_reader(a_scale, row, out[row] if row is not None else 1, "a_scale", "row"),
        vector_reader(b_scale, col, out[col] if col is not None else 1, "b_scale", "column"),
        vector_reader(y_scale, None, 1, "y_scale"),
    )
    zp = vector_reader(y_zp, None, 1, "y_zero_point")
    return requantize(acc, mult, zp, y_zp.dtype, name=name)


def qlinear_conv(
    X: Tensor,
    x_scale: Tensor,
    x_zp: Tensor,
    W: Tensor,
    w_scale: Tensor,
    w_zp: Tensor,
    y_scale: Tensor,
    y_zp: Tensor,
    bias: Tensor | None,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    groups: int,
    name: str = "qlinear_conv",
) -> Tensor:
    """ONNX QLinearConv: ``conv(X - x_zp, W - w_zp) + bias`` in int32, requantized with
    ``x_scale * w_scale[o] / y_scale`` (weights per tensor or per output channel)."""
    acc = conv_integer(X, W, x_zp, w_zp, strides, pads, dilations, groups, name=f"{name}_acc")
    out = static_shape(acc)
    if bias is not None:
        if static_shape(bias) != (out[1],):
            raise ArgumentError(f"the bias must have shape [{out[1]}], got {list(bias.shape)}")
        plain = acc
        acc = te.compute(
            out, lambda *i: plain[i] + _i32(bias[(i[1],)]), name=f"{name}_bias", tag="broadcast"
        )
    mult = _multiplier(
        vector_reader(x_scale, None, 1, "x_scale"),
        vector_reader(w_scale, 1, out[1], "w_scale", "output channel"),
        vector_reader(y_scale, None, 1, "y_scale"),
    )
    zp = vector_reader(y_zp, None, 1, "y_zero_point")
    return requantize(acc, mult, zp, y_zp.dtype, name=name)


def dynamic_qparams(X: Tensor, name: str = "dyn_qparams") -> tuple[Tensor, Tensor]:
    """DynamicQuantizeLinear's scale and uint8 zero point from the range of ``X`` widened to
    hold 0: ``scale = (max - min) / 255`` (1 when the range is empty), ``zp =
    saturate(round_half_even(-min / scale))``, in onnxruntime's order of operations.

    A NaN in ``X`` makes the range NaN, as ReduceMax/ReduceMin give (:mod:`.nan_order`):
    the scale is NaN, the zero point 255 and every quantized value 0 (a NaN saturates to
    0). That is what ONNX's reference implementation gives, and onnxruntime where it sees
    the NaN; onnxruntime's SIMD min/max drop a NaN in most positions (which ones depends
    on the length), so Ember deliberately differs from it there. An infinite range gives
    the scale inf and, where ``-min / scale`` is NaN (a -inf minimum), the zero point 255,
    as onnxruntime's clamp ``max(0, min(255, v))`` does.
    """
    xs = static_shape(X)
    if not xs:
        raise ArgumentError("DynamicQuantizeLinear needs an input with at least one dimension")
    r1 = [te.reduce_axis((0, n), name=f"r{d}") for d, n in enumerate(xs)]
    r2 = [te.reduce_axis((0, n), name=f"s{d}") for d, n in enumerate(xs)]
    lo = te.compute(
        (), lambda: nan_order.min_nan(_f32(X[tuple(r1)]), axis=tuple(r1)), name=f"{name}_min"
    )
    hi = te.compute(
        (), lambda: nan_order.max_nan(_f32(X[tuple(r2)]), axis=tuple(r2)), name=f"{name}_max"
    )
    zero = E.const(0.0, "float32")

    def scale_of() -> E.PrimExpr:
        mn, mx = nan_min(lo[()], zero), nan_max(hi[()], zero)
        return E.select(mx == mn, E.const(1.0, "float32"), (mx - mn) / E.const(255.0, "float32"))

    scale = te.compute((), scale_of, name=f"{name}_scale", tag="elementwise")

    def zero_point() -> E.PrimExpr:
        start = zero - nan_min(lo[()], zero) / scale[()]
        top = E.const(QRANGE["uint8"][1], "uint8")
        return E.select(_op.isnan(start), top, saturate_round(start, None, "uint8"))

    zp = te.compute((), zero_point, name=f"{name}_zp", tag="elementwise")
    return scale, zp
