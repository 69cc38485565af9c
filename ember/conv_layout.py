"""The graph passes ``ember.compile`` runs for a target, and the CPU conv layout choice.

Sits above the frontend and the CPU templates (which may not import each other):
:func:`default_graph_passes` is ``ember.frontend.passes.DEFAULT_PASSES`` with, for
``llvm`` targets, ``alter_conv_layout`` before dead-code elimination, its blocks chosen
by :func:`tuned_blocks`. On CUDA the NCHW convolutions stay as they are.
"""

from __future__ import annotations

from typing import Any

from ember.frontend.passes import DEFAULT_PASSES, alter_conv_layout_with, eliminate_dead_code
from ember.frontend.passes.alter_conv_layout import ConvWorkload, default_blocks


def tuned_blocks(w: ConvWorkload) -> tuple[int, int] | None:
    """``(ic_bn, oc_bn)`` of the ``conv2d_NCHWc.llvm`` record for ``w`` in an enclosing
    ``apply_history_best`` block; NCHW (None) where only a ``conv2d_nchw.llvm`` record
    exists (that tuning chose NCHW); else the pass's measured rule."""
    from ember.codegen_llvm.strategy import CONV_TEMPLATE, NCHWC_TEMPLATE
    from ember.tuner.space import ConfigEntity
    from ember.tuner.template import config_for_direct_call

    cfg = config_for_direct_call(NCHWC_TEMPLATE, w.args)
    if isinstance(cfg, ConfigEntity):
        return cfg["ic_bn"].val, cfg["oc_bn"].val
    if isinstance(config_for_direct_call(CONV_TEMPLATE, w.args), ConfigEntity):
        return None
    return default_blocks(w)


alter_conv_layout_tuned = alter_conv_layout_with(tuned_blocks)
alter_conv_layout_tuned.__name__ = "alter_conv_layout"


def default_graph_passes(target_kind: str) -> tuple[Any, ...]:
    """The passes ``ember.compile`` and ``ember.extract_tasks`` run for ``target_kind``."""
    if target_kind != "llvm":
        return DEFAULT_PASSES
    at = DEFAULT_PASSES.index(eliminate_dead_code)
    return (*DEFAULT_PASSES[:at], alter_conv_layout_tuned, *DEFAULT_PASSES[at:])
