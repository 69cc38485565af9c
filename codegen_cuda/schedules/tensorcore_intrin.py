"""Tensor intrinsics for the tensor-core templates: a warp's GEMM step and its accumulator.

The templates tensorize three warp-level loop nests with what this module declares
(``te.decl_tensor_intrin``): the ``WM x WN`` accumulator tile of one warp over one
``KS`` step of K (``ldmatrix`` from shared memory into fragments, then ``mma.sync``
m16n8k16 per 16 x 8 sub-tile), its reset to zero, and its copy to a shared tile
(each lane stores the elements the PTX ISA gives it, :func:`lane_coords`). The
accumulator stage lives in the ``warp`` scope: ``WM * WN`` elements held by the warp
together, ``WM * WN / 32`` per lane. Every access of it here is per lane (a register
index below ``WM * WN / 32``), which ``lower_warp_memory`` relies on when it turns the
warp buffer into a per-thread ``local`` array of that size.

The shared operands may sit anywhere in their tiles with any row stride (padded
rows), so their buffers take symbolic strides and offsets. A tile stored with the XOR
layout (``codegen_cuda/transform/swizzle_shared.py``) needs nothing here: that pass
permutes the ``ldmatrix`` addresses as it permutes the tile's writes.
"""

from __future__ import annotations

from typing import Any

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir import tensor_core as tc
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.ir_builder import IRBuilder
from ember.tir.te import operation as te
from ember.tir.te.tensor_intrin import TensorIntrin, decl_tensor_intrin

MMA_M, MMA_N, MMA_K = 16, 8, 16


def _operand(name: str, shape: tuple[int, int], dtype: str, scope: str) -> Buffer:
    return decl_buffer(
        shape,
        dtype,
        name=name,
        scope=scope,
        strides=(E.Var(f"{name}_s0", "int32"), 1),
        elem_offset=E.Var(f"{name}_elem_offset", "int32"),
    )


def _lane_loop(ib: IRBuilder):  # noqa: ANN202
    return ib.for_range(0, 32, name="lane", kind="thread_binding", thread_tag="threadIdx.x")


def _acc_view(acc: Buffer, wm: int, wn: int) -> Buffer:
    """The lane's registers of the warp accumulator, for ``ptx_mma``'s pointer argument."""
    return decl_buffer((wm * wn // 32,), acc.dtype, name="acc_regs", scope="local", data=acc.data)


def _reg(acc: Buffer, wn: int, index: Any) -> tuple[Any, Any]:
    """2-D indices of ``acc`` whose flat index is the per-lane register ``index``."""
    return index // wn, index % wn


def _warp_step(
    wm: int, wn: int, ks: int, in_dtype: str, acc_dtype: str, trans_b: bool
) -> tuple[Any, Any, Any]:
    """The computation both warp-step intrinsics declare: ``C[WM, WN] = A @ B`` summed in
    ``acc_dtype`` (``B`` is ``[KS, WN]``, or ``[WN, KS]`` with ``trans_b``)."""
    A = te.placeholder((wm, ks), in_dtype, name="A")
    B = te.placeholder((wn, ks) if trans_b else (ks, wn), in_dtype, name="B")
    k = te.reduce_axis((0, ks), name="k")

    def body(i: E.PrimExpr, j: E.PrimExpr) -> E.PrimExpr:
        b = B[j, k] if trans_b else B[k, j]
        return te.sum(A[i, k].astype(acc_dtype) * b.astype(acc_dtype), axis=k)

    return A, B, te.compute((wm, wn), body, name="C")


def mma_step_intrin(
    wm: int, wn: int, ks: int, in_dtype: str, acc_dtype: str, trans_b: bool = False
) -> TensorIntrin:
    """``C[WM, WN] += A[WM, KS] @ B`` for one warp (``B`` is ``[KS, WN]``, or ``[WN, KS]``
    with ``trans_b``); ``reset`` zeroes ``C``."""
    A, B, C = _warp_step(wm, wn, ks, in_dtype, acc_dtype, trans_b)
    binds = {
        A: _operand("A", A.shape, in_dtype, "shared"),
        B: _operand("B", B.shape, in_dtype, "shared"),
        C: decl_buffer(
            (wm, wn), acc_dtype, name="C", scope="warp", elem_offset=E.Var("C_elem_offset", "int32")
        ),  # fmt: skip
    }

    def fcompute(ins: list[Buffer], outs: list[Buffer]) -> tuple[Any, Any, Any]:
        a, b = ins
        (c,) = outs
        args = (a, b, c, wm, wn, ks, in_dtype, acc_dtype, trans_b)
        body = S.seq(fill_body(c, wm, wn, 0.0), _update(*args))
        return body, fill_body(c, wm, wn, 0.0), _update(*args)

    name = f"mma_{wm}x{wn}x{ks}_{in_dtype}_{acc_dtype}{'_tb' if trans_b else ''}"
    return decl_tensor_intrin(C.op, fcompute, name=name, binds=binds)


def _shared_at(buf: Buffer, row: Any, col: Any) -> Any:
    """Element offset (from the buffer's data) of (row, col) of a shared operand: row-major
    as the schedule laid it out (a swizzled tile is permuted later, by its pass)."""
    return buf.elem_offset + row * buf.strides[0] + col


def _update(a, b, c, wm, wn, ks, in_dtype, acc_dtype, trans_b):  # noqa: ANN001, ANN202
    mt, nt = wm // MMA_M, wn // MMA_N
    ib = IRBuilder()
    with _lane_loop(ib) as lane:
        fa = ib.allocate((8 * mt,), in_dtype, scope="local", name="a_frag")
        fb = ib.allocate((4 * nt,), in_dtype, scope="local", name="b_frag")
        regs = _acc_view(c, wm, wn)
        for kk in range(ks // MMA_K):
            for mi in range(mt):  # x4: rows 0-15 at k 0-7 (lanes 0-15), at k 8-15 (16-31)
                row, col = mi * 16 + lane % 16, kk * 16 + lane // 16 * 8
                src = _shared_at(a, row, col)
                ib.evaluate(tc.ptx_ldmatrix(False, 4, fa, mi * 8, a, src))
            for nj in range(nt // 2):  # x4: two n8 tiles by the two k halves
                if trans_b:
                    row = nj * 16 + lane // 16 * 8 + lane % 8
                    col = kk * 16 + lane // 8 % 2 * 8
                    src = _shared_at(b, row, col)
                    ib.evaluate(tc.ptx_ldmatrix(False, 4, fb, nj * 8, b, src))
                else:
                    row, col = kk * 16 + lane % 16, nj * 16 + lane // 16 * 8
                    src = _shared_at(b, row, col)
                    ib.evaluate(tc.ptx_ldmatrix(True, 4, fb, nj * 8, b, src))
            for mi in range(mt):
                for nj in range(nt):
                    at = (mi * nt + nj) * 4
                    ib.evaluate(
                        tc.ptx_mma("m16n8k16", in_dtype, acc_dtype, fa, mi * 8, fb, nj * 4,
                                   regs, at)
                    )  # fmt: skip
    return ib.get()


def fill_body(c: Buffer, wm: int, wn: int, value: float) -> Any:
    """Every register of the lane's share of the warp accumulator set to ``value``."""
    ib = IRBuilder()
    with _lane_loop(ib):
        for r in range(wm * wn // 32):
            ib.emit(_store(c, _reg(c, wn, r), E.const(value, c.dtype)))
    return ib.get()


def _store(buf: Buffer, idx: tuple, value: E.PrimExpr) -> Any:
    return S.BufferStore(buf, value, tuple(E.convert(i) if isinstance(i, int) else i for i in idx))


def store_intrin(wm: int, wn: int, acc_dtype: str) -> TensorIntrin:
    """``S[WM, WN] = C[WM, WN]``: the warp accumulator copied to a shared tile, each lane
    writing its own elements at the (row, col) of the mma accumulator layout."""
    C = te.placeholder((wm, wn), acc_dtype, name="C")
    Sh = te.compute((wm, wn), lambda i, j: C[i, j], name="S")
    spec = tc.mma_spec("m16n8k16", "float16", acc_dtype)
    binds = {
        C: decl_buffer(
            (wm, wn), acc_dtype, name="C", scope="warp", elem_offset=E.Var("C_elem_offset", "int32")
        ),  # fmt: skip
        Sh: _operand("S", (wm, wn), acc_dtype, "shared"),
    }
    nt = wn // MMA_N

    def fcompute(ins: list[Buffer], outs: list[Buffer]) -> Any:
        (c,), (sh,) = ins, outs
        ib = IRBuilder()
        with _lane_loop(ib) as lane:
            for r in range(wm * wn // 32):
                tile, reg = r // 4, r % 4
                row, col = tc.lane_coords(spec, "c", lane, reg)
                row, col = row + tile // nt * MMA_M, col + tile % nt * MMA_N
                ib.emit(_store(sh, (row, col), c[_reg(c, wn, r)]))
        return ib.get()

    return decl_tensor_intrin(Sh.op, fcompute, name=f"mma_store_{wm}x{wn}", binds=binds)


# -- the wmma route: the same two intrinsics on opaque 16 x 16 fragments --------------------------
WMMA = 16


def _acc_decl(wm: int, wn: int, acc_dtype: str, scope: str) -> Buffer:
    offset = E.Var("C_elem_offset", "int32")
    return decl_buffer((wm, wn), acc_dtype, name="C", scope=scope, elem_offset=offset)


def wmma_step_intrin(
    wm: int, wn: int, ks: int, in_dtype: str, acc_dtype: str, trans_b: bool = False
) -> TensorIntrin:
    """:func:`mma_step_intrin`'s computation with ``wmma::load_matrix_sync`` / ``mma_sync``
    (m16n16k16) on a ``wmma.accumulator`` tile of ``(WM / 16) * (WN / 16)`` fragments."""
    A, B, C = _warp_step(wm, wn, ks, in_dtype, acc_dtype, trans_b)
    binds = {
        A: _operand("A", A.shape, in_dtype, "shared"),
        B: _operand("B", B.shape, in_dtype, "shared"),
        C: _acc_decl(wm, wn, acc_dtype, "wmma.accumulator"),
    }
    mt, nt = wm // WMMA, wn // WMMA

    def fill(c: Buffer) -> Any:
        ib = IRBuilder()
        for f in range(mt * nt):
            ib.evaluate(tc.tvm_fill_fragment(c, f, 0.0))
        return ib.get()

    def fcompute(ins: list[Buffer], outs: list[Buffer]) -> tuple[Any, Any, Any]:
        (a, b), (c,) = ins, outs
        args = (a, b, c, mt, nt, ks, in_dtype, trans_b)
        return S.seq(fill(c), _wmma_update(*args)), fill(c), _wmma_update(*args)

    name = f"wmma_{wm}x{wn}x{ks}_{in_dtype}_{acc_dtype}{'_tb' if trans_b else ''}"
    return decl_tensor_intrin(C.op, fcompute, name=name, binds=binds)


def _wmma_update(a, b, c, mt, nt, ks, in_dtype, trans_b):  # noqa: ANN001, ANN202
    ib = IRBuilder()
    fa = ib.allocate((256 * mt,), in_dtype, scope="wmma.matrix_a", name="a_frag")
    fb = ib.allocate((256 * nt,), in_dtype, scope="wmma.matrix_b", name="b_frag")
    sa, sb = a.strides[0], b.strides[0]
    for kk in range(ks // WMMA):
        for mi in range(mt):
            at = a.elem_offset + mi * WMMA * sa + kk * WMMA
            ib.evaluate(tc.tvm_load_matrix_sync(fa, mi, a, at, sa, "row_major"))
        for nj in range(nt):
            if trans_b:  # B^T rows are n: B is its column-major view
                at, layout = b.elem_offset + nj * WMMA * sb + kk * WMMA, "col_major"
            else:
                at, layout = b.elem_offset + kk * WMMA * sb + nj * WMMA, "row_major"
            ib.evaluate(tc.tvm_load_matrix_sync(fb, nj, b, at, sb, layout))
        for mi in range(mt):
            for nj in range(nt):
                f = mi * nt + nj
                ib.evaluate(tc.tvm_mma_sync(c, f, fa, mi, fb, nj, c, f))
    return ib.get()


def wmma_store_intrin(wm: int, wn: int, acc_dtype: str) -> TensorIntrin:
    """``S[WM, WN] = C[WM, WN]`` by ``wmma::store_matrix_sync``, fragment by fragment."""
    C = te.placeholder((wm, wn), acc_dtype, name="C")
    Sh = te.compute((wm, wn), lambda i, j: C[i, j], name="S")
    binds = {
        C: _acc_decl(wm, wn, acc_dtype, "wmma.accumulator"),
        Sh: _operand("S", (wm, wn), acc_dtype, "shared"),
    }
    nt = wn // WMMA

    def fcompute(ins: list[Buffer], outs: list[Buffer]) -> Any:
        (c,), (sh,) = ins, outs
        ib = IRBuilder()
        ss = sh.strides[0]
        for f in range(wm // WMMA * nt):
            at = sh.elem_offset + f // nt * WMMA * ss + f % nt * WMMA
            ib.evaluate(tc.tvm_store_matrix_sync(c, f, sh, at, ss, "row_major"))
        return ib.get()

    return decl_tensor_intrin(Sh.op, fcompute, name=f"wmma_store_{wm}x{wn}", binds=binds)


__all__ = [
    "fill_body",
    "mma_step_intrin",
    "store_intrin",
    "wmma_step_intrin",
    "wmma_store_intrin",
]
