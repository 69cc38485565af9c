"""The CPU strategy table: which template's compute a graph op takes for a workload.

``ember.kernels`` asks :func:`compute_for` before it falls back to an op's generic
compute (``frontend/ops``): an entry returns the tensors of a tuned template's
compute on the given tensors, or None where the template does not apply to the
workload. The matching schedule is applied by ``ember.graph_schedule`` from the
tag the compute carries (``conv2d_nchw_flat``, ``matmul_int8``), so the graph's elementwise tail is
inlined into the template's output stage: a fused epilogue.

:func:`task_for` names the tuning task behind a node (template name and arguments):
the conv strategy reads its knobs with the config an enclosing ``apply_history_best``
block records for that task (the template's fallback without one), and
``ember.model_tuning.extract_tasks`` lists the same tasks for tuning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember.codegen_llvm.schedules import conv2d

CONV_TEMPLATE = "conv2d_nchw.llvm"
MATMUL_TEMPLATE = "matmul.llvm"

Strategy = Callable[[Sequence[Any], dict[str, Any]], list[Any] | None]


def conv_task_args(
    x_shape: Sequence[int],
    x_dtype: str,
    w_shape: Sequence[int],
    w_dtype: str,
    attrs: dict[str, Any],
) -> tuple[Any, ...] | None:
    """The ``conv2d_nchw.llvm`` arguments of a convolution, or None where the template
    does not take it (not 2-D NCHW, grouped, not float32)."""
    if len(x_shape) != 4 or attrs["group"] != 1 or x_dtype != "float32" or w_dtype != "float32":
        return None
    N, C, H, W = (int(d) for d in x_shape)
    O, _, KH, KW = (int(d) for d in w_shape)
    geometry = (tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]))
    return (N, C, H, W, O, KH, KW, *geometry, "float32")


def _dims(t: Any) -> tuple[int, ...]:
    return tuple(int(getattr(d, "value", d)) for d in t.shape)


def _conv(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 convolutions without groups: the ``conv2d_nchw.llvm`` template,
    with the knobs of the task's best record where one applies."""
    from ember.tuner.template import config_for_direct_call

    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 4:
        return None
    args = conv_task_args(_dims(x), x.dtype, _dims(w), w.dtype, attrs)
    if args is None:
        return None
    g = conv2d.conv2d_geometry(x, w, attrs["strides"], attrs["pads"], attrs["dilations"])
    knobs = conv2d.conv2d_knobs(g, x.dtype, config_for_direct_call(CONV_TEMPLATE, args))
    return [conv2d.conv2d_flat(x, w, bias, g, *knobs)]


def task_for(
    op: str, in_types: Sequence[Any], attrs: dict[str, Any]
) -> tuple[str, tuple[Any, ...]] | None:
    """``(template name, arguments)`` of the tuning task behind a node of ``op`` on
    ``in_types`` (objects with ``shape`` and ``dtype``), or None where no template
    applies: convolutions the conv strategy takes, and ``dense_packed`` GEMMs as
    ``matmul.llvm`` of ``(M, N, K)`` with M the product of the leading dims."""
    if op == "conv":
        x, w = in_types[0], in_types[1]
        args = conv_task_args(x.shape, str(x.dtype), w.shape, str(w.dtype), attrs)
        return None if args is None else (CONV_TEMPLATE, args)
    if op == "dense_packed" and str(in_types[0].dtype) == "float32":
        a = tuple(int(d) for d in in_types[0].shape)
        m = 1
        for d in a[:-1]:
            m *= d
        return MATMUL_TEMPLATE, (m, int(attrs["n"]), a[-1], "float32")
    return None


def _int8_packed(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """``matmul_int8_packed`` (u8 x packed s8 -> s32): the ``matmul_int8.llvm`` compute,
    tensorized to AVX-512 VNNI by its schedule, where the host CPU has VNNI."""
    from ember.codegen_llvm.schedules.matmul_int8 import int8_gemm
    from ember.codegen_llvm.tensor_intrinsics import has_vnni

    a, p = inputs
    if not has_vnni() or a.ndim != 2 or a.dtype != "uint8" or p.dtype != "int8":
        return None
    M, K = _dims(a)
    return [int8_gemm(a, p, M, int(attrs["n"]), K)[1]]


STRATEGIES: dict[str, Strategy] = {"conv": _conv, "matmul_int8_packed": _int8_packed}


def compute_for(op: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    strategy = STRATEGIES.get(op)
    return strategy(inputs, attrs) if strategy is not None else None
