"""A compiled model's static memory plan: every intermediate value a view into a few
reusable byte buffers, and concatenations that cost no copy.

A buffer returns to the pool after the last step that reads its value, and a step's
outputs are placed before its inputs are released, so a kernel never reads and writes
the same memory. Inputs, outputs and params are the workspace's own
(:mod:`ember.graph.workspace`), not planned here.

A CPU concatenation whose operands each fill one contiguous slab of its result (a
channel concat at batch 1, in NCHW or blocked NCHW[c]: SqueezeNet's fire modules,
Inception's branches) is planned away: each operand is a view of its slab of the
result, so the kernels producing the operands write the result in place and the concat
step has nothing left to do (:func:`absorbed_concats` names those steps). An operand
is placed so only when it is an intermediate that no other absorbed concat takes; the
result's buffer then lives from the first operand's step to the last read of any of
them. SqueezeNet 1.1 spent 5% of its time (0.40 of 8.1 ms, one thread) copying them.

A CPU reshape step (Reshape, Flatten, Squeeze, Unsqueeze: row-major, so the bytes do not
move) whose result is an intermediate is a view of its operand when that operand is a
graph input or a planned intermediate (:func:`aliased_reshapes`): its step does nothing
and the operand's buffer lives until the last read of either. An image model's input,
reshaped to blocks of one channel for its first conv, was copied once a run (0.03 ms of
MobileNetV2's 3.7 at two threads).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.frontend.graph import Graph
from ember.frontend.narrow_dtypes import storage_dtype
from ember.graph.step import Step
from ember.runtime.aligned import CACHE_LINE, aligned_empty

# an absorbed concat's operand: (the concat's result, the operand's byte offset in it)
Slab = tuple[str, int]


def _slab_offsets(out: tuple[int, ...], ins: list[tuple[int, ...]], itemsize: int) -> list[int]:
    """Byte offsets of operands ``ins`` in their concatenation ``out`` where each is one
    contiguous slab of it (all dims before the concat axis are 1); else []."""
    diff = [a for a in range(len(out)) if any(s[a] != out[a] for s in ins)]
    if len(diff) > 1 or any(len(s) != len(out) for s in ins):
        return []
    axis = diff[0] if diff else 0
    if sum(s[axis] for s in ins) != out[axis] or int(np.prod(out[:axis], dtype=np.int64)) != 1:
        return []
    offsets, at = [], 0
    for s in ins:
        offsets.append(at)
        at += int(np.prod(s, dtype=np.int64)) * itemsize
    return offsets


def _on_cpu(step: Step) -> bool:
    target = getattr(step.kernel, "target", None)
    return getattr(target, "kind", None) == "llvm" and hasattr(step.kernel, "bind")


def absorbed_concats(graph: Graph, steps: Sequence[Step]) -> tuple[dict[str, Slab], set[int]]:
    """The operands placed in their concat's result (see the module notes), and the
    indices of the concat steps that no longer copy."""
    keep = set(graph.params) | set(graph.input_names) | set(graph.output_names)
    producer = {v: k for k, st in enumerate(steps) for v in st.outputs}
    slabs: dict[str, Slab] = {}
    absorbed: set[int] = set()
    for k, st in enumerate(steps):
        if getattr(st.kernel, "op", None) != "concat" or not _on_cpu(st) or len(st.outputs) != 1:
            continue
        out, ins = st.outputs[0], list(st.inputs)
        if out in keep or len(set(ins)) != len(ins) or any(v in keep or v in slabs for v in ins):
            continue
        if any(v not in producer or not _on_cpu(steps[producer[v]]) for v in ins):
            continue
        if any(producer[v] in absorbed for v in ins):  # an operand that is itself a view
            continue
        types = [graph.values[v].type for v in (out, *ins)]
        if len({t.dtype for t in types}) != 1 or not all(t.is_static for t in types):
            continue
        itemsize = storage_dtype(types[0].dtype).itemsize
        shapes = [tuple(int(d) for d in t.shape) for t in types]
        offsets = _slab_offsets(shapes[0], shapes[1:], itemsize)
        if offsets:
            slabs.update({v: (out, off) for v, off in zip(ins, offsets)})
            absorbed.add(k)
    return slabs, absorbed


def aliased_reshapes(
    graph: Graph, steps: Sequence[Step], slabs: dict[str, Slab] | None = None
) -> dict[int, tuple[str, str]]:
    """The reshape steps whose result is a view of their operand (see the module notes):
    step index -> (result, operand). ``slabs`` (concat operands placed in their result)
    are left alone on both sides."""
    slabs = slabs or {}
    outputs, inputs = set(graph.output_names), set(graph.input_names)
    keep = set(graph.params) | inputs | outputs
    aliased: dict[int, tuple[str, str]] = {}
    results: set[str] = set()
    for k, st in enumerate(steps):
        if getattr(st.kernel, "op", None) != "reshape" or not _on_cpu(st):
            continue
        if len(st.inputs) != 1 or len(st.outputs) != 1:
            continue
        (src,), (out,) = st.inputs, st.outputs
        if out in keep or out in slabs or src in slabs or src in results or src in outputs:
            continue
        if src in keep and src not in inputs:  # a param: folded before it gets here
            continue
        a, b = graph.values[src].type, graph.values[out].type
        if a.dtype != b.dtype or not (a.is_static and b.is_static) or a.size != b.size:
            continue
        aliased[k] = (out, src)
        results.add(out)
    return aliased


def plan_memory(
    graph: Graph,
    steps: Sequence[Step],
    slabs: dict[str, Slab] | None = None,
    aliases: dict[int, tuple[str, str]] | None = None,
) -> tuple[dict[str, np.ndarray], int]:
    """Views for the intermediates over reused buffers, ``slabs`` placed in their concat's
    result and each of ``aliases`` (:func:`aliased_reshapes`) a view of its operand where
    the operand is planned here (a graph input's is the workspace's to make); also returns
    the bytes allocated."""
    slabs = slabs or {}
    views_of = dict((aliases or {}).values())  # result -> operand
    keep = set(graph.params) | set(graph.input_names) | set(graph.output_names)
    last_use: dict[str, int] = {}
    for k, st in enumerate(steps):
        for v in st.inputs:
            last_use[v] = k
    for out, src in views_of.items():  # an operand lives as long as its view is read
        last_use[src] = max(last_use.get(src, -1), last_use.get(out, -1))
    for v, (out, _) in slabs.items():  # a result lives as long as any of its operands
        last_use[out] = max(last_use.get(out, -1), last_use.get(v, -1))
    free: list[np.ndarray] = []
    views: dict[str, np.ndarray] = {}
    owner: dict[str, np.ndarray] = {}
    total = 0

    def place(v: str) -> np.ndarray:
        nonlocal free, total
        t = graph.values[v].type
        store = storage_dtype(t.dtype)
        need = max(t.size * store.itemsize, 1)
        fits = [b for b in free if b.nbytes >= need]
        buf = min(fits, key=lambda b: b.nbytes) if fits else None
        if buf is None:
            buf = aligned_empty(-(-need // CACHE_LINE) * CACHE_LINE)
            total += need
        else:
            free = [b for b in free if b is not buf]
        owner[v] = buf
        views[v] = buf[: t.size * store.itemsize].view(store).reshape(t.shape)  # type: ignore[arg-type]
        return buf

    for k, st in enumerate(steps):
        for v in st.outputs:
            if v in keep or v in views:
                continue
            if v in views_of:
                if views_of[v] in views:
                    views[v] = views[views_of[v]].reshape(graph.values[v].type.dims)
                continue
            if v in slabs:
                out, offset = slabs[v]
                buf = owner[out] if out in owner else place(out)
                t = graph.values[v].type
                store = storage_dtype(t.dtype)
                nbytes = t.size * store.itemsize
                views[v] = buf[offset : offset + nbytes].view(store).reshape(t.shape)  # type: ignore[arg-type]
                continue
            place(v)
        for v in [v for v in owner if last_use.get(v, -1) <= k]:
            free.append(owner.pop(v))
    return views, total
