"""The computes of the tensor-core GEMM templates: padded operands, the product, its shared
copy and the fused epilogue.

Pure tensor expressions, no schedule: ``codegen_cuda/schedules/matmul_tensorcore.py``
(``schedule_tensorcore_gemm``) schedules them for the matmul templates, the NHWC
implicit-GEMM convolution and the CUDA strategy. The stage names (``AP``, ``BP``, ``CF``,
``CS``) are part of the contract: the schedule finds its stages by them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir import op as tirop
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.transform import static_shape

__all__ = [
    "ACTIVATIONS",
    "IN_DTYPES",
    "Epilogue",
    "activation_fn",
    "gemm_output",
    "gemm_stages",
    "make_epilogue",
    "padded_operand",
    "round_up",
    "tensorcore_gemm_stages",
]

IN_DTYPES = ("float16", "bfloat16")
ACTIVATIONS = ("none", "relu", "gelu")
# (accumulator value, output indices) -> the output value
Epilogue = Callable[[E.PrimExpr, tuple[E.PrimExpr, ...]], E.PrimExpr]


def round_up(x: int, m: int) -> int:
    """``x`` rounded up to a multiple of ``m``, to pad GEMM dims to whole tensor-core tiles."""
    return -(-x // m) * m


def activation_fn(name: str) -> Callable[[E.PrimExpr], E.PrimExpr]:
    """The activation of a fused epilogue, on fp32 (or fp16) values."""
    if name == "none":
        return lambda x: x
    if name == "relu":
        return lambda x: E.max_(x, E.const(0, x.dtype))
    if name == "gelu":  # exact GELU: x * Phi(x)
        return lambda x: x * (tirop.erf(x * E.const(0.7071067811865476, x.dtype)) + 1) * 0.5
    raise ArgumentError(f"tensor-core epilogue: activation must be one of {ACTIVATIONS}: {name!r}")


def make_epilogue(acc_dtype: str, out_dtype: str, bias: Tensor | None, activation: str) -> Epilogue:
    """``cast(out_dtype, act(acc + bias[col]))``: the tail a frontend fuses into a GEMM."""
    act = activation_fn(activation)

    def epilogue(acc: E.PrimExpr, idx: tuple[E.PrimExpr, ...]) -> E.PrimExpr:
        x = acc if bias is None else acc + bias[idx[-1]].astype(acc_dtype)
        x = act(x)
        return x if out_dtype == acc_dtype else x.astype(out_dtype)

    return epilogue


def padded_operand(X: Tensor, shape: tuple[int, ...], name: str) -> Tensor:
    """``X`` extended with zeros to ``shape`` (its trailing two dims rounded up to tiles);
    the read index is clamped so that no lane ever loads outside ``X``."""
    real = static_shape(X)
    if real == shape:
        return te.compute(shape, lambda *i: X[i], name=name)
    zero = E.const(0, X.dtype)

    def fetch(*idx: E.PrimExpr) -> E.PrimExpr:
        inside = None
        safe = []
        for i, n, p in zip(idx, real, shape):
            if n == p:
                safe.append(i)
                continue
            cond = i < n
            inside = cond if inside is None else E.logical_and(inside, cond)
            safe.append(E.min_(i, n - 1))
        assert inside is not None  # some dim is padded: real != shape
        return te.select(inside, X[tuple(safe)], zero)

    return te.compute(shape, fetch, name=name)


def gemm_stages(AP: Tensor, BP: Tensor, acc_dtype: str, trans_b: bool) -> tuple[Tensor, Tensor]:
    """CF (the padded product, in ``acc_dtype``) and CS (its shared copy)."""
    *batch, Mp, Kp = static_shape(AP)
    Np = static_shape(BP)[-2 if trans_b else -1]
    k = te.reduce_axis((0, Kp), name="k")
    nb = len(batch)

    def prod(*idx: E.PrimExpr) -> E.PrimExpr:
        *b, i, j = idx
        bb = tuple(b) if len(BP.shape) == nb + 2 else ()
        bval = BP[(*bb, j, k)] if trans_b else BP[(*bb, k, j)]
        return te.sum(AP[(*b, i, k)].astype(acc_dtype) * bval.astype(acc_dtype), axis=k)

    CF = te.compute((*batch, Mp, Np), prod, name="CF")
    CS = te.compute((*batch, Mp, Np), lambda *i: CF[i], name="CS")
    return CF, CS


def tensorcore_gemm_stages(
    A: Tensor, B: Tensor, knobs: dict[str, Any], trans_b: bool, acc_dtype: str = "float32"
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(AP, BP, CF, CS)`` of ``A @ B``: the operands padded to whole ``bm``/``bn``/``ks``
    tiles of ``knobs``, their product and its shared copy. ``A`` is ``[..., M, K]``; ``B``
    is ``[K, N]`` (``[N, K]`` with ``trans_b``), with A's batch dims or none (shared)."""
    *batch, M, K = static_shape(A)
    N = static_shape(B)[-2 if trans_b else -1]
    Mp, Np, Kp = round_up(M, knobs["bm"]), round_up(N, knobs["bn"]), round_up(K, knobs["ks"])
    bb = tuple(batch) if B.ndim == A.ndim else ()
    AP = padded_operand(A, (*batch, Mp, Kp), "AP")
    BP = padded_operand(B, (*bb, Np, Kp) if trans_b else (*bb, Kp, Np), "BP")
    CF, CS = gemm_stages(AP, BP, acc_dtype, trans_b)
    return AP, BP, CF, CS


def gemm_output(
    CS: Tensor, shape: tuple[int, ...], epilogue: Epilogue, name: str, tag: str = "",
    attrs: dict[str, Any] | None = None,
) -> Tensor:  # fmt: skip
    """The unpadded ``shape`` output ``epilogue(CS[i], i)``: the stage a GEMM's tail (bias,
    activation, cast) is fused into; ``tag``/``attrs`` mark it for a strategy's schedule."""
    return te.compute(shape, lambda *i: epilogue(CS[i], i), name=name, tag=tag, attrs=attrs)
