"""The CPU's fused attention kernel: softmax(Q Kᵀ · scale + mask) V without the score matrix.

``fuse_attention`` (``frontend/passes/fuse_attention.py``) turns the exporters' MatMul →
scale → mask → Softmax → MatMul chain into one ``attention`` node; the CPU strategy runs
it here. The kernel is written as TIR (``te.extern`` over an :class:`IRBuilder` body)
because its online softmax carries state across key blocks — a running row maximum
``m``, a running sum ``l`` and an accumulator rescaled by ``exp(m_old - m_new)`` whenever
the maximum grows — which a tensor expression cannot say. Per task (batch, head and a
block of ``block_q`` query rows, the parallel loop) it walks the keys in blocks of
``block_k``: the key block is copied once, transposed, into a scratch ``kt[d, j]`` that
every query row of the task reuses; each row's ``block_k`` scores (vectorized over keys),
their maximum and exponentials live in a ``block_k`` scratch row, and ``P V`` adds into
the row's accumulator vectorized over the head dim. Scratch is ``O(block_q · D + D ·
block_k)`` per task, so memory grows with the sequence, never with its square.

A row whose scores are all ``-inf`` (fully masked) keeps ``m = -inf``; the rescaling then
uses 0 as its reference so no ``-inf - -inf`` appears, and the row ends as ``0 / 0``
(NaN), what the unfused softmax gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.tir import expr as E
from ember.tir import op as T
from ember.tir.buffer import Buffer
from ember.tir.ir_builder import IRBuilder
from ember.tir.te.extern import extern
from ember.tir.te.tensor import Tensor
from ember.tir.topi.attention import AttentionLayout, at, mask_at

VECTOR = 8  # float32 lanes the inner loops are split by (AVX2; AVX-512 takes two)


def _dims(t: Tensor) -> tuple[int, ...]:
    return tuple(int(E.const_value(d) or 0) if not isinstance(d, int) else d for d in t.shape)


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    scale: float,
    layout: AttentionLayout,
    block_q: int = 16,
    block_k: int = 64,
) -> Tensor:
    """``softmax(Q Kᵀ · scale + mask) V`` as one extern stage (see the module notes)."""
    B, H, Sq, D = layout.logical(_dims(q), layout.q)
    _, _, Sk, _ = layout.logical(_dims(k), layout.k)
    Dv = layout.logical(_dims(v), layout.v)[3]
    out_shape = layout.physical((B, H, Sq, Dv), layout.out)
    bk = min(block_k, -(-Sk // VECTOR) * VECTOR)  # a multiple of the vector, <= block_k
    bq = min(block_q, Sq)
    q_blocks = -(-Sq // bq)
    k_blocks = -(-Sk // bk)
    dtype = q.dtype
    ninf = E.const(float("-inf"), dtype)
    zero = E.const(0.0, dtype)

    def body(ins: list[Buffer], outs: list[Buffer]) -> Any:
        Q, K, V = ins[:3]
        M = ins[3] if mask is not None else None
        (O,) = outs
        ib = IRBuilder()
        with ib.for_range(0, B * H * q_blocks, name="task", kind="parallel") as task:
            b = task // (H * q_blocks)
            h = task // q_blocks % H
            i0 = task % q_blocks * bq
            acc = ib.allocate((bq, Dv), dtype, "local", "acc")
            m = ib.allocate((bq,), dtype, "local", "row_max")
            lsum = ib.allocate((bq,), dtype, "local", "row_sum")
            kt = ib.allocate((D, bk), dtype, "local", "kt")
            s = ib.allocate((bk,), dtype, "local", "scores")
            with ib.for_range(0, bq, name="r") as r:
                ib.store(m, r, ninf)
                ib.store(lsum, r, zero)
                with ib.for_range(0, Dv, name="e", kind="vectorized") as e:
                    ib.store(acc, (r, e), zero)
            with ib.for_range(0, k_blocks, name="kb") as kb:
                j0 = kb * bk
                _load_keys(ib, K, kt, layout.k, b, h, j0, Sk, D, bk)
                with ib.for_range(0, bq, name="r") as r:
                    i = i0 + r
                    with ib.if_then_else(i < Sq):
                        _scores(ib, Q, kt, s, layout.q, b, h, i, D, bk, scale)
                        if M is not None:
                            with ib.for_range(0, bk, name="j", kind="vectorized") as j:
                                jj = E.min_(j0 + j, Sk - 1)  # lanes past the keys: masked below
                                ib.store(s, j, s[j] + mask_at(M, b, h, i, jj))
                        _online_softmax(ib, V, s, acc, m, lsum, layout.v, b, h, r, j0, Sk, Dv, bk)
            with ib.for_range(0, bq, name="r") as r:
                i = i0 + r
                with ib.if_then_else(i < Sq):
                    inv = E.const(1.0, dtype) / lsum[r]
                    with ib.for_range(0, Dv, name="e", kind="vectorized") as e:
                        ib.store(O, layout.physical((b, h, i, e), layout.out), acc[r, e] * inv)
        return ib.get()

    inputs = [q, k, v] if mask is None else [q, k, v, mask]
    return extern(out_shape, inputs, body, name="attention", tag="attention")


def _load_keys(
    ib: IRBuilder, K: Buffer, kt: Buffer, axes: Sequence[int], b: Any, h: Any, j0: Any,
    Sk: int, D: int, bk: int,
) -> None:  # fmt: skip
    """``kt[d, j] = K[j0 + j, d]``, zero past the last key (those lanes get -inf scores)."""
    with ib.for_range(0, bk, name="j") as j:
        with ib.if_then_else(j0 + j < Sk):
            with ib.for_range(0, D, name="d") as d:
                ib.store(kt, (d, j), at(K, axes, b, h, j0 + j, d))
        with ib.else_():
            with ib.for_range(0, D, name="d") as d:
                ib.store(kt, (d, j), E.const(0.0, kt.dtype))


def _scores(
    ib: IRBuilder, Q: Buffer, kt: Buffer, s: Buffer, axes: Sequence[int], b: Any, h: Any,
    i: Any, D: int, bk: int, scale: float,
) -> None:  # fmt: skip
    """``s[j] = scale * sum_d Q[i, d] kt[d, j]``, vectorized over the keys."""
    zero = E.const(0.0, s.dtype)
    with ib.for_range(0, bk, name="j", kind="vectorized") as j:
        ib.store(s, j, zero)
    with ib.for_range(0, D, name="d") as d:
        qd = at(Q, axes, b, h, i, d)
        with ib.for_range(0, bk, name="j", kind="vectorized") as j:
            ib.store(s, j, s[j] + qd * kt[d, j])
    c = E.const(scale, s.dtype)
    with ib.for_range(0, bk, name="j", kind="vectorized") as j:
        ib.store(s, j, s[j] * c)


def _online_softmax(
    ib: IRBuilder, V: Buffer, s: Buffer, acc: Buffer, m: Buffer, lsum: Buffer,
    axes: Sequence[int], b: Any, h: Any, r: Any, j0: Any, Sk: int, Dv: int, bk: int,
) -> None:  # fmt: skip
    """Fold one key block's scores ``s`` into row ``r``'s running max, sum and accumulator."""
    dtype = s.dtype
    ninf = E.const(float("-inf"), dtype)
    zero = E.const(0.0, dtype)
    with ib.for_range(0, bk, name="j", kind="vectorized") as j:
        ib.store(s, j, E.select(j0 + j < Sk, s[j], ninf))
    mx = ib.allocate((1,), dtype, "local", "block_max")
    ib.store(mx, 0, m[r])
    with ib.for_range(0, bk, name="j") as j:
        ib.store(mx, 0, E.max_(mx[0], s[j]))
    # the reference each exponent subtracts: the new max, or 0 while the row is all -inf
    ref = ib.let("ref", E.select(mx[0] == ninf, zero, mx[0]))
    alpha = ib.let("alpha", T.exp(m[r] - ref))
    with ib.for_range(0, bk, name="j", kind="vectorized") as j:
        ib.store(s, j, T.exp(s[j] - ref))
    total = ib.allocate((1,), dtype, "local", "block_sum")
    ib.store(total, 0, zero)
    with ib.for_range(0, bk, name="j") as j:
        ib.store(total, 0, total[0] + s[j])
    ib.store(lsum, r, lsum[r] * alpha + total[0])
    ib.store(m, r, mx[0])
    with ib.for_range(0, Dv, name="e", kind="vectorized") as e:
        ib.store(acc, (r, e), acc[r, e] * alpha)
    with ib.for_range(0, bk, name="j") as j:
        with ib.if_then_else(j0 + j < Sk):
            p = s[j]
            with ib.for_range(0, Dv, name="e", kind="vectorized") as e:
                ib.store(acc, (r, e), acc[r, e] + p * at(V, axes, b, h, j0 + j, e))
