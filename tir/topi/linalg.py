"""Matrix products for the graph: numpy's ``matmul`` with batch broadcasting, and ONNX Gemm.

``nn.matmul``/``nn.dense`` are the fixed 2-D forms the tuned templates use; these take
any rank, broadcast the batch dims as numpy does, and promote 1-D operands.

float16 and bfloat16 products accumulate in float32 and are rounded once at the end (Gemm's
``alpha``, ``beta`` and ``C`` applied before that rounding), as onnxruntime does: summed in
float16, a 1000-term dot product of values near 1 is off by a dozen units in the last place.
"""

from __future__ import annotations

from typing import Any

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.reduce import acc_dtype, widen
from ember.tir.topi.transform import static_shape


def _bcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(pa, pb)):
        raise ArgumentError(f"matmul: batch dims {list(a)} and {list(b)} do not broadcast")
    return tuple(max(x, y) for x, y in zip(pa, pb))


def matmul_nd(A: Tensor, B: Tensor, name: str = "matmul") -> Tensor:
    """numpy's ``A @ B``: 1-D operands promoted and their unit axis dropped again."""
    sa, sb = static_shape(A), static_shape(B)
    if not sa or not sb:
        raise ArgumentError("matmul: operands must have at least one dimension")
    a2 = (1, *sa) if len(sa) == 1 else sa
    b2 = (*sb, 1) if len(sb) == 1 else sb
    K = a2[-1]
    if b2[-2] != K:
        raise ArgumentError(
            f"matmul: shapes {list(sa)} and {list(sb)} do not align ({K} vs {b2[-2]})"
        )
    batch = _bcast(a2[:-2], b2[:-2])
    M, N = a2[-2], b2[-1]
    out_shape = (*batch, *([M] if len(sa) > 1 else []), *([N] if len(sb) > 1 else []))
    k = te.reduce_axis((0, K), name="k")
    nb = len(batch)
    acc = acc_dtype(A.dtype)

    def pick(t_shape: tuple[int, ...], bidx: tuple[E.PrimExpr, ...]) -> list[E.PrimExpr]:
        own = t_shape[:-2]
        off = nb - len(own)
        return [E.const(0, "int32") if d == 1 else bidx[off + j] for j, d in enumerate(own)]

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        bidx, rest = i[:nb], list(i[nb:])
        row = rest.pop(0) if len(sa) > 1 else None
        col = rest.pop(0) if len(sb) > 1 else None
        ia = [*pick(a2, bidx), row, k] if row is not None else [k]
        ib = [*pick(b2, bidx), k, col] if col is not None else [k]
        return te.sum(widen(A[tuple(ia)], acc) * widen(B[tuple(ib)], acc), axis=k)

    if acc == A.dtype:
        return te.compute(out_shape, f, name=name, tag="matmul")
    total = te.compute(out_shape, f, name=f"{name}_acc", tag="matmul")
    return te.compute(out_shape, lambda *i: E.cast(A.dtype, total[i]), name=name, tag="matmul")


def gemm(
    A: Tensor,
    B: Tensor,
    C: Tensor | None,
    alpha: float = 1.0,
    beta: float = 1.0,
    trans_a: bool = False,
    trans_b: bool = False,
    name: str = "gemm",
) -> Tensor:
    """ONNX Gemm: ``alpha * op(A) @ op(B) + beta * C`` with ``C`` broadcast to (M, N)."""
    sa, sb = static_shape(A), static_shape(B)
    if len(sa) != 2 or len(sb) != 2:
        raise ArgumentError(f"gemm: A and B must be 2-D, got {list(sa)} and {list(sb)}")
    M, K = (sa[1], sa[0]) if trans_a else sa
    K2, N = (sb[1], sb[0]) if trans_b else sb
    if K != K2:
        raise ArgumentError(f"gemm: inner dimensions differ ({K} vs {K2})")
    k = te.reduce_axis((0, K), name="k")
    dtype, acc = A.dtype, acc_dtype(A.dtype)

    def a_at(i: E.PrimExpr) -> E.PrimExpr:
        return widen(A[k, i] if trans_a else A[i, k], acc)

    def b_at(j: E.PrimExpr) -> E.PrimExpr:
        return widen(B[j, k] if trans_b else B[k, j], acc)

    prod = te.compute(
        (M, N), lambda i, j: te.sum(a_at(i) * b_at(j), axis=k), name=f"{name}_mm", tag="matmul"
    )
    if C is None:
        if alpha == 1.0 and acc == dtype:
            return prod

        def scaled(i: E.PrimExpr, j: E.PrimExpr) -> E.PrimExpr:
            p = prod[i, j] if alpha == 1.0 else prod[i, j] * alpha
            return p if acc == dtype else E.cast(dtype, p)

        return te.compute((M, N), scaled, name=name, tag="broadcast")
    sc = static_shape(C)
    if len(sc) > 2 or _bcast(sc, (M, N)) != (M, N):
        raise ArgumentError(f"gemm: C of shape {list(sc)} does not broadcast to {[M, N]}")
    cs = (1,) * (2 - len(sc)) + sc

    def c_at(i: E.PrimExpr, j: E.PrimExpr) -> E.PrimExpr:
        idx = [E.const(0, "int32") if d == 1 else v for d, v in zip(cs, (i, j))]
        return widen(C[tuple(idx[2 - len(sc) :])] if sc else C[()], acc)

    def out(i: E.PrimExpr, j: E.PrimExpr) -> E.PrimExpr:
        p = prod[i, j] if alpha == 1.0 else prod[i, j] * alpha
        c = c_at(i, j) if beta == 1.0 else c_at(i, j) * beta
        return p + c if acc == dtype else E.cast(dtype, p + c)

    return te.compute((M, N), out, name=name, tag="broadcast")


def dense_packed(
    A: Tensor,
    packed: Tensor,
    n: int,
    name: str = "dense_packed",
    whole_panels: bool = False,
    attrs: dict[str, Any] | None = None,
) -> Tensor:
    """``A @ W`` with ``W`` (K x n) stored as panels ``packed[p, k, z] = W[k, p*nr + z]``
    (zero past ``n``), the layout the CPU GEMM micro-kernel reads with unit stride.
    Leading axes of ``A`` are batch axes.

    With ``whole_panels`` the product stage (tagged ``dense_packed``) spans every panel
    column, the padding too (its weights are zero), and an injective stage keeps the first
    ``n``: the micro-kernel's column loops then divide evenly, where over ``n`` columns
    they would test each lane against ``n`` and stay scalar (an LSTM's 4H = 28 gate
    columns in a 32-lane panel ran 30x slower so). ``attrs`` (a schedule's tiles) join
    the product stage's ``nr`` and ``n``."""
    sa, sp = static_shape(A), static_shape(packed)
    if len(sa) < 2 or len(sp) != 3 or sa[-1] != sp[1] or sp[0] * sp[2] < n:
        raise ArgumentError(f"dense_packed: A {list(sa)} and panels {list(sp)} do not fit")
    nr = sp[2]
    k = te.reduce_axis((0, sa[-1]), name="k")

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        *lead, row, col = i
        return te.sum(A[(*lead, row, k)] * packed[col // nr, k, col % nr], axis=k)

    width = sp[0] * nr if whole_panels else n
    stage_attrs = {**(attrs or {}), "nr": nr, "n": n}
    out = te.compute((*sa[:-1], width), f, name=name, tag="dense_packed", attrs=stage_attrs)
    if width == n:
        return out
    return te.compute((*sa[:-1], n), lambda *i: out[i], name=f"{name}_cols")
