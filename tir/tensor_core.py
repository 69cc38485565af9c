"""Tensor-core intrinsics of TIR: ``mma.sync``, ``ldmatrix`` and the ``wmma`` fragment API.

These are what a tensorized CUDA kernel calls (a ``decl_tensor_intrin`` body made with
the IR builder emits them with ``ib.evaluate``); the CUDA printer turns them into inline
PTX or ``nvcuda::wmma`` calls and the SIMT emulator runs them with the PTX ISA's
per-lane fragment layouts. Each builder checks its operands and gives an
``Evaluate``-able ``Call`` (dtype ``handle``) with TVM's name and argument order,
where a TVM pointer argument is here a buffer's ``data`` variable plus an element
offset (Ember has no ``tvm_access_ptr``):

- ``ptx_mma(shape, "row", "col", a_dtype, b_dtype, c_dtype, A, a_off, B, b_off, C, c_off)``:
  ``C += A @ B`` for one warp, in place; A, B, C are per-thread ``local`` arrays holding
  each lane's fragment registers (:func:`mma_layout` says which element each holds).
- ``ptx_ldmatrix(trans, num, ".b16", L, l_off, S, s_off)``: lanes ``0 .. 8*num-1`` each
  give the shared address of one 8-element row; lane ``l`` receives, per matrix ``i``,
  two elements at ``L[l_off + 2i]``, ``L[l_off + 2i + 1]`` (:func:`ldmatrix_layout`).
- ``tvm_fill_fragment(F, m, n, k, index, value)``, ``tvm_load_matrix_sync(F, m, n, k,
  index, S, s_off, stride, layout)``, ``tvm_mma_sync(D, di, A, ai, B, bi, C, ci)``,
  ``tvm_store_matrix_sync(F, m, n, k, index, S, s_off, stride, layout)``: the wmma API on
  fragments allocated in the scopes ``wmma.matrix_a``/``wmma.matrix_b``/``wmma.accumulator``
  (``16 * 16`` elements per fragment; ``index`` picks one); their lane layout is opaque.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.buffer import Buffer

I = E.Intrinsic  # noqa: E741
WMMA_SCOPES = ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator")
WMMA_SHAPE = (16, 16, 16)
WMMA_ELEMS = 256  # elements of one 16 x 16 fragment


@dataclass(frozen=True)
class MmaSpec:
    """One ``mma.sync`` shape and type: its sizes and each lane's register elements."""

    shape: str
    m: int
    n: int
    k: int
    in_dtype: str  # A and B
    acc_dtype: str  # C and D

    @property
    def a_elems(self) -> int:
        return self.m * self.k // 32

    @property
    def b_elems(self) -> int:
        return self.k * self.n // 32

    @property
    def c_elems(self) -> int:
        return self.m * self.n // 32

    @property
    def ptx(self) -> str:
        """The instruction, e.g. ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``."""
        a, c = PTX_TYPES[self.in_dtype], PTX_TYPES[self.acc_dtype]
        return f"mma.sync.aligned.{self.shape}.row.col.{c}.{a}.{a}.{c}"


PTX_TYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "tf32": "tf32"}
# (shape, input dtype) -> accumulator dtypes; tf32 inputs live in float32 arrays
MMA_TYPES: dict[tuple[str, str], tuple[str, ...]] = {
    ("m16n8k16", "float16"): ("float32", "float16"),
    ("m16n8k16", "bfloat16"): ("float32",),
    ("m16n8k8", "tf32"): ("float32",),
}
MMA_SIZES = {"m16n8k16": (16, 8, 16), "m16n8k8": (16, 8, 8)}


def mma_spec(shape: str, in_dtype: str, acc_dtype: str) -> MmaSpec:
    """The spec of a supported shape and types; an ArgumentError names the supported ones."""
    accs = MMA_TYPES.get((shape, in_dtype))
    if accs is None or acc_dtype not in accs:
        known = ", ".join(f"{s} {i}->{'/'.join(a)}" for (s, i), a in MMA_TYPES.items())
        raise ArgumentError(
            f"ptx_mma: no {shape} with {in_dtype} inputs and {acc_dtype} accumulation; "
            f"supported: {known}"
        )
    return MmaSpec(shape, *MMA_SIZES[shape], in_dtype, acc_dtype)


def storage_dtype(dtype: str) -> str:
    """The element type of the arrays holding ``dtype`` fragments (tf32 lives in float32)."""
    return "float32" if dtype == "tf32" else dtype


# -- per-lane layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k8") ---------------
def mma_layout(spec: MmaSpec, operand: str) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of each lane's fragment elements: two ``(32, elems)`` int arrays.

    ``operand`` is ``"a"`` (m x k), ``"b"`` (k x n) or ``"c"`` (m x n, also D). With
    ``g = lane // 4`` and ``t = lane % 4``, the PTX ISA gives for m16n8k16 (16-bit
    inputs, two per 32-bit register) A: (g, 2t+j), (g+8, 2t+j), (g, 2t+8+j), (g+8, 2t+8+j);
    B: (2t+j, g), (2t+8+j, g); for m16n8k8 tf32 A: (g, t), (g+8, t), (g, t+4), (g+8, t+4),
    B: (t, g), (t+4, g); C in both: (g, 2t+j), (g+8, 2t+j).
    """
    lane = np.arange(32)[:, None]
    g, t = lane // 4, lane % 4
    j = np.array([0, 1])
    if operand == "c":
        rows = np.concatenate([g + 0 * j, g + 8 + 0 * j], axis=1)
        return rows, np.concatenate([2 * t + j, 2 * t + j], axis=1)
    wide = spec.in_dtype != "tf32"  # two 16-bit elements per register
    if operand == "a":
        if wide:
            rows = np.concatenate([g + 0 * j, g + 8 + 0 * j] * 2, axis=1)
            cols = np.concatenate([2 * t + j, 2 * t + j, 2 * t + 8 + j, 2 * t + 8 + j], axis=1)
            return rows, cols
        return np.concatenate([g, g + 8, g, g + 8], axis=1), np.concatenate([t, t, t + 4, t + 4], 1)
    if operand == "b":
        if wide:
            return np.concatenate([2 * t + j, 2 * t + 8 + j], axis=1), np.broadcast_to(g, (32, 4))
        return np.concatenate([t, t + 4], axis=1), np.concatenate([g, g], axis=1)
    raise ArgumentError(f"mma_layout: operand must be 'a', 'b' or 'c', not {operand!r}")


def lane_coords(spec: MmaSpec, operand: str, lane: Any, reg: int) -> tuple[Any, Any]:
    """(row, col) of element ``reg`` of ``operand``'s fragment in ``lane`` (a PrimExpr, such
    as ``threadIdx.x % 32``, or an int): what a kernel indexes memory with to fill
    fragments or store the accumulator (TVM's ``mma_store``), as :func:`mma_layout`."""
    g, t = lane // 4, lane % 4
    pair, j = reg // 2, reg % 2
    if operand == "c":
        return g + 8 * pair, 2 * t + j
    if spec.in_dtype == "tf32":
        if operand == "a":
            return g + 8 * (reg % 2), t + 4 * (reg // 2)
        return t + 4 * reg, g
    if operand == "a":
        return g + 8 * (pair % 2), 2 * t + j + 8 * (pair // 2)
    return 2 * t + j + 8 * pair, g


def ldmatrix_layout(trans: bool) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) within an 8 x 8 matrix of the two elements lane ``l`` receives: ``(32, 2)``.

    Rows are the 16-byte rows whose addresses lanes ``8i .. 8i+7`` give for matrix ``i``.
    Lane ``l`` gets (l // 4, 2(l % 4) + j); with ``.trans`` (2(l % 4) + j, l // 4).
    """
    lane = np.arange(32)[:, None]
    a, b = lane // 4 + 0 * np.array([0, 1]), 2 * (lane % 4) + np.array([0, 1])
    return (b, a) if trans else (a, b)


# -- builders ----------------------------------------------------------------------------------
def _data(buf: Buffer, what: str, scopes: tuple[str, ...], dtypes: tuple[str, ...]) -> E.Var:
    if not isinstance(buf, Buffer):
        raise ArgumentError(f"{what} must be a Buffer, got {type(buf).__name__}")
    if buf.scope not in scopes:
        raise ArgumentError(
            f"{what} '{buf.name}' is in scope '{buf.scope}'; expected {' or '.join(scopes)}"
        )
    if buf.dtype not in dtypes:
        raise ArgumentError(f"{what} '{buf.name}' has dtype {buf.dtype}; expected {dtypes}")
    return buf.data


def _offset(x: E.ExprLike, what: str, multiple: int = 1) -> E.PrimExpr:
    e = E.convert(x, "int32") if isinstance(x, int) else E.convert(x)
    if not e.dtype.startswith("int"):
        raise ArgumentError(f"{what} must be an integer expression, got {e.dtype}")
    if isinstance(e, E.IntImm) and e.value % multiple:
        raise ArgumentError(f"{what} {e.value} must be a multiple of {multiple} (alignment)")
    return e


def _call(op: E.Intrinsic, *args: E.ExprLike) -> E.Call:
    return E.Call(
        "handle", op, tuple(a if isinstance(a, E.PrimExpr) else E.convert(a) for a in args)
    )


def ptx_mma(
    shape: str,
    in_dtype: str,
    acc_dtype: str,
    a: Buffer,
    a_offset: E.ExprLike,
    b: Buffer,
    b_offset: E.ExprLike,
    c: Buffer,
    c_offset: E.ExprLike,
) -> E.Call:
    """``C[c_offset:] += A @ B`` on one warp's fragments (``mma.sync.aligned``, row.col)."""
    spec = mma_spec(shape, in_dtype, acc_dtype)
    store_in = (storage_dtype(in_dtype),)
    s = E.StringImm
    return _call(
        I.PTX_MMA,
        s(shape),
        s("row"),
        s("col"),
        s(in_dtype),
        s(in_dtype),
        s(acc_dtype),
        _data(a, "ptx_mma: A", ("local",), store_in),
        _offset(a_offset, "ptx_mma: the A offset", 2),
        _data(b, "ptx_mma: B", ("local",), store_in),
        _offset(b_offset, "ptx_mma: the B offset", 2),
        _data(c, "ptx_mma: C", ("local",), (acc_dtype,)),
        _offset(c_offset, "ptx_mma: the C offset", 2 if spec.acc_dtype == "float16" else 1),
    )


def ptx_ldmatrix(
    trans: bool, num: int, dst: Buffer, dst_offset: E.ExprLike, src: Buffer, src_offset: E.ExprLike
) -> E.Call:
    """``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16`` into ``dst[dst_offset:]``.

    ``src_offset`` is per lane: the element offset of the 8-element row this lane
    addresses (lanes beyond ``8 * num`` give none); it must be 16-byte aligned.
    """
    if num not in (1, 2, 4):
        raise ArgumentError(f"ptx_ldmatrix: num must be 1, 2 or 4 matrices, not {num!r}")
    halves = ("float16", "bfloat16")
    return _call(
        I.PTX_LDMATRIX,
        E.const(bool(trans), "bool"),
        E.const(num, "int32"),
        E.StringImm(".b16"),
        _data(dst, "ptx_ldmatrix: the destination", ("local",), halves),
        _offset(dst_offset, "ptx_ldmatrix: the destination offset", 2),
        _data(src, "ptx_ldmatrix: the source", ("shared",), halves),
        _offset(src_offset, "ptx_ldmatrix: the source offset", 8),
    )


def _wmma_frag(buf: Buffer, what: str, scope: str | None = None) -> E.Var:
    scopes = (scope,) if scope else WMMA_SCOPES
    return _data(buf, what, scopes, ("float16", "bfloat16", "float32"))


def _mnk(m: int, n: int, k: int, what: str) -> tuple[E.PrimExpr, ...]:
    if (m, n, k) != WMMA_SHAPE:
        raise ArgumentError(f"{what}: only the m16n16k16 wmma shape is supported, not {m, n, k}")
    return tuple(E.const(x, "int32") for x in (m, n, k))


def _layout(layout: str, what: str) -> E.StringImm:
    if layout not in ("row_major", "col_major"):
        raise ArgumentError(f"{what}: layout must be 'row_major' or 'col_major', not {layout!r}")
    return E.StringImm(layout)


def tvm_fill_fragment(frag: Buffer, index: E.ExprLike, value: E.ExprLike) -> E.Call:
    """Every element of accumulator fragment ``index`` of ``frag`` set to ``value``."""
    data = _wmma_frag(frag, "tvm_fill_fragment: the fragment", "wmma.accumulator")
    v = E.convert(value, frag.dtype) if isinstance(value, (int, float)) else value
    if v.dtype != frag.dtype:
        v = E.cast(frag.dtype, v)
    return _call(I.TVM_FILL_FRAGMENT, data, *_mnk(16, 16, 16, "fill"), _offset(index, "index"), v)


def tvm_load_matrix_sync(
    frag: Buffer,
    index: E.ExprLike,
    src: Buffer,
    src_offset: E.ExprLike,
    stride: E.ExprLike,
    layout: str = "row_major",
) -> E.Call:
    """Fragment ``index`` of ``frag`` loaded from the 16 x 16 tile at ``src[src_offset]``."""
    what = "tvm_load_matrix_sync"
    data = _wmma_frag(frag, f"{what}: the fragment")
    _data(src, f"{what}: the source", ("global", "shared"), (frag.dtype,))
    args = (_offset(index, "index"), src.data, _offset(src_offset, "offset"))
    stride_e = _offset(stride, f"{what}: the stride", 16 // dt.bytes_of(frag.dtype))
    return _call(I.TVM_LOAD_MATRIX_SYNC, data, *_mnk(16, 16, 16, what), *args, stride_e,
                 _layout(layout, what))  # fmt: skip


def tvm_mma_sync(
    d: Buffer,
    d_index: E.ExprLike,
    a: Buffer,
    a_index: E.ExprLike,
    b: Buffer,
    b_index: E.ExprLike,
    c: Buffer,
    c_index: E.ExprLike,
) -> E.Call:
    """``D[d_index] = A[a_index] @ B[b_index] + C[c_index]`` on 16 x 16 fragments."""
    what = "tvm_mma_sync"
    for buf, scope in ((d, "wmma.accumulator"), (a, "wmma.matrix_a"), (b, "wmma.matrix_b"),
                       (c, "wmma.accumulator")):  # fmt: skip
        _wmma_frag(buf, f"{what}: '{buf.name}'", scope)
    if a.dtype != b.dtype or a.dtype not in ("float16", "bfloat16"):
        raise ArgumentError(f"{what}: A and B must both be float16 or bfloat16 fragments")
    accs = ("float32", "float16") if a.dtype == "float16" else ("float32",)
    if d.dtype not in accs or c.dtype != d.dtype:
        raise ArgumentError(f"{what}: {a.dtype} inputs accumulate in {accs}, not {d.dtype}")
    idx = [_offset(x, f"{what}: a fragment index") for x in (d_index, a_index, b_index, c_index)]
    return _call(I.TVM_MMA_SYNC, d.data, idx[0], a.data, idx[1], b.data, idx[2], c.data, idx[3])


def tvm_store_matrix_sync(
    frag: Buffer,
    index: E.ExprLike,
    dst: Buffer,
    dst_offset: E.ExprLike,
    stride: E.ExprLike,
    layout: str = "row_major",
) -> E.Call:
    """Accumulator fragment ``index`` of ``frag`` stored to the tile at ``dst[dst_offset]``."""
    what = "tvm_store_matrix_sync"
    data = _wmma_frag(frag, f"{what}: the fragment", "wmma.accumulator")
    _data(dst, f"{what}: the destination", ("global", "shared"), (frag.dtype,))
    args = (_offset(index, "index"), dst.data, _offset(dst_offset, "offset"))
    stride_e = _offset(stride, f"{what}: the stride", 16 // dt.bytes_of(frag.dtype))
    return _call(I.TVM_STORE_MATRIX_SYNC, data, *_mnk(16, 16, 16, what), *args, stride_e,
                 _layout(layout, what))  # fmt: skip


# -- what a call touches (for passes that track memory, as barrier insertion) -------------------
_WRITTEN = {  # operator -> position of the pointer it writes
    I.PTX_MMA: 10,
    I.PTX_LDMATRIX: 3,
    I.TVM_FILL_FRAGMENT: 0,
    I.TVM_LOAD_MATRIX_SYNC: 0,
    I.TVM_MMA_SYNC: 0,
    I.TVM_STORE_MATRIX_SYNC: 5,
}
_READ = {
    I.PTX_MMA: (6, 8, 10),
    I.PTX_LDMATRIX: (5,),
    I.TVM_FILL_FRAGMENT: (),
    I.TVM_LOAD_MATRIX_SYNC: (5,),
    I.TVM_MMA_SYNC: (2, 4, 6),
    I.TVM_STORE_MATRIX_SYNC: (0,),
}


TENSOR_CORE_OPS = frozenset(_WRITTEN)  # the calls whose pointers the functions below give


def written_pointer(call: E.Call) -> E.Var:
    """The buffer pointer (``data`` variable) a tensor-core call writes."""
    return call.args[_WRITTEN[call.op]]  # type: ignore[return-value]


def read_pointers(call: E.Call) -> tuple[E.Var, ...]:
    """The buffer pointers a tensor-core call reads."""
    return tuple(call.args[k] for k in _READ[call.op])  # type: ignore[misc]


def tensor_core_pointers(call: E.Call) -> tuple[E.Var, ...]:
    """Every buffer pointer a tensor-core call reads or writes."""
    return (written_pointer(call), *read_pointers(call))


__all__ = [
    "MMA_TYPES",
    "TENSOR_CORE_OPS",
    "tensor_core_pointers",
    "read_pointers",
    "written_pointer",
    "WMMA_SCOPES",
    "MmaSpec",
    "lane_coords",
    "ldmatrix_layout",
    "mma_layout",
    "mma_spec",
    "ptx_ldmatrix",
    "ptx_mma",
    "storage_dtype",
    "tvm_fill_fragment",
    "tvm_load_matrix_sync",
    "tvm_mma_sync",
    "tvm_store_matrix_sync",
]
