"""ONNX NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, as gathers and reductions.

Both pick, for every sample (and spatial position), the input at the target class along
axis 1, negate it, weight it by ``weight[target]``, and reduce: ``none`` keeps the
target's shape, ``sum`` adds everything, ``mean`` divides the sum by the sum of the
weights used (by the count when there are none). A target equal to ``ignore_index``
contributes nothing and weighs nothing; it may lie outside the classes (-1, or C), so
it is replaced by class 0 before any gather reads with it.
SoftmaxCrossEntropyLoss is the same loss over ``log_softmax(input, axis=1)``, which its
optional second output returns.
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter


def _nll(ctx: ConvertContext, log_probs: str) -> str:
    """The loss of ``log_probs`` (N, C, d1...) at the node's target, weight and reduction."""
    xt, tt = ctx.type_of(log_probs), ctx.type(1)
    dtype = xt.dtype
    if xt.ndim < 2 or tuple(tt.shape) != (xt.shape[0], *xt.shape[2:]):
        raise ArgumentError(f"{ctx.op_type}: target {tt} does not fit input {xt} (N, C, d1...)")
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ArgumentError(f"{ctx.op_type}: reduction '{reduction}' is not none, sum or mean")
    target = ctx.input(1)
    ignore = ctx.attr("ignore_index", None)
    kept = None
    if ignore is not None:
        ignored = ctx.emit1("equal", [target, ctx.const(np.array(ignore, dtype=tt.dtype))])
        target = ctx.emit1("where", [ignored, ctx.const(np.array(0, dtype=tt.dtype)), target])
        kept = ctx.emit1("cast", [ctx.emit1("logical_not", [ignored])], {"dtype": dtype})
    index = ctx.emit1("reshape", [target], {"shape": (xt.shape[0], 1, *xt.shape[2:])})
    picked = ctx.emit1("gather_elements", [log_probs, index], {"axis": 1})
    loss = ctx.emit1("neg", [ctx.emit1("reshape", [picked], {"shape": tuple(tt.shape)})])
    weights = kept
    if ctx.num_inputs > 2 and ctx.has_input(2):
        weights = ctx.emit1("gather", [ctx.input(2), target], {"axis": 0})
        if kept is not None:
            weights = ctx.emit1("multiply", [weights, kept])
    if weights is not None:
        loss = ctx.emit1("multiply", [loss, weights])
    if reduction == "none":
        return loss
    every = tuple(range(len(tt.shape)))
    total = ctx.emit1("reduce", [loss], {"kind": "sum", "axes": every, "keepdims": False})
    if reduction == "sum":
        return total
    if weights is None:
        count = float(np.prod([int(d) for d in tt.shape], dtype=np.int64))
        return ctx.emit1("divide", [total, ctx.const(np.array(count, dtype=dtype))])
    weight_sum = ctx.emit1("reduce", [weights], {"kind": "sum", "axes": every, "keepdims": False})
    return ctx.emit1("divide", [total, weight_sum])


@converter("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(ctx: ConvertContext) -> list[str]:
    """ONNX NegativeLogLikelihoodLoss over log-probabilities the model gives."""
    return [_nll(ctx, ctx.input(0))]


@converter("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(ctx: ConvertContext) -> list[str]:
    """ONNX SoftmaxCrossEntropyLoss: the NLL of ``log_softmax(scores, axis=1)``."""
    if ctx.type(0).ndim < 2:
        raise ArgumentError(f"{ctx.op_type}: scores must be (N, C, d1...), got {ctx.type(0)}")
    log_probs = ctx.emit1("log_softmax", [ctx.input(0)], {"axis": 1})
    return [_nll(ctx, log_probs), log_probs][: ctx.num_outputs]
