"""The CPU's convolution layout pass: ``alter_conv_layout`` with blocks chosen by tuning.

``CPUBackend.graph_passes`` puts it before dead-code elimination; its channel blocks
come from the tuning records in force (:func:`tuned_blocks`), else the pass's own
measured rule. On CUDA the NCHW convolutions stay as they are.
"""

from __future__ import annotations

from ember.codegen_llvm.strategy import CONV_TEMPLATE, NCHWC_TEMPLATE
from ember.frontend.passes import alter_conv_layout_with
from ember.frontend.passes.alter_conv_layout import ConvWorkload, default_blocks
from ember.tuner.space import ConfigEntity
from ember.tuner.template import config_for_direct_call


def tuned_blocks(w: ConvWorkload) -> tuple[int, int] | None:
    """``(ic_bn, oc_bn)`` of the ``conv2d_NCHWc.llvm`` record for ``w`` in an enclosing
    ``apply_history_best`` block; NCHW (None) where only a ``conv2d_nchw.llvm`` record
    exists (that tuning chose NCHW); else the pass's measured rule."""
    cfg = config_for_direct_call(NCHWC_TEMPLATE, w.args)
    if isinstance(cfg, ConfigEntity):
        return cfg["ic_bn"].val, cfg["oc_bn"].val
    if isinstance(config_for_direct_call(CONV_TEMPLATE, w.args), ConfigEntity):
        return None
    return default_blocks(w)


alter_conv_layout_tuned = alter_conv_layout_with(tuned_blocks)  # named alter_conv_layout
