"""GPU templates ``matmul_tensorcore.cuda`` and ``batch_matmul_tensorcore.cuda``: fp16/bf16
GEMM on the tensor cores (``ldmatrix`` + ``mma.sync`` m16n8k16), with a fused epilogue.

The computation is staged as a CUTLASS-style kernel, in TE, as TVM's tensor-core
schedules do:

    AP, BP  (shared)  the operand tiles, padded with zeros to whole tiles (odd shapes),
                      pipelined over K (``cp.async`` on sm_80+, ``stages`` deep)
    CF      (warp)    each warp's WM x WN fp32 (or fp16) accumulator, tensorized per K
                      step with ``mma_step_intrin`` (ldmatrix + mma.sync) and its reset
                      (``route=wmma``: ``wmma.accumulator`` fragments, ``wmma_step_intrin``)
    CS      (shared)  the block's accumulators, written by each lane (``store_intrin``)
    C       (global)  ``epilogue(CS[i, j], (i, j))``: bias, activation, cast, or any tail
                      (:func:`tensorcore_gemm`); every thread of the block stores
                      coalesced, guarded at the matrix edge

:func:`schedule_tensorcore_gemm` schedules these five stages for whoever built them:
the matmul templates here and the implicit-GEMM convolution
(``conv2d_nhwc_tensorcore.cuda``), whose A is a virtual im2col. The shared operand
tiles keep ``ldmatrix`` free of bank conflicts, by the ``layout`` knob: ``swizzle``
(the default) XOR-permutes the 16-byte chunks of each row (the ``smem_swizzle``
pragma, applied to writers and readers alike by ``codegen_cuda/transform/swizzle_shared.py``),
``pad`` adds 16 bytes to each row (``storage_align``), ``plain`` does neither (for
comparison in the profile).

Knobs: ``bm``/``bn`` block tile, ``wm``/``wn`` warp tile (``(bm/wm) * (bn/wn)`` warps),
``ks`` K step, ``stages`` of the shared pipeline, ``layout``, ``route`` (``mma`` or
``wmma``, the latter on ``pad``/``plain`` tiles). Configurations whose warp tile does
not divide the block tile are pruned from the space; those over the architecture's
shared memory or local memory limits, or using an instruction it lacks, are
rejected by ``verify_gpu`` before anything is compiled.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_cuda.schedules.common import bind_blocks
from ember.codegen_cuda.schedules.tensorcore_intrin import (
    mma_step_intrin,
    store_intrin,
    wmma_step_intrin,
    wmma_store_intrin,
)
from ember.errors import ArgumentError
from ember.tir.schedule.schedule import Schedule, Stage, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.tensorcore_gemm import (
    IN_DTYPES,
    Epilogue,
    gemm_output,
    make_epilogue,
    round_up,
    tensorcore_gemm_stages,
)
from ember.tir.topi.transform import static_shape
from ember.tuner.template import get_config, template


def define_tensorcore_knobs() -> dict[str, Any]:
    """The knobs every tensor-core GEMM template shares, as values."""
    cfg = get_config()
    cfg.define_knob("bm", [32, 64, 128], default=128)
    cfg.define_knob("bn", [32, 64, 128], default=64)
    cfg.define_knob("wm", [16, 32, 64], default=64)
    cfg.define_knob("wn", [16, 32, 64], default=32)
    cfg.define_knob("ks", [16, 32, 64], default=32)
    cfg.define_knob("stages", [1, 2, 3, 4], default=3)
    cfg.define_knob("layout", ["swizzle", "pad", "plain"], default="swizzle")
    cfg.define_knob("route", ["mma", "wmma"], default="mma")
    cfg.add_constraint(
        lambda c: c["bm"].val % c["wm"].val == 0 and c["bn"].val % c["wn"].val == 0,
        "the warp tile divides the block tile",
    )
    cfg.add_constraint(
        lambda c: (c["bm"].val // c["wm"].val) * (c["bn"].val // c["wn"].val) <= 16,
        "at most 16 warps per block",
    )
    cfg.add_constraint(
        lambda c: c["route"].val == "mma" or c["layout"].val != "swizzle",
        "wmma loads read row-major tiles (no swizzle)",
    )
    names = ("bm", "bn", "wm", "wn", "ks", "stages", "layout", "route")
    return {k: cfg[k].val for k in names}


def _bind_threads(stage: Stage, axis: Any, wz: int, wy: int) -> Any:
    """Split ``axis`` into threadIdx.z x threadIdx.y x threadIdx.x (32) and bind them."""
    rest, inner = stage.split(axis, factor=32 * wy * wz)
    zy, tx = stage.split(inner, factor=32)
    tz, ty = stage.split(zy, factor=wy)
    stage.bind(tz, "threadIdx.z")
    stage.bind(ty, "threadIdx.y")
    stage.bind(tx, "threadIdx.x")
    del rest
    return tx


def _fetch(stage: Stage, vector: int, wz: int, wy: int) -> Any:
    fused = stage.fuse(*stage.op.axis)
    if vector > 1:
        fused, lanes = stage.split(fused, factor=vector)
        stage.vectorize(lanes)
    return _bind_threads(stage, fused, wz, wy)


def schedule_tensorcore_gemm(
    s: Schedule, AP: Tensor, BP: Tensor, CF: Tensor, CS: Tensor, C: Tensor,
    knobs: dict[str, Any], trans_b: bool = False, vectors: tuple[int, int, int] = (8, 8, 1),
) -> None:  # fmt: skip
    """Schedule the five stages of a tensor-core GEMM (see the module docstring).

    ``vectors``: elements per access of the A fetch, the B fetch and the C store (1 where
    a row of the global tensor does not start aligned). A leading batch axis of ``C`` is
    ``blockIdx.z`` (all block axes fuse onto ``x`` where ``y`` or ``z`` would pass 65535)."""
    wmma = knobs["route"] == "wmma"
    acc_scope = "wmma.accumulator" if wmma else "warp"
    for stage, scope in ((AP, "shared"), (BP, "shared"), (CF, acc_scope), (CS, "shared")):
        s[stage].set_scope(scope)
    bx = _schedule_output(s, C, knobs, vectors[2])
    ko = _schedule_warps(s, CF, CS, C, bx, knobs, AP.dtype, trans_b)
    wy, wz = knobs["bm"] // knobs["wm"], knobs["bn"] // knobs["wn"]
    rows = {AP: knobs["ks"], BP: knobs["ks"] if trans_b else knobs["bn"]}
    for stage, vec in ((AP, vectors[0]), (BP, vectors[1])):
        s[stage].compute_at(s[CF], ko)
        s[stage].pipeline(knobs["stages"])
        tx = _fetch(s[stage], vec, wz, wy)
        if knobs["layout"] == "pad":  # 16 bytes per row: 8 rows of a phase in 8 bank groups
            s[stage].storage_align(s[stage].op.axis[-2], rows[stage], 8)
        elif knobs["layout"] == "swizzle":  # the same, by permuting 16-byte chunks per row
            s[stage].pragma(tx, "smem_swizzle", rows[stage])


def _schedule_output(s: Schedule, C: Tensor, knobs: dict[str, Any], vector: int) -> Any:
    """Block tiles of C on the grid, each stored by all the block's threads; gives the
    block's column axis (where the block's stages are computed)."""
    bm, bn = knobs["bm"], knobs["bn"]
    *batch, i, j = s[C].op.axis
    by, ii = s[C].split(i, factor=bm)
    bx, jj = s[C].split(j, factor=bn)
    s[C].reorder(*batch, by, bx, ii, jj)
    # several batch dims (heads of attention) share grid z, unless a grid limit says otherwise
    dims = list(static_shape(C))
    extents = [*dims[:-2], -(-dims[-2] // bm), -(-dims[-1] // bn)]
    bx = bind_blocks(s[C], [*batch, by, bx], extents)
    fused = s[C].fuse(ii, jj)
    if vector > 1:
        fused, lanes = s[C].split(fused, factor=vector)
        s[C].vectorize(lanes)
    _bind_threads(s[C], fused, bn // knobs["wn"], bm // knobs["wm"])
    return bx


def _schedule_warps(
    s: Schedule, CF: Tensor, CS: Tensor, C: Tensor, bx: Any, knobs: dict[str, Any],
    in_dtype: str, trans_b: bool,
) -> Any:  # fmt: skip
    """Warp tiles of the block's accumulator (threadIdx.y, threadIdx.z), each a tensorized
    K loop and a tensorized copy to the shared tile; gives the K-step loop."""
    wm, wn, ks, acc_dtype = knobs["wm"], knobs["wn"], knobs["ks"], CF.dtype
    wmma = knobs["route"] == "wmma"
    s[CS].compute_at(s[C], bx)
    *_, ci, cj = s[CS].op.axis
    wi, ti = s[CS].split(ci, factor=wm)
    wj, tj = s[CS].split(cj, factor=wn)
    s[CS].reorder(wi, wj, ti, tj)
    s[CS].bind(wi, "threadIdx.y")
    s[CS].bind(wj, "threadIdx.z")
    s[CS].tensorize(ti, (wmma_store_intrin if wmma else store_intrin)(wm, wn, acc_dtype))
    # rows 8 words apart: a lane quad's 8 row groups fall in 4 bank octets, not 1
    s[CS].storage_align(ci, knobs["bn"], 8)

    s[CF].compute_at(s[CS], wj)
    *_, fi, fj = s[CF].op.axis
    ko, ki = s[CF].split(s[CF].op.reduce_axis[0], factor=ks)
    s[CF].reorder(ko, fi, fj, ki)
    step = wmma_step_intrin if wmma else mma_step_intrin
    s[CF].tensorize(fi, step(wm, wn, ks, in_dtype, acc_dtype, trans_b))
    return ko


def _check_dtypes(dtype: str, acc_dtype: str, out_dtype: str) -> None:
    if dtype not in IN_DTYPES:
        raise ArgumentError(f"tensor-core GEMM: inputs must be one of {IN_DTYPES}, not {dtype}")
    if acc_dtype not in ("float32", "float16") or (acc_dtype == "float16" != dtype):
        raise ArgumentError(
            f"tensor-core GEMM: {dtype} inputs accumulate in float32"
            f"{' or float16' if dtype == 'float16' else ''}, not {acc_dtype}"
        )
    if out_dtype not in ("float32", "float16", "bfloat16"):
        raise ArgumentError(f"tensor-core GEMM: out_dtype {out_dtype} is not a float type")


def tensorcore_gemm(
    A: Tensor, B: Tensor, epilogue: Epilogue | None = None, trans_b: bool = False,
    acc_dtype: str = "float32", name: str = "C",
) -> tuple[Schedule, Tensor]:  # fmt: skip
    """``C[..., i, j] = epilogue(sum_k A[..., i, k] * B[..., k, j], (..., i, j))`` on the tensor
    cores, scheduled; for use inside a template (it defines the knobs). ``A`` is ``[M, K]``
    or ``[batch, M, K]``, ``B`` likewise ``[K, N]`` (``[N, K]`` with ``trans_b``); the
    epilogue may read any other tensors (a bias, a residual), which stay inputs of ``C``."""
    *batch, M, K = static_shape(A)
    N = static_shape(B)[-2 if trans_b else -1]
    knobs = define_tensorcore_knobs()
    Np, Kp = round_up(N, knobs["bn"]), round_up(K, knobs["ks"])
    AP, BP, CF, CS = tensorcore_gemm_stages(A, B, knobs, trans_b, acc_dtype)
    C = gemm_output(CS, (*batch, M, N), epilogue or (lambda acc, idx: acc), name)
    s = create_schedule(C.op)
    vec_a = 8 if K % 8 == 0 and Kp == K else 1
    vec_b = 8 if (K if trans_b else N) % 8 == 0 and (Kp == K if trans_b else Np == N) else 1
    vec_c = 4 if M % knobs["bm"] == 0 and N % knobs["bn"] == 0 else 1
    schedule_tensorcore_gemm(s, AP, BP, CF, CS, C, knobs, trans_b, (vec_a, vec_b, vec_c))
    return s, C


def _gemm(
    batch: tuple[int, ...], M: int, N: int, K: int, dtype: str, out_dtype: str,
    trans_b: bool, bias: bool, activation: str, acc_dtype: str,
) -> tuple[Schedule, list[Any]]:  # fmt: skip
    _check_dtypes(dtype, acc_dtype, out_dtype)
    if min(M, N, K, *batch) < 1:
        raise ArgumentError(f"tensor-core GEMM: sizes must be positive, got {batch, M, N, K}")
    A = te.placeholder((*batch, M, K), dtype, name="A")
    B = te.placeholder((*batch, N, K) if trans_b else (*batch, K, N), dtype, name="B")
    Bias = te.placeholder((N,), dtype, name="bias") if bias else None
    epi = make_epilogue(acc_dtype, out_dtype, Bias, activation)
    s, C = tensorcore_gemm(A, B, epi, trans_b, acc_dtype)
    return s, [A, B, *([Bias] if Bias is not None else []), C]


@template("matmul_tensorcore.cuda")
def matmul_tensorcore_cuda(
    M: int, N: int, K: int, dtype: str = "float16", out_dtype: str = "float32",
    trans_b: bool = False, bias: bool = False, activation: str = "none",
    acc_dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:  # fmt: skip
    """``C = act(A @ B + bias)`` cast to ``out_dtype``; A ``[M, K]``, B ``[K, N]`` (``[N, K]``
    with ``trans_b``), bias ``[N]`` in the input dtype; arguments ``A, B[, bias], C``."""
    return _gemm((), M, N, K, dtype, out_dtype, trans_b, bias, activation, acc_dtype)


@template("batch_matmul_tensorcore.cuda")
def batch_matmul_tensorcore_cuda(
    batch: int, M: int, N: int, K: int, dtype: str = "float16", out_dtype: str = "float32",
    trans_b: bool = False, bias: bool = False, activation: str = "none",
    acc_dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:  # fmt: skip
    """``C[b] = act(A[b] @ B[b] + bias)``: the matmul kernel, one grid layer per batch."""
    return _gemm((batch,), M, N, K, dtype, out_dtype, trans_b, bias, activation, acc_dtype)
