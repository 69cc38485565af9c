"""The group schedules of the CPU strategy templates: each schedules the stages its
template's compute made, with the fused group's elementwise tail as the epilogue.

Each function here is the ``schedule`` of one :class:`~ember.tuner.strategy.Implementation`
in ``codegen_llvm/strategy.py``, paired there with the compute whose stages it looks for
(by the tag that compute's own template module sets). It takes the group's schedule and
outputs, schedules what the template owns where the group's shape allows it (one output
that the template's reduction reaches elementwise), and returns the ids of the ops it
scheduled; where the shape does not fit it returns an empty set and the generic schedule
(``codegen_llvm/schedules/generic.py``) takes every stage, computing the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from ember.codegen_llvm.schedules import (
    conv2d_nchwc,
    depthwise_conv2d,
    depthwise_conv2d_nchwc,
    dw_pointwise_nchwc,
    expand_dw_pointwise_nchwc,
    grouped_pointwise,
    matmul_int8,
    pool2d,
    winograd,
)
from ember.codegen_llvm.schedules.conv2d import schedule_conv2d_flat
from ember.tir.schedule.schedule import Schedule
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tir.topi.conv_flat import DEPTHWISE_FLAT_TAG, FLAT_CONV_TAG
from ember.tir.topi.conv_nchwc import EXPAND_PAD_TAG, EXPAND_TAG
from ember.tuner.template import config_for_direct_call, using_config

Anchor = Callable[[Schedule, list[Any]], set[int]]


def producers(t: Tensor) -> list[Tensor]:
    """Every tensor ``t`` depends on (not ``t`` itself), each once."""
    seen: dict[int, Any] = {}
    stack = [t]
    while stack:
        cur = stack.pop()
        for p in getattr(cur.op, "input_tensors", ()):
            if id(p.op) not in seen:
                seen[id(p.op)] = p
                stack.append(p)
    return list(seen.values())


def _tagged(s: Schedule, tag: str) -> list[ComputeOp]:
    return [st.op for st in list(s.stages) if isinstance(st.op, ComputeOp) and st.op.tag == tag]


def _sole_nchw_output(outputs: list[Any], conv: Tensor, ndim: int = 4) -> Tensor | None:
    """The group's one ``ndim``-D output (4: NCHW, 5: NCHW[c]), where ``conv`` is the only
    reduction it reads."""
    if len(outputs) != 1 or outputs[0].ndim != ndim:
        return None
    out = outputs[0]
    reduces = [t for t in producers(out) if getattr(t.op, "reduce_axis", ())]
    return out if [t.op for t in reduces] == [conv.op] else None


def _flat_anchor(tag: str, apply: Callable[[Schedule, Tensor, Tensor], None]) -> Anchor:
    """The anchor of a flat NCHW convolution template (direct or depthwise): its stage
    (tagged ``tag``) needs one output of the convolution's NCHW shape that reads it (its
    copy, maybe with an epilogue inlined); the flat input stays a stage."""

    def anchor(s: Schedule, outputs: list[Any]) -> set[int]:
        done: set[int] = set()
        for op in _tagged(s, tag):
            conv = op.output(0)
            xf = op.input_tensors[0]
            out = _sole_nchw_output(outputs, conv)
            if out is None:  # the generic schedule takes it
                continue
            for inner in s.stages:
                if (
                    isinstance(inner.op, ComputeOp)
                    and inner.op is not out.op
                    and not (inner.op.reduce_axis or inner.op is xf.op)
                ):
                    inner.compute_inline()
            before = {id(x.op) for x in s.stages}
            apply(s, out, conv)
            made = {id(x.op) for x in s.stages} - before  # the accumulator's cache stage
            done |= {id(op), id(xf.op), id(out.op)} | made
        return done

    return anchor


conv2d_flat = _flat_anchor(FLAT_CONV_TAG, schedule_conv2d_flat)
depthwise_flat = _flat_anchor(DEPTHWISE_FLAT_TAG, depthwise_conv2d.schedule_depthwise_flat)


def grouped_1x1(s: Schedule, outputs: list[Any]) -> set[int]:
    """A grouped 1x1 convolution (``schedules/grouped_pointwise.py``) with the group's one
    NCHW output reading it; every other computed stage (its 4-D view, the epilogue, an
    injective producer of its input) is inlined."""
    done: set[int] = set()
    for op in _tagged(s, grouped_pointwise.TAG):
        conv = op.output(0)
        out = _sole_nchw_output(outputs, conv)
        if out is None:
            continue
        for inner in s.stages:
            if isinstance(inner.op, ComputeOp) and inner.op is not out.op and inner.op is not op:
                if not inner.op.reduce_axis:
                    inner.compute_inline()
        before = {id(x.op) for x in s.stages}
        grouped_pointwise.schedule_grouped_pointwise(s, out, conv)
        done |= {id(op), id(out.op)} | ({id(x.op) for x in s.stages} - before)
    return done


def winograd_conv(s: Schedule, outputs: list[Any]) -> set[int]:
    """The Winograd GEMM (``winograd_gemm``) with the group's one NCHW output reading it."""
    done: set[int] = set()
    for op in _tagged(s, "winograd_gemm"):
        out = _sole_nchw_output(outputs, op.output(0))
        if out is not None:
            done |= winograd.schedule_winograd_output(s, out)
    return done


def winograd_nchwc(s: Schedule, outputs: list[Any]) -> set[int]:
    """The blocked Winograd GEMM with the group's one 5-D (NCHWc) output reading it."""
    done: set[int] = set()
    for op in _tagged(s, "winograd_gemm"):
        out = _sole_nchw_output(outputs, op.output(0), ndim=5)
        if out is not None:
            done |= winograd.schedule_winograd_output(s, out)
    return done


def _blocked_anchor(tag: str, schedule: Callable[[Schedule, Tensor, Tensor], None]) -> Anchor:
    """The anchor of a blocked (NCHWc) convolution template: its reduction (tagged ``tag``)
    with one 5-D output reading it (the epilogue inlined there)."""

    def anchor(s: Schedule, outputs: list[Any]) -> set[int]:
        done: set[int] = set()
        for op in _tagged(s, tag):
            done |= _template_nchwc(s, outputs, op.output(0), schedule)
        return done

    return anchor


def _template_nchwc(
    s: Schedule, outputs: list[Any], conv: Tensor, schedule: Callable[..., None]
) -> set[int]:
    pad = conv.op.input_tensors[0]
    if len(outputs) != 1 or outputs[0].ndim != 5:
        return set()
    out = outputs[0]
    reduces = [t for t in producers(out) if getattr(t.op, "reduce_axis", ())]
    if out.op is not conv.op and [t.op for t in reduces] != [conv.op]:
        return set()
    kept = _inline_others(s, [out, conv, pad], lambda: schedule(s, out, conv))
    return kept if getattr(pad.op, "tag", "") == "pad" else kept - {id(pad.op)}


def _inline_others(s: Schedule, keep: list[Tensor], schedule: Callable[[], None]) -> set[int]:
    """Inline every compute stage but those of ``keep``, run ``schedule``, and return the
    ids of the ops it owns: ``keep``'s and the stages it made (cache writes)."""
    kept = {id(t.op) for t in keep}
    for inner in s.stages:
        if isinstance(inner.op, ComputeOp) and id(inner.op) not in kept:
            inner.compute_inline()
    before = {id(x.op) for x in s.stages}
    schedule()
    return kept | ({id(x.op) for x in s.stages} - before)


conv2d_nchwc_blocked = _blocked_anchor("conv2d_nchwc", conv2d_nchwc.schedule_conv2d_nchwc)
depthwise_nchwc_blocked = _blocked_anchor(
    depthwise_conv2d_nchwc.TAG, depthwise_conv2d_nchwc.schedule_depthwise_nchwc
)


def _pointwise_after_depthwise(
    s: Schedule, outputs: list[Any]
) -> Iterator[tuple[Tensor, Tensor, Tensor, Tensor]]:
    """``(out, conv, mid, dw)`` for each 1x1 reduction ``conv`` of the group whose input
    ``mid`` is elementwise on one depthwise reduction ``dw``, ``out`` the group's one 5-D
    output."""
    if len(outputs) != 1 or outputs[0].ndim != 5:
        return
    for op in _tagged(s, "conv2d_nchwc"):
        conv, mid = op.output(0), op.input_tensors[0]
        dws = [t for t in producers(mid) if getattr(t.op, "tag", "") == depthwise_conv2d_nchwc.TAG]
        if len(dws) == 1 and isinstance(mid.op, ComputeOp) and not mid.op.reduce_axis:
            yield outputs[0], conv, mid, dws[0]


def _reduces_only(out: Tensor, conv: Tensor, reductions: list[Tensor]) -> bool:
    """Whether ``out`` is ``conv`` itself or reads no reduction but ``reductions``: its
    epilogue is elementwise."""
    found = {id(t.op) for t in producers(out) if getattr(t.op, "reduce_axis", ())}
    return out.op is conv.op or found == {id(t.op) for t in reductions}


def dw_pointwise(s: Schedule, outputs: list[Any]) -> set[int]:
    """The anchor of ``dwconv_pw_nchwc``: its 1x1 reduction with one 5-D output reading it
    (the epilogue inlined there), and the clipped depthwise output the reduction reads,
    computed a row at a time inside."""
    for out, conv, mid, dw in _pointwise_after_depthwise(s, outputs):
        if _reduces_only(out, conv, [conv, dw]):
            keep = [out, conv, mid, dw, dw.op.input_tensors[0]]
            schedule = partial(dw_pointwise_nchwc.schedule_dw_pointwise, s, out, conv, mid, dw)
            return _inline_others(s, keep, schedule)
    return set()


def expand_dw_pointwise(s: Schedule, outputs: list[Any]) -> set[int]:
    """The anchor of ``expand_dwconv_pw_nchwc``: its 1x1 projection with one 5-D output
    reading it (the epilogue inlined there), the clipped depthwise output it reads and the
    expanded rows that reads, computed a band at a time inside."""
    for out, conv, mid, dw in _pointwise_after_depthwise(s, outputs):
        padded = dw.op.input_tensors[0]
        if getattr(padded.op, "tag", "") != EXPAND_PAD_TAG:
            continue
        (expand,) = [t for t in padded.op.input_tensors if getattr(t.op, "tag", "") == EXPAND_TAG]
        if _reduces_only(out, conv, [conv, dw, expand]):
            keep = [out, conv, mid, dw, padded, expand]
            schedule = partial(expand_dw_pointwise_nchwc.schedule_expand_dw_pointwise, s, *keep)
            return _inline_others(s, keep, schedule)
    return set()


def max_pool(s: Schedule, outputs: list[Any]) -> set[int]:
    """``pool2d.llvm``'s schedule where the pool is the group's output (no epilogue)."""
    done: set[int] = set()
    for op in _tagged(s, pool2d.GRAPH_MAX_TAG):
        if [t.op for t in outputs] == [op]:
            done |= pool2d.schedule_max_pool2d_graph(s, op.output(0))
    return done


def avg_pool(s: Schedule, outputs: list[Any]) -> set[int]:
    """``pool2d.llvm``'s average pooling where its output is the group's (no epilogue)."""
    done: set[int] = set()
    for op in _tagged(s, pool2d.GRAPH_AVG_TAG):
        red = op.output(0)
        reads = getattr(outputs[0].op, "input_tensors", []) if len(outputs) == 1 else []
        if len(reads) == 1 and reads[0].op is red.op:
            done |= pool2d.schedule_avg_pool2d_graph(s, red, outputs[0])
    return done


def int8_gemm(s: Schedule, outputs: list[Any]) -> set[int]:
    """The VNNI int8 GEMM (``matmul_int8_panels``): its single (M, N) output, with the
    stages between them inlined, gets ``matmul_int8.llvm``'s schedule with the knobs of
    that task's best record in an enclosing ``apply_history_best`` (else the defaults);
    A's padded copy is left to the generic schedule."""
    panels = _tagged(s, "matmul_int8_panels")
    if len(panels) != 1 or len(outputs) != 1 or outputs[0].ndim != 2:
        return set()
    cp, out = panels[0].output(0), outputs[0]
    if [t.op for t in producers(out) if getattr(t.op, "reduce_axis", ())] != [cp.op]:
        return set()
    before = {id(t.op) for t in producers(cp)}
    between = [
        t.op
        for t in producers(out)
        if isinstance(t.op, ComputeOp) and id(t.op) not in before and t.op is not cp.op
    ]
    for op in between:
        s[op].compute_inline()
    args = dict(cp.op.attrs)["task_args"]
    with using_config(config_for_direct_call("matmul_int8.llvm", args)):
        mr, nb = matmul_int8.define_int8_knobs(args[0], args[1])
    matmul_int8.schedule_int8_gemm(s, cp, out, mr, nb, copies=False)
    return {id(cp.op), id(out.op)} | {id(op) for op in between}
