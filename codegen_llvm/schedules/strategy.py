"""The CPU strategy table: which template's compute a graph op takes for a workload.

``ember.kernels`` asks :func:`compute_for` before it falls back to an op's generic
compute (``frontend/ops``): an entry returns the tensors of a tuned template's
compute on the given tensors, or None where the template does not apply to the
workload. The matching schedule is applied by ``ember.graph_schedule`` from the
tag the compute carries (``conv2d_nchw_flat``), so the graph's elementwise tail is
inlined into the template's output stage: a fused epilogue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember.codegen_llvm.schedules import conv2d

Strategy = Callable[[Sequence[Any], dict[str, Any]], list[Any] | None]


def _conv(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 convolutions without groups: the ``conv2d_nchw.llvm`` template."""
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 4 or attrs["group"] != 1 or x.dtype != "float32" or w.dtype != "float32":
        return None
    g = conv2d.conv2d_geometry(x, w, attrs["strides"], attrs["pads"], attrs["dilations"])
    knobs = conv2d.conv2d_default_knobs(g, x.dtype)
    return [conv2d.conv2d_flat(x, w, bias, g, *knobs)]


STRATEGIES: dict[str, Strategy] = {"conv": _conv}


def compute_for(op: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    strategy = STRATEGIES.get(op)
    return strategy(inputs, attrs) if strategy is not None else None
