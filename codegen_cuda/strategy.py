"""The CUDA operator strategies: for each graph op, the template implementations that apply.

Each entry of :data:`CUDA_STRATEGY` is an :class:`~ember.tuner.strategy.Implementation`
pairing a template's compute (None where it does not take the workload) with the anchor
schedule of its stages and its tuning task; ``ember.graph.kernels`` takes the first that
applies (else the op's generic compute, ``frontend/ops``) and schedules the kernel with
:func:`~ember.codegen_cuda.schedules.generic.schedule_group`, the implementations taken
as anchors.

fp16 and bf16 GEMMs (``matmul`` with 2-D weights or equal batch dims, ``gemm`` without
``trans_a`` and with ``alpha == 1``) take the compute of ``matmul_tensorcore.cuda`` /
``batch_matmul_tensorcore.cuda`` (padded shared tiles, a warp-level fp32 accumulator,
its shared copy) on architectures with ``mma.sync`` (sm_80+). The stage the compute
returns, tagged :data:`TAG`, casts the accumulator to the op's dtype and carries the
knobs and fetch widths in its attrs; its schedule,
:func:`~ember.codegen_cuda.schedules.tensorcore_epilogue.tensorcore_stages`, applies
:func:`~ember.codegen_cuda.schedules.matmul_tensorcore.schedule_tensorcore_gemm` to the
group's output with the elementwise tail (bias, activation, cast) inlined there: the
template's fused epilogue. The knobs are the task's best record's in an enclosing
``apply_history_best``, else tiles sized to the problem (:func:`fallback_knobs`).
fp16/bf16 2-D NCHW ``conv`` (group 1) takes the implicit GEMM of ``tir/topi/conv_gemm.py``
(the same stages, A read from the input) with :func:`fallback_knobs`: no tuning task yet.
float32 ``attention`` (the node ``fuse_attention`` makes) with heads of at most 64
features runs the kernel of ``schedules/attention.py``, which never stores the scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.codegen_cuda.build import default_arch
from ember.codegen_cuda.resources import arch_number
from ember.codegen_cuda.schedules import attention
from ember.codegen_cuda.schedules.generic import schedule_generic, schedule_group
from ember.codegen_cuda.schedules.matmul_tensorcore import define_tensorcore_knobs
from ember.codegen_cuda.schedules.tensorcore_epilogue import TAG, tensorcore_stages
from ember.target import Target
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import PlaceholderOp, Tensor
from ember.tir.topi.attention import AttentionLayout
from ember.tir.topi.conv_gemm import conv_tensorcore_compute
from ember.tir.topi.tensorcore_gemm import (
    IN_DTYPES,
    gemm_output,
    round_up,
    tensorcore_gemm_stages,
)
from ember.tir.topi.transform import static_shape
from ember.tuner.space import FallbackConfig
from ember.tuner.strategy import Implementation, StrategyTable, no_schedule
from ember.tuner.template import config_for_direct_call, using_config

__all__ = [
    "CUDA_STRATEGY",
    "TAG",
    "compute_for",
    "implementations",
    "schedule_generic",
    "schedule_group",
    "task_for",
]

MATMUL_TEMPLATE = "matmul_tensorcore.cuda"
BATCH_TEMPLATE = "batch_matmul_tensorcore.cuda"
CONV_TEMPLATE = "conv2d_nchw_tensorcore.cuda"  # an implementation's name: no tuning task yet
ATTENTION = "attention.cuda"  # no tuning task: its blocks are sized to the problem
MIN_SM = 80  # mma.sync m16n8k16 and cp.async


def fallback_knobs(M: int, N: int) -> dict[str, Any]:
    """Knobs without a tuning record: the smallest block tile (of the template's space)
    that covers the problem, up to 128 x 64, two warps along M, warps 32 columns wide
    (a 5-row layer pads to 32 rows, not to the template default's 128)."""
    bm = next((b for b in (32, 64) if M <= b), 128)
    bn = 32 if N <= 32 else 64
    return {
        "bm": bm, "bn": bn, "wm": min(bm // 2, 64), "wn": 32, "ks": 32, "stages": 2,
        "layout": "swizzle", "route": "mma",
    }  # fmt: skip


def _knobs(name: str, args: tuple[Any, ...], M: int, N: int) -> dict[str, Any]:
    cfg = config_for_direct_call(name, args)
    if isinstance(cfg, FallbackConfig):
        return fallback_knobs(M, N)
    with using_config(cfg):
        return define_tensorcore_knobs()


def _aligned(X: Tensor, row: int, padded_row: int) -> bool:
    """Whether a fetch of ``X`` may move 8 halves at once: a graph input (a computed
    operand is read through its inlined expression) whose rows are whole tiles."""
    return isinstance(X.op, PlaceholderOp) and row % 8 == 0 and row == padded_row


def gemm_task(
    a_shape: Sequence[int], a_dtype: str, b_shape: Sequence[int], b_dtype: str, trans_b: bool
) -> tuple[Any, ...] | None:
    """The template task (name, arguments) of ``A @ B`` (B transposed with ``trans_b``), or
    None where the templates do not take it: fp16/bf16 operands of one dtype, A at least
    2-D, B 2-D or with A's batch dims (which the batch template takes as one)."""
    a_shape, b_shape = tuple(int(d) for d in a_shape), tuple(int(d) for d in b_shape)
    if str(a_dtype) not in IN_DTYPES or str(b_dtype) != str(a_dtype):
        return None
    if len(a_shape) < 2 or len(b_shape) < 2:
        return None
    if len(b_shape) != 2 and b_shape[:-2] != a_shape[:-2]:
        return None
    *batch, M, K = a_shape
    N = b_shape[-2 if trans_b else -1]
    tail = (str(a_dtype), str(a_dtype), trans_b)
    if not batch:
        return MATMUL_TEMPLATE, (M, N, K, *tail)
    nb = 1
    for d in batch:
        nb *= d
    return BATCH_TEMPLATE, (nb, M, N, K, *tail)


def tensorcore_compute(
    A: Tensor, B: Tensor, task: tuple[str, tuple[Any, ...]], name: str
) -> Tensor:
    """``A @ B`` as the template's stages (``task`` from :func:`gemm_task`), the last one
    (tagged :data:`TAG`) cast to A's dtype, with the knobs of the task's record."""
    *batch, M, K = static_shape(A)
    template, args = task
    trans_b = bool(args[-1])
    N = args[-5]  # (..., M, N, K, dtype, out_dtype, trans_b)
    dtype = str(A.dtype)
    knobs = _knobs(template, args, M, N)
    Np, Kp = round_up(N, knobs["bn"]), round_up(K, knobs["ks"])
    _, _, _, CS = tensorcore_gemm_stages(A, B, knobs, trans_b)
    vectors = (
        8 if _aligned(A, K, Kp) else 1,
        8 if (_aligned(B, K, Kp) if trans_b else _aligned(B, N, Np)) else 1,
        1,
    )
    attrs = {"knobs": tuple(sorted(knobs.items())), "trans_b": trans_b, "vectors": vectors}
    cast = lambda acc, idx: acc.astype(dtype)  # noqa: E731
    return gemm_output(CS, (*batch, M, N), cast, name, TAG, attrs)


def _gemm_fits(
    a_ndim: int, c_shape: tuple[int, ...] | None, attrs: dict[str, Any], M: int, N: int
) -> bool:
    """ONNX Gemm the template takes: no ``trans_a``, ``alpha == 1``, a C that broadcasts."""
    if attrs["trans_a"] or attrs["alpha"] != 1.0 or a_ndim != 2:
        return False
    if c_shape is None:
        return True
    return len(c_shape) <= 2 and all(d in (1, n) for d, n in zip(c_shape[::-1], (N, M)))


def _matmul(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    A, B = inputs[0], inputs[1]
    task = gemm_task(static_shape(A), str(A.dtype), static_shape(B), str(B.dtype), False)
    return None if task is None else [tensorcore_compute(A, B, task, "matmul_tc")]


def _gemm(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """ONNX Gemm: the GEMM, then ``+ beta * C`` broadcast (an elementwise stage the graph
    schedule inlines into the epilogue)."""
    A, B = inputs[0], inputs[1]
    task = gemm_task(
        static_shape(A), str(A.dtype), static_shape(B), str(B.dtype), bool(attrs["trans_b"])
    )
    cs = static_shape(inputs[2]) if len(inputs) > 2 else None
    if task is None or not _gemm_fits(A.ndim, cs, attrs, static_shape(A)[0], task[1][-5]):
        return None
    prod = tensorcore_compute(A, B, task, "gemm_tc")
    if cs is None:
        return [prod]
    C, beta = inputs[2], attrs["beta"]
    M, N = static_shape(prod)

    def out(i: E.PrimExpr, j: E.PrimExpr) -> E.PrimExpr:
        idx = [E.const(0, "int32") if d == 1 else v for d, v in zip(cs, (i, j)[2 - len(cs) :])]
        c = C[tuple(idx)].astype(prod.dtype)
        return prod[i, j] + (c if beta == 1.0 else c * E.const(beta, prod.dtype))

    return [te.compute((M, N), out, name="gemm_bias", tag="broadcast")]


def _conv(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """fp16/bf16 2-D group-1 NCHW ``conv``: the implicit GEMM of ``tir/topi/conv_gemm.py``, with
    tiles sized to the problem (no tuning task yet)."""
    return conv_tensorcore_compute(inputs, attrs, fallback_knobs, TAG)


def _attention(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """float32 attention over heads the kernel's registers hold: the fused kernel; else the
    op's generic compute (scores, softmax, product as stages)."""
    if any(str(t.dtype) != "float32" for t in inputs):
        return None
    q, k, v = inputs[:3]
    if any(not isinstance(d, E.IntImm) for t in inputs for d in t.shape):
        return None  # symbolic sizes: the kernel's blocks are sized per shape
    layout = AttentionLayout.from_attrs(attrs)
    B, H, _, D = layout.sizes("q", static_shape(q))
    Dv = layout.sizes("v", static_shape(v))[3]
    if not attention.fits(D, Dv, B * H):
        return None
    mask = inputs[3] if len(inputs) > 3 else None
    return [attention.flash_attention_cuda(q, k, v, mask, attrs["scale"], layout)]


def _matmul_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    a, b = in_types[0], in_types[1]
    return gemm_task(a.shape, str(a.dtype), b.shape, str(b.dtype), False)


def _gemm_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    a, b = in_types[0], in_types[1]
    task = gemm_task(a.shape, str(a.dtype), b.shape, str(b.dtype), bool(attrs["trans_b"]))
    if task is None:
        return None
    cs = tuple(int(d) for d in in_types[2].shape) if len(in_types) > 2 else None
    return task if _gemm_fits(len(a.shape), cs, attrs, int(a.shape[0]), task[1][-5]) else None


def _arch(target: Any) -> str:
    """The architecture of a ``cuda`` target (a parsed ``Target``, its string, or None:
    the default architecture)."""
    arch = Target.parse(target).arch if target is not None else ""
    return arch or default_arch()


def _mma(target: Any) -> bool:
    """Whether the target's architecture has ``mma.sync`` and ``cp.async`` (sm_80+)."""
    return arch_number(_arch(target)) >= MIN_SM


CUDA_STRATEGY = StrategyTable("cuda")
"""The GPU's strategies; one :meth:`~ember.tuner.strategy.StrategyTable.add` per template."""

_add = CUDA_STRATEGY.add
_add(
    "matmul",
    Implementation(
        MATMUL_TEMPLATE, _matmul, tensorcore_stages, _matmul_task, priority=10, supports=_mma
    ),
)
_add(
    "gemm",
    Implementation(
        MATMUL_TEMPLATE, _gemm, tensorcore_stages, _gemm_task, priority=10, supports=_mma
    ),
)
_add(
    "conv",
    Implementation(CONV_TEMPLATE, _conv, tensorcore_stages, None, priority=10, supports=_mma),
)

_add("attention", Implementation(ATTENTION, _attention, no_schedule, None, priority=10))


def _cuda_target(arch: str) -> Target | None:
    return Target.parse(f"cuda -arch={arch}") if arch else None


def implementations(op: str, target: Any = None) -> list[Implementation]:
    """The implementations of ``op`` that may run on the ``cuda`` ``target`` (a parsed
    ``Target``, its string, or None: the default architecture), best first."""
    return CUDA_STRATEGY.implementations(op, target)


def compute_for(
    op: str, inputs: Sequence[Any], attrs: dict[str, Any], arch: str = ""
) -> list[Any] | None:
    """The template compute of ``op`` on ``inputs`` for ``arch`` (the default
    architecture where empty), or None where no template applies."""
    hit = CUDA_STRATEGY.compute(op, inputs, attrs, _cuda_target(arch))
    return None if hit is None else hit[0]


def task_for(
    op: str, in_types: Sequence[Any], attrs: dict[str, Any], arch: str = ""
) -> tuple[Any, ...] | None:
    """``(template name, arguments)`` of the tuning task behind a node of ``op`` on
    ``in_types`` (objects with ``shape`` and ``dtype``) for ``arch``, or None where
    :func:`compute_for` would not take a template: the task whose records it reads (the
    NCHW conv takes untuned tiles: no task)."""
    return CUDA_STRATEGY.task(op, in_types, attrs, _cuda_target(arch))
