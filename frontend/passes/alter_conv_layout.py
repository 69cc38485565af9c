"""Layout choice for CPU convolutions: float32 2-D convs run channel-blocked (NCHW[c]).

Expects a verified graph (batch norms already folded into the convs); gives one
where each float32 2-D NCHW convolution with one group, constant weights and a
workload the chooser takes becomes ``conv_nchwc`` on ``[N, C/cb, H, W, cb]``
activations with its weights (and bias) blocked once, here, at compile time
(``tir/topi/conv_nchwc.py``). Blocked values stay blocked through what can read
them lane for lane: unary elementwise ops, 2-D max and average pooling
(``max_pool_nchwc``, ``avg_pool_nchwc``), ``add``/``subtract``/``multiply`` and the
variadic ``sum``/``max``/``min``/``mean`` of blocked tensors (re-blocked to the
first's block) and per-channel or scalar constants (re-laid out too), and a channel
``concat`` of blocked tensors whose channels are whole blocks (a concat of the blocks).
Grouped convolutions whose groups are whole blocks run blocked too (``groups``), but
grouped 1x1 convolutions only in blocks of at least a register (else NCHW's grouped 1x1
template is faster).
``layout_transform`` nodes appear only at the boundaries: where an NCHW value
enters a blocked conv, where a blocked value reaches an op that needs NCHW
(global pooling, flatten, reshape, a graph output), once per value, and where a
binary op meets operands of two blocks (the second re-blocked to the first's, one
transform rather than a round trip through NCHW). This is TVM's AlterOpLayout for
x86 ``conv2d_NCHWc``.

The blocks come from a chooser, ``(ConvWorkload, in_block, want) -> (ic_bn, oc_bn) |
None`` (None keeps the conv in NCHW): :func:`default_blocks` unless
:func:`alter_conv_layout_with` is given another, e.g. one reading the
``conv2d_NCHWc.llvm`` tuning records (``codegen_llvm/conv_layout.py``). ``in_block`` is
the block the conv's input already has (None for an NCHW input), which the conv keeps, so
the chooser picks the output block for it; ``want`` is the output block that adds no
transform: that of the blocked value the output meets at a binary op (through unary
elementwise ops: a ResNet's shortcut), else the input's (the chain's), else None.

Why it pays (2-core AVX-512 host shared with other jobs, load average 6 to 8, so
only interleaved best-of-N runs are comparable; fallback knobs): on the ResNet-18
3x3 layers the NCHWc template reaches about 500 GFLOP/s, 1.11x to 1.26x the NCHW
flat-row template and level with onnxruntime (``benchmarks/bench_conv_nchwc.py``);
the whole ResNet-18 (224x224) runs 1.29x faster with this pass at 1 thread and
1.27x at 2, and 1.16x at 64x64, so ``ember.compile`` runs it on ``llvm`` by
default (``CPUBackend.graph_passes``). Compile time is unchanged
within the noise. Below 16 output channels the vector lanes would run mostly
empty, so such convolutions (the small CNN's 8 and 12) stay NCHW.

Depthwise convolutions (one filter per channel) whose input is blocked run blocked too
(``dwconv_nchwc``, weights blocked here in the input's block), so a MobileNet stays
blocked from its first convolution to its last; before they did, its blocked 1x1
convolutions each paid a transform on both sides of an NCHW depthwise conv (0.54x
onnxruntime with the pass, 0.71x without, at 1 thread), and with them MobileNetV2 ran
at 0.94x onnxruntime at 1 and 2 threads, against 0.62x in NCHW. Other grouped
convolutions, and depthwise ones on an NCHW input, stay NCHW.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ember.frontend.graph import Graph, Node, TensorType, Value
from ember.frontend.op_kinds import ELEMWISE
from ember.frontend.ops.registry import get_op
from ember.frontend.passes.conv_blocks import (
    FINITE_AT_ZERO,
    BlockChooser,
    ConvWorkload,
    conv_workload,
    default_blocks,
    dividing,
    grouped_count,
    is_depthwise,
    is_pointwise,
    lanewise_nary,
    target_lanes,
)
from ember.frontend.passes.graph_pass import fresh_name, graph_pass
from ember.tir.topi.conv_nchwc import (
    blocks,
    pack_nchwc_bias,
    pack_nchwc_depthwise_weights,
    pack_nchwc_weights,
)
from ember.tir.transform.runner import Pass


class _Rewriter:
    """The new graph being built: which values have a blocked twin, which NCHW values
    exist, and the nodes emitted so far."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.params, self.values = dict(graph.params), dict(graph.values)
        self.nodes: list[Node] = []
        self.blocked: dict[str, tuple[str, int]] = {}  # NCHW name -> (blocked name, block)
        self.twins: dict[tuple[str, int], str] = {}  # (NCHW name, block) -> blocked name
        self.users: dict[str, list[Node]] = {}
        for nd in graph.nodes:
            for i in dict.fromkeys(nd.inputs):
                self.users.setdefault(i, []).append(nd)
        self.plain = set(graph.input_names) | set(graph.params)
        self.changed = False

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.values)

    def add_value(self, name: str, shape: tuple[Any, ...], dtype: str) -> str:
        self.values[name] = Value(name, TensorType(tuple(shape), dtype))
        return name

    def add_param(self, base: str, data: np.ndarray) -> str:
        name = self.fresh(base)
        self.params[name] = data
        self.plain.add(name)
        return self.add_value(name, data.shape, str(data.dtype))

    def transform(self, node: Node, src: str, dst: str, s: int, d: int, channels: int) -> None:
        attrs = {"src": s, "dst": d, "channels": channels}
        self.nodes.append(
            Node("layout_transform", node.name, (src,), (dst,), attrs, "LayoutTransform")
        )

    def to_blocked(self, v: str, block: int, node: Node) -> str:
        """A blocked twin of NCHW value ``v`` (made by a transform unless it exists; by a
        reshape for blocks of one channel, which keep NCHW's order)."""
        if v in self.blocked and self.blocked[v][1] == block:
            return self.blocked[v][0]
        if (v, block) in self.twins:
            return self.twins[v, block]
        t = self.values[v].type
        n, c, h, w = t.shape
        name = self.add_value(
            self.fresh(f"{v}_nchw{block}c"), (n, blocks(c, block), h, w, block), t.dtype
        )  # type: ignore[arg-type]
        if v in self.blocked:  # blocked with another block: re-block without NCHW
            src, s = self.blocked[v]
            self.transform(node, src, name, s, block, c)  # type: ignore[arg-type]
        elif block == 1:
            shape = {"shape": (n, c, h, w, 1)}
            self.nodes.append(Node("reshape", node.name, (v,), (name,), shape, "Reshape"))
        else:
            self.transform(node, v, name, 0, block, c)  # type: ignore[arg-type]
        self.blocked.setdefault(v, (name, block))
        self.twins[v, block] = name
        return name

    def need_plain(self, v: str, node: Node) -> None:
        """Make NCHW value ``v`` exist (a transform back from its blocked twin)."""
        if v in self.plain:
            return
        src, block = self.blocked[v]
        self.transform(node, src, v, block, 0, self.values[v].type.shape[1])  # type: ignore[arg-type]
        self.plain.add(v)

    def in_block(self, node: Node) -> int | None:
        """The block a conv's input already has (None: NCHW), which the conv keeps."""
        x = node.inputs[0]
        return self.blocked[x][1] if x in self.blocked else None

    def wanted_block(self, node: Node) -> int | None:
        """The output block of conv ``node`` that needs no transform: the block of the
        blocked value its output meets at a binary lane-wise op, following the output
        through unary elementwise ops of one user; else its input's block."""
        v = node.outputs[0]
        while len(self.users.get(v, ())) == 1 and v not in self.graph.output_names:
            user = self.users[v][0]
            if lanewise_nary(user):
                others = [i for i in user.inputs if i != v and i in self.blocked]
                if others:
                    return self.blocked[others[0]][1]
                break
            if len(user.inputs) != 1 or get_op(user.op).kind != ELEMWISE:
                break
            v = user.outputs[0]
        return self.in_block(node)

    def emit(
        self, node: Node, op: str, xb: str, weights: np.ndarray, block: int, **attrs: Any
    ) -> None:
        """Emit blocked conv ``op`` of ``node`` on blocked input ``xb``: its packed
        ``weights`` and bias (per ``block`` output channels) as params, its output blocked."""
        inputs = [xb, self.add_param(f"{node.inputs[1]}_nchwc", weights)]
        if len(node.inputs) > 2:
            bias = pack_nchwc_bias(self.params[node.inputs[2]], block)
            inputs.append(self.add_param(f"{node.inputs[2]}_nchwc", bias))
        out = node.outputs[0]
        t = self.values[out].type
        n, c, h, w = t.shape
        shape = (n, blocks(c, block), h, w, block)  # type: ignore[arg-type]
        ob = self.add_value(self.fresh(f"{out}_nchw{block}c"), shape, t.dtype)
        a = node.attrs
        geometry = {k: tuple(a[k]) for k in ("strides", "pads", "dilations")}
        attrs = {**geometry, **attrs}
        self.nodes.append(replace(node, op=op, inputs=tuple(inputs), outputs=(ob,), attrs=attrs))
        self.blocked[out] = (ob, block)
        self.changed = True

    def conv(self, node: Node, w: ConvWorkload, ic_bn: int, oc_bn: int) -> None:
        ic_bn = self.in_block(node) or ic_bn
        xb = self.to_blocked(node.inputs[0], ic_bn, node)
        weights = pack_nchwc_weights(self.params[node.inputs[1]], ic_bn, oc_bn)
        self.emit(node, "conv_nchwc", xb, weights, oc_bn, in_channels=w.C, channels=w.O)

    def grouped(self, node: Node) -> bool:
        """Emit a grouped conv (neither one group nor depthwise) blocked, where every group's
        input and output channels are whole blocks; False otherwise. Its input keeps its
        block where that divides a group's channels (else it is re-blocked); a plain input
        is blocked only for a group of at least a register of output channels."""
        g = grouped_count(node, self.graph)
        if g is None:
            return False
        x = node.inputs[0]
        w = self.params[node.inputs[1]]
        O, c_group = w.shape[0], w.shape[1]
        o_group = O // g
        ic_bn = dividing(c_group, self.in_block(node))
        oc_bn = dividing(o_group, self.wanted_block(node))
        if ic_bn is None or oc_bn is None or (x not in self.blocked and o_group < target_lanes()):
            return False
        if oc_bn < target_lanes() and is_pointwise(w.shape, node.attrs):
            # NCHW's grouped 1x1 template vectorizes along the pixels instead: ShuffleNet
            # v1's 4-group convs (68 channels a group) ran in half-register blocks on AVX2
            # (AVX-512's blocks do not divide 68: NCHW there), 0.26-0.28 ms each at 14x14;
            # in NCHW the model took 6.9 ms instead of 10.6 (one thread, Zen 3)
            return False
        xb = self.to_blocked(x, ic_bn, node)
        weights = pack_nchwc_weights(w, ic_bn, oc_bn)
        self.emit(
            node, "conv_nchwc", xb, weights, oc_bn, in_channels=c_group * g, channels=O, groups=g
        )
        return True

    def depthwise(self, node: Node) -> bool:
        """Emit a depthwise conv (one filter per channel) blocked as its input is; False if
        it is not one or its input is not blocked (a transform just for it would cost
        more than the blocked kernel saves)."""
        x = node.inputs[0]
        if x not in self.blocked or not is_depthwise(node, self.graph):
            return False
        xb, block = self.blocked[x]
        weights = pack_nchwc_depthwise_weights(self.params[node.inputs[1]], block)
        channels = self.values[node.outputs[0]].type.shape[1]
        self.emit(node, "dwconv_nchwc", xb, weights, block, channels=channels)
        return True

    def lanewise(self, node: Node) -> bool:
        """Emit ``node`` on blocked operands if it reads them lane for lane; False if not."""
        if len(node.outputs) != 1 or not any(i in self.blocked for i in node.inputs):
            return False
        out = node.outputs[0]
        t = self.values[out].type
        if t.ndim != 4:
            return False
        block = next(self.blocked[i][1] for i in node.inputs if i in self.blocked)
        padded = t.shape[1] % block != 0
        if node.op in ("max_pool", "avg_pool") and len(node.attrs["kernel"]) == 2:
            op = f"{node.op}_nchwc"
            args, node = [self.blocked[node.inputs[0]][0]], replace(node, op=op)
        elif len(node.inputs) == 1 and get_op(node.op).kind == ELEMWISE:
            if padded and node.op not in FINITE_AT_ZERO:
                return False
            args = [self.blocked[node.inputs[0]][0]]
        elif lanewise_nary(node):
            if not all(self._takes(i, t) for i in node.inputs):
                return False
            args = [self._operand(i, t, block, node) for i in node.inputs]
        elif node.op == "concat" and node.attrs["axis"] == 1:  # whole blocks: a block concat
            if not all(self._whole_blocks(i, block) for i in node.inputs):
                return False
            args = [self.to_blocked(i, block, node) for i in node.inputs]
        else:
            return False
        n, c, h, w = t.shape
        ob = self.add_value(
            self.fresh(f"{out}_nchw{block}c"), (n, blocks(c, block), h, w, block), t.dtype
        )  # type: ignore[arg-type]
        self.nodes.append(replace(node, inputs=tuple(args), outputs=(ob,)))  # type: ignore[arg-type]
        self.blocked[out] = (ob, block)
        return True

    def _whole_blocks(self, v: str, block: int) -> bool:
        """Whether value ``v`` is blocked and its channels are whole ``block`` s (a concat of
        such values along the channels is a concat of their blocks; SqueezeNet's fire
        modules went back to NCHW and back for each, 0.26 ms of its 5.7 at 2 threads)."""
        return v in self.blocked and self.values[v].type.shape[1] % block == 0

    def _takes(self, v: str, out: TensorType) -> bool:
        """Whether a binary op's operand ``v`` can be read blocked: a blocked value of the
        output's shape (of any block), or a constant that is a scalar or one value per
        channel."""
        if v in self.blocked:
            return self.values[v].type.shape == out.shape
        if v not in self.params:
            return False
        data = self.params[v]
        c = out.shape[1]
        return data.size == 1 or (
            data.ndim >= 3 and data.shape[-3:] == (c, 1, 1) and data.size == c
        )

    def _operand(self, v: str, out: TensorType, block: int, node: Node) -> str:
        """The blocked form of an operand :meth:`_takes`: its twin in ``block`` (re-blocked
        if it has another), the scalar, or the per-channel constant re-laid out."""
        if v in self.blocked:
            return self.to_blocked(v, block, node)
        data = self.params[v]
        if data.size == 1:
            return v
        c = out.shape[1]
        packed = pack_nchwc_bias(data.reshape(c), block).reshape(1, -1, 1, 1, block)
        return self.add_param(f"{v}_nchw{block}c", packed)

    def other(self, node: Node) -> None:
        for i in node.inputs:
            if i in self.blocked:
                self.need_plain(i, node)
        self.nodes.append(node)
        self.plain.update(node.outputs)

    def finish(self) -> Graph:
        for v in self.graph.output_names:
            if v in self.blocked:
                self.need_plain(v, Node("copy", f"{v}_out", (), (), {}, "Output"))
        live = {i for n in self.nodes for i in n.inputs} | set(self.graph.output_names)
        made = {o for n in self.nodes for o in n.outputs} | live | set(self.graph.input_names)
        params = {p: a for p, a in self.params.items() if p in live}
        values = {k: v for k, v in self.values.items() if k in made}
        return replace(self.graph, nodes=self.nodes, params=params, values=values)


def alter_conv_layout_with(choose: BlockChooser) -> Pass:
    """The pass (named ``alter_conv_layout`` whatever the chooser) with blocks from
    ``choose`` (``(ConvWorkload, in_block, want) -> (ic_bn, oc_bn) | None``: module doc)."""

    def alter_conv_layout(graph: Graph) -> Graph:
        r = _Rewriter(graph)
        for node in graph.nodes:
            w = conv_workload(node, graph)
            picked = None
            if w is not None:
                picked = choose(w, r.in_block(node), r.wanted_block(node))
            if picked is not None:
                r.conv(node, w, *picked)  # type: ignore[arg-type]
            elif not (r.depthwise(node) or r.grouped(node) or r.lanewise(node)):
                r.other(node)
        return r.finish() if r.changed else graph

    return graph_pass(alter_conv_layout)


# Block the CPU convolutions by :func:`default_blocks` (module doc).
alter_conv_layout = alter_conv_layout_with(default_blocks)
