"""An optional ONNX rewrite before import: DequantizeLinear -> Conv/MatMul -> QuantizeLinear
becomes QLinearConv / QLinearMatMul, so the product runs in integers.

A QDQ model (what ``onnxruntime.quantization.quantize_static`` writes in QDQ form)
keeps every product in float between a dequantize and a quantize. Run as written,
Ember matches onnxruntime with graph optimizations off bit for bit; onnxruntime's
default optimizations fuse these triples into integer kernels, whose requantization
can round a near-tie the other way. :func:`fuse_qdq` makes the same fusion, so the
product reads 8-bit data and accumulates exactly in int32. It fuses only what it can
prove equal up to that rounding: per-tensor activations, weights per tensor or per
output channel (axis 0 for Conv, the last axis of a 2-D MatMul operand), a Conv bias
stored as int32 with zero point 0 and scale exactly ``x_scale * w_scale``, and a
product whose only consumer is the QuantizeLinear. Everything else stays as it was.

Takes and gives an ``onnx.ModelProto`` (a new one; the input is not modified).
"""

from __future__ import annotations

from typing import Any

import numpy as np

INT8 = (np.dtype("int8"), np.dtype("uint8"))


class _Graph:
    """Producers, consumers and initializers of an ONNX graph, for pattern matching."""

    def __init__(self, graph: Any) -> None:
        # optional dependency: onnx
        from onnx import numpy_helper

        self.g = graph
        self.init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.producer = {o: n for n in graph.node for o in n.output}
        self.consumers: dict[str, list[Any]] = {}
        for n in graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.outputs = {o.name for o in graph.output}

    def dq(self, name: str) -> Any | None:
        n = self.producer.get(name)
        return n if n is not None and n.op_type == "DequantizeLinear" else None

    def only_consumer(self, name: str, node: Any) -> bool:
        return name not in self.outputs and self.consumers.get(name, []) == [node]

    def const(self, node: Any, i: int) -> np.ndarray | None:
        return self.init.get(node.input[i]) if i < len(node.input) and node.input[i] else None


def _axis(node: Any) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 1)


def _qparams(g: _Graph, node: Any, want_axis: int | None, ndim: int) -> bool:
    """A Q/DQ node quantizes to 8 bits per tensor, or per ``want_axis`` when given."""
    if any(a.name == "block_size" and a.i for a in node.attribute):
        return False
    scale, zp = g.const(node, 1), g.const(node, 2)
    if scale is None or scale.dtype != np.float32 or zp is None or zp.dtype not in INT8:
        return False
    if scale.size == 1:
        return True
    return want_axis is not None and scale.ndim == 1 and _axis(node) % ndim == want_axis


def _conv_inputs(g: _Graph, conv: Any, q: Any) -> list[str] | None:
    dx, dw = g.dq(conv.input[0]), g.dq(conv.input[1])
    w = g.const(dw, 0) if dw is not None else None
    if dx is None or dw is None or w is None or w.dtype not in INT8 or not _qparams(g, dx, None, 4):
        return None
    if not _qparams(g, dw, 0, w.ndim) or not _qparams(g, q, None, 1):
        return None
    ins = [*dx.input[:3], *dw.input[:3], *q.input[1:3]]
    if len(conv.input) > 2 and conv.input[2]:
        db = g.dq(conv.input[2])
        b = g.const(db, 0) if db is not None else None
        if db is None or b is None or b.dtype != np.int32 or not _bias_scale_fits(g, db, dx, dw):
            return None
        ins.append(db.input[0])
    return ins


def _bias_scale_fits(g: _Graph, db: Any, dx: Any, dw: Any) -> bool:
    """The int32 bias is in units of ``x_scale * w_scale`` with zero point 0."""
    zp = g.const(db, 2)
    if zp is not None and np.any(zp != 0):
        return False
    sb, sx, sw = g.const(db, 1), g.const(dx, 1), g.const(dw, 1)
    if sb is None or sx is None or sw is None or sx.size != 1:
        return False
    want = (sx.reshape(()) * sw).astype(np.float32).reshape(-1)
    got = sb.astype(np.float32).reshape(-1)
    return got.size in (1, want.size) and bool(np.all(got == want))


def _matmul_inputs(g: _Graph, mm: Any, q: Any) -> list[str] | None:
    da, db = g.dq(mm.input[0]), g.dq(mm.input[1])
    if da is None or db is None or not _qparams(g, da, None, 2):
        return None
    b = g.const(db, 0)
    per_col = 1 if b is not None and b.ndim == 2 else None
    if not _qparams(g, db, per_col, 2) or not _qparams(g, q, None, 1):
        return None
    return [*da.input[:3], *db.input[:3], *q.input[1:3]]


_FUSIONS = {"Conv": ("QLinearConv", _conv_inputs), "MatMul": ("QLinearMatMul", _matmul_inputs)}


def fuse_qdq(model: Any) -> Any:
    """A copy of ``model`` with each DQ -> Conv/MatMul -> Q triple as one QLinear op."""
    # optional dependency: onnx
    from onnx import helper

    out = type(model)()
    out.CopyFrom(model)
    g = _Graph(out.graph)
    new_nodes, dropped = [], set()
    for node in out.graph.node:
        fusion = _FUSIONS.get(node.op_type)
        qs = g.consumers.get(node.output[0], []) if fusion else []
        q = qs[0] if len(qs) == 1 and qs[0].op_type == "QuantizeLinear" else None
        if fusion is None or q is None or not g.only_consumer(node.output[0], q):
            new_nodes.append(node)
            continue
        ins = fusion[1](g, node, q)
        if ins is None:
            new_nodes.append(node)
            continue
        fused = helper.make_node(fusion[0], ins, [q.output[0]], name=f"{node.name}_qlinear")
        fused.attribute.extend(a for a in node.attribute)
        new_nodes.append(fused)
        dropped.add(id(q))
    kept = [n for n in new_nodes if id(n) not in dropped]
    del out.graph.node[:]
    out.graph.node.extend(_drop_dead(kept, {o.name for o in out.graph.output}))
    return out


def _drop_dead(nodes: list[Any], outputs: set[str]) -> list[Any]:
    """Remove nodes whose outputs nobody reads (the dequantize nodes a fusion bypassed)."""
    while True:
        used = {i for n in nodes for i in n.input} | outputs
        alive = [n for n in nodes if any(o in used for o in n.output)]
        if len(alive) == len(nodes):
            return nodes
        nodes = alive
