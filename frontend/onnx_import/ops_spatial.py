"""Converters for ConvTranspose, LpPool and GlobalLpPool.

ConvTranspose's output geometry is resolved here as ONNX specifies it: with
``auto_pad`` SAME_UPPER/SAME_LOWER the output is ``output_shape`` (default
input * stride) and the total padding is split between begin and end (the odd one
at the end for SAME_UPPER); otherwise the explicit pads give the output size,
unless ``output_shape`` fixes it (extra positions at the end are zero plus bias).
"""

from __future__ import annotations

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.ops_nn import int_attr, resolve_pads, static_spatial
from ember.frontend.onnx_import.registry import converter
from ember.tir.topi.conv_transpose import conv_transpose_out_size


def _transpose_geometry(
    ctx: ConvertContext, sizes: tuple[int, ...], kernel: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(begin pads, output spatial size) of a ConvTranspose node."""
    n = len(sizes)
    strides = int_attr(ctx, "strides", (1,) * n)
    dil = int_attr(ctx, "dilations", (1,) * n)
    out_pad = int_attr(ctx, "output_padding", (0,) * n)
    shape = tuple(int(v) for v in ctx.attr("output_shape", ()))
    if len(shape) == n + 2:
        shape = shape[2:]
    if shape and len(shape) != n:
        raise ArgumentError(f"ConvTranspose: output_shape {list(shape)} does not fit {n} dims")
    auto = ctx.attr("auto_pad", "NOTSET")
    full = [
        strides[d] * (sizes[d] - 1) + out_pad[d] + (kernel[d] - 1) * dil[d] + 1 for d in range(n)
    ]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = shape or tuple(sizes[d] * strides[d] for d in range(n))
        total = [full[d] - out[d] for d in range(n)]
        lo = tuple(t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total)
        return lo, tuple(out)
    if auto not in ("NOTSET", "", "VALID"):
        raise ArgumentError(f"ConvTranspose: unknown auto_pad {auto!r}")
    pads = (0,) * (2 * n) if auto == "VALID" else int_attr(ctx, "pads", (0,) * (2 * n))
    lo = pads[:n]
    if shape:
        return lo, shape
    out = tuple(
        conv_transpose_out_size(
            sizes[d], kernel[d], strides[d], dil[d], lo[d], pads[n + d], out_pad[d]
        )
        for d in range(n)
    )
    return lo, out


@converter("ConvTranspose", since=1)
def conv_transpose(ctx: ConvertContext) -> list[str]:
    """ONNX ConvTranspose, with ``output_padding`` and ``output_shape`` worked out (module
    notes)."""
    sizes = static_spatial(ctx, 0)
    wk = static_spatial(ctx, 1)
    n = len(sizes)
    kernel = int_attr(ctx, "kernel_shape", wk)
    if kernel != wk:
        raise ArgumentError(f"ConvTranspose: kernel_shape {list(kernel)} != weights {list(wk)}")
    pads_begin, out = _transpose_geometry(ctx, sizes, kernel)
    if any(s <= 0 for s in out):
        raise ArgumentError(f"ConvTranspose: output size {list(out)} is not positive")
    attrs = {
        "strides": int_attr(ctx, "strides", (1,) * n),
        "pads_begin": pads_begin,
        "dilations": int_attr(ctx, "dilations", (1,) * n),
        "out_spatial": out,
        "group": int(ctx.attr("group", 1)),
    }
    return ctx.emit("conv_transpose", ctx.inputs(), attrs)


@converter("LpPool", since=1)
def lp_pool(ctx: ConvertContext) -> list[str]:
    """ONNX LpPool."""
    sizes = static_spatial(ctx, 0)
    n = len(sizes)
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape"))
    if len(kernel) != n:
        raise ArgumentError(f"LpPool: kernel_shape {list(kernel)} does not fit {n} spatial dims")
    strides = int_attr(ctx, "strides", (1,) * n)
    dil = int_attr(ctx, "dilations", (1,) * n)
    attrs = {
        "p": float(ctx.attr("p", 2)),
        "kernel": kernel,
        "strides": strides,
        "pads": resolve_pads(ctx, sizes, kernel, strides, dil),
        "dilations": dil,
        "ceil_mode": bool(ctx.attr("ceil_mode", 0)),
    }
    if attrs["p"] <= 0:
        raise ArgumentError(f"LpPool: p must be positive, got {attrs['p']}")
    return ctx.emit("lp_pool", [ctx.input(0)], attrs)


@converter("GlobalLpPool", since=1)
def global_lp_pool(ctx: ConvertContext) -> list[str]:
    """ONNX GlobalLpPool, as an Lp pool over the whole spatial extent."""
    sizes = static_spatial(ctx, 0)
    n = len(sizes)
    attrs = {
        "p": float(ctx.attr("p", 2)),
        "kernel": sizes,
        "strides": (1,) * n,
        "pads": (0,) * (2 * n),
        "dilations": (1,) * n,
        "ceil_mode": False,
    }
    if attrs["p"] <= 0:
        raise ArgumentError(f"GlobalLpPool: p must be positive, got {attrs['p']}")
    return ctx.emit("lp_pool", [ctx.input(0)], attrs)


@converter("MaxUnpool", since=9)
def max_unpool(ctx: ConvertContext) -> list[str]:
    """ONNX MaxUnpool, with the output shape from the attributes or the optional input."""
    sizes = static_spatial(ctx, 0)
    n = len(sizes)
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape"))
    if len(kernel) != n:
        raise ArgumentError(f"MaxUnpool: kernel_shape {list(kernel)} does not fit {n} dims")
    strides = int_attr(ctx, "strides", (1,) * n)
    pads = int_attr(ctx, "pads", (0,) * (2 * n))
    if ctx.has_input(2):
        shape = tuple(int(v) for v in ctx.constant(2).reshape(-1))
        if len(shape) != n + 2:
            raise ArgumentError(f"MaxUnpool: output_shape {list(shape)} needs {n + 2} values")
        out = shape[2:]
    else:
        out = tuple(
            (sizes[d] - 1) * strides[d] + kernel[d] - pads[d] - pads[n + d] for d in range(n)
        )
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "out_spatial": out}
    return ctx.emit("max_unpool", [ctx.input(0), ctx.input(1)], attrs)
