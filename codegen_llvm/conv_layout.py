"""The CPU's convolution layout pass: ``alter_conv_layout`` with blocks chosen by tuning,
and ``transform_winograd_weights`` after it, with the Winograd choice of the records or
the size rule (``conv_strategies.winograd_nchwc_knobs``).

``CPUBackend.graph_passes`` puts it before dead-code elimination; its channel blocks
come from the tuning records in force (:func:`tuned_blocks`), else the pass's own
measured rule. On CUDA the NCHW convolutions stay as they are.

The graph must run what was measured. A conv whose input arrives blocked keeps that
block (re-blocking it would cost a transform), so it can only run the ``conv2d_NCHWc.llvm``
configs measured with that ``ic_bn``: the chooser picks among those, and the graph's
kernel (``conv_strategies.nchwc_compute_for``) asks the records for the best config with the blocks
the graph gave it, never the task's best record under other blocks; where no record has
them, both take the template's fallback, as the untuned graph does.

Records can also cost transforms the kernels do not see: an ``oc_bn`` other than the
block of the value it is added to (a ResNet's shortcut) makes the add read one operand
re-blocked (before this rule, both went to NCHW and back, and the add ran unfused). So a
conv takes the best record with the block the pass wants for its output (the shortcut's,
else its input's: one block along the chain) unless it measured more than
:data:`KEEP_BLOCK_SLOWDOWN` times slower than the best it may run. A conv with an NCHW
input (the stem) wants the template's default block, the one every later conv's
fallback record (measured first by ``tune``) has. A re-block reads and writes the whole
activation, a few percent of a conv's time; the full answer weighs each transform's
measured cost against the kernels' over the whole graph (TVM's graph tuner, a dynamic
program over the layouts), not done here.
"""

from __future__ import annotations

from ember.codegen_llvm.strategy import CONV_TEMPLATE, NCHWC_TEMPLATE, winograd_nchwc_knobs
from ember.frontend.passes import alter_conv_layout_with, transform_winograd_weights_with
from ember.frontend.passes.conv_blocks import ConvWorkload, channel_block, default_blocks
from ember.tuner.active_records import measured_for_call
from ember.tuner.knob import OtherOptionEntity
from ember.tuner.space import ConfigEntity
from ember.tuner.template import config_for_direct_call

# a config with the output block the pass wants is taken up to this much slower than the
# best the conv may run (module doc)
KEEP_BLOCK_SLOWDOWN = 1.10


def tuned_blocks(
    w: ConvWorkload, in_block: int | None = None, want: int | None = None
) -> tuple[int, int] | None:
    """``(ic_bn, oc_bn)`` for ``w`` from the ``conv2d_NCHWc.llvm`` records of an enclosing
    ``apply_history_best`` block, among those of ``ic_bn == in_block`` when the input is
    blocked: the best with ``oc_bn == want`` (the block that adds no transform; the
    template's default block when the pass knows none, which the fallback record of
    every later conv has) if it measured within :data:`KEEP_BLOCK_SLOWDOWN` of the best,
    else the best. NCHW (None) where only a ``conv2d_nchw.llvm`` record exists (that
    tuning chose NCHW); else, and where no record has the input's block, the pass's
    measured rule (the fallback config runs)."""
    args = w.args
    where = () if in_block is None else (("ic_bn", in_block),)
    fits = measured_for_call(NCHWC_TEMPLATE, args, where)
    if fits is None:
        tuned_nchwc = in_block is not None and measured_for_call(NCHWC_TEMPLATE, args)
        if not tuned_nchwc and isinstance(
            config_for_direct_call(CONV_TEMPLATE, args), ConfigEntity
        ):
            return None
        return default_blocks(w, in_block)
    target = channel_block(w.O) if want is None else want
    keep = measured_for_call(NCHWC_TEMPLATE, args, (*where, ("oc_bn", target)))
    cfg, cost = fits
    if keep is not None and keep[1] <= KEEP_BLOCK_SLOWDOWN * cost:
        cfg = keep[0]
    return _block(cfg, "ic_bn"), _block(cfg, "oc_bn")


def _block(cfg: ConfigEntity, knob: str) -> int:
    entity = cfg[knob]
    assert isinstance(entity, OtherOptionEntity)  # the template defines it with define_knob
    return int(entity.val)


alter_conv_layout_tuned = alter_conv_layout_with(tuned_blocks)  # named alter_conv_layout
# after it: blocked 3x3 convs that records or the size rule give Winograd, weights transformed
transform_winograd_weights_tuned = transform_winograd_weights_with(winograd_nchwc_knobs)
