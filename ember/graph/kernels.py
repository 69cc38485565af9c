"""Graph kernels: one compiled module per (op, attrs, input types, target), cached per process
and, for CPU targets, on disk across processes (``ember/kernel_cache.py``).

``ember.graph.compile`` asks for a kernel per node; the importer's constant folding
asks for one when a constant is too large for the interpreter. A kernel is the
op's compute (``frontend/to_te.py``), or the compute of the target's strategy, under
the target's schedule for the group, built with :func:`ember.build`: every target
question goes to the group's :class:`~ember.backend.Backend`. It is called with the
input arrays followed by preallocated output arrays.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.backend import Backend, get_backend
from ember.driver import build
from ember.frontend.graph import Node, TensorType
from ember.frontend.narrow_dtypes import storage_dtype
from ember.frontend.ops.registry import get_op
from ember.graph import kernel_cache
from ember.graph.group_tasks import tuned_group
from ember.graph.groups import (  # noqa: F401 - group_to_te re-exported
    GroupIO,
    group_to_te,
    static_shape,
)
from ember.runtime.cpu import CPUModule
from ember.runtime.module import Module
from ember.target import Target
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.transform.context import PassContext
from ember.tuner.active_records import answers_unchanged, tracking_consults
from ember.tuner.dispatch import active_fingerprint
from ember.tuner.strategy import Implementation


@dataclass
class Kernel:
    """A built kernel and what it takes and gives."""

    op: str
    in_types: tuple[TensorType, ...]
    out_types: tuple[TensorType, ...]
    module: Module
    target: Target
    # outputs the module writes as shape (1,) though they are 0-d (a GPU thread needs an axis)
    scalar_outputs: tuple[int, ...] = ()

    def __call__(self, *arrays: Any) -> None:
        # A CUDA module runs on the GPU, or in the SIMT emulator with EMBER_CUDA_EMULATE=1;
        # without either it raises DeviceError saying so.
        if self.scalar_outputs:
            args = list(arrays)
            for k in self.scalar_outputs:
                pos = len(self.in_types) + k
                args[pos] = args[pos].reshape(1)  # a view: the kernel writes the caller's array
            arrays = tuple(args)
        self.module(*arrays)

    def bind(self, arrays: Sequence[np.ndarray]) -> Any:
        """A call of this kernel on ``arrays`` (inputs, then outputs): see :func:`bind_kernel`."""
        return bind_kernel(self, arrays)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Allocate outputs, run, return them (for folding and tests); a narrow type's
        arrays (in and out) in its storage (``frontend/narrow_dtypes.py``)."""
        outs = [np.empty(static_shape(t), dtype=storage_dtype(t.dtype)) for t in self.out_types]
        self(*inputs, *outs)
        return outs


# key -> the kernels built under it, each with the record questions its build asked
_CACHE: dict[tuple[Any, ...], list[tuple[list[Any], Kernel]]] = {}


def _freeze(v: Any) -> Any:
    """``v`` as a hashable key part that tells apart every value a kernel could bake in.

    Floats are keyed by their IEEE bits: ``0.0 == -0.0`` (and hash alike), and a NaN never
    equals itself, so keying by value would let two LeakyRelu ``alpha`` signs share one
    kernel and make a NaN attribute miss every time. Arrays are keyed by dtype, shape and a
    digest of their bytes (their ``repr`` elides the middle of a large array)."""
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, (float, np.floating)):
        return ("float", np.dtype(type(v)).name, np.asarray(v).tobytes().hex())
    if isinstance(v, np.ndarray):
        data = np.ascontiguousarray(v)
        return ("array", data.dtype.str, data.shape, hashlib.sha256(data.tobytes()).hexdigest())
    if isinstance(v, dict):
        return ("dict", tuple(sorted((k, _freeze(x)) for k, x in v.items())))
    return v


def kernel_key(
    op: str, attrs: dict[str, Any], in_types: Sequence[TensorType], target: str
) -> tuple[Any, ...]:
    """The in-memory cache key of one op's kernel: equal keys compile to the same code, so a model
    with repeated layers builds each kernel once."""
    return (op, tuple(sorted((k, _freeze(v)) for k, v in attrs.items())), tuple(in_types), target)


def get_kernel(
    op: str,
    attrs: dict[str, Any],
    in_types: Sequence[TensorType],
    target: str | Target | Backend = "llvm",
) -> Kernel:
    """The compiled kernel of ``op`` on ``in_types`` for ``target`` (built once per process):
    a group of one node, for folding and for graphs compiled without fusion."""
    g = node_group(op, attrs, in_types)
    return get_group_kernel(g.nodes, g.inputs, g.outputs, g.types, target)


def node_group(op: str, attrs: dict[str, Any], in_types: Sequence[TensorType]) -> GroupIO:
    """One op on ``in_types`` as a group of one node, its values renamed by position."""
    out_types = get_op(op).infer_types(in_types, attrs)
    ins = tuple(f"in{i}" for i in range(len(in_types)))
    outs = tuple(f"out{k}" for k in range(len(out_types)))
    node = Node(op, op, ins, outs, dict(attrs), op)
    types = {**dict(zip(ins, in_types)), **dict(zip(outs, out_types))}
    return GroupIO((node,), ins, outs, types)


def _as_vector(t: Tensor) -> Tensor:
    """A 0-d tensor as shape (1,), so a GPU kernel has an axis to put a thread on."""
    return te.compute((1,), lambda i: t[()], name=f"{t.op.name}_1", tag="injective")


def clear_cache() -> None:
    """Forget the in-memory kernels, so tests and tuning runs start from a cold cache."""
    _CACHE.clear()


def group_key(
    nodes: Sequence[Node],
    inputs: Sequence[str],
    outputs: Sequence[str],
    types: dict[str, TensorType],
) -> tuple[Any, ...]:
    """A cache key naming a group's computation without its value names."""
    local = {v: k for k, v in enumerate(inputs)}
    body = []
    for node in nodes:
        refs = tuple(local[i] for i in node.inputs)
        for o in node.outputs:
            local[o] = len(local)
        body.append(kernel_key(node.op, node.attrs, (), "")[:2] + (refs,))
    return (tuple(body), tuple(types[v] for v in inputs), tuple(local[o] for o in outputs))


def get_group_kernel(
    nodes: Sequence[Node],
    inputs: Sequence[str],
    outputs: Sequence[str],
    types: dict[str, TensorType],
    target: str | Target | Backend = "llvm",
) -> Kernel:
    """The compiled kernel of a fused group (one node is a group of one)."""
    backend = get_backend(target)
    tgt = backend.target
    fingerprint = active_fingerprint()
    key, disk = group_keys(nodes, inputs, outputs, types, backend)
    for asked, hit in _CACHE.get(key, ()):
        if answers_unchanged(asked):
            return hit
    module = kernel_cache.load(disk) if disk else None
    scalars: tuple[int, ...] = ()
    consults: list[Any] = [(("fingerprint",), fingerprint)]  # a loaded module's: unknown
    if module is None:
        module, scalars, consults = _build_group(nodes, inputs, outputs, types, backend)
        if disk:
            kernel_cache.store(disk, module)
    kern = Kernel(
        "+".join(n.op for n in nodes),
        tuple(types[v] for v in inputs),
        tuple(types[v] for v in outputs),
        module,
        tgt,
        scalars,
    )
    _CACHE.setdefault(key, []).append((consults, kern))
    return kern


def group_keys(
    nodes: Sequence[Node],
    inputs: Sequence[str],
    outputs: Sequence[str],
    types: dict[str, TensorType],
    backend: Backend,
) -> tuple[tuple[Any, ...], str | None]:
    """A group's in-process cache key, and its disk cache entry's name (None where the
    backend's kernels are not cached on disk), under the records and PassContext in force."""
    fingerprint = active_fingerprint()
    key = (
        "group",
        group_key(nodes, inputs, outputs, types),
        str(backend.target),
        bool(fingerprint),  # built under records or not; which ones: the consults
        context_key(),
        backend.strategy_key(sorted({n.op for n in nodes})),
    )
    disk_key = (*key[:3], fingerprint, *key[4:])  # on disk: keyed by every record in force
    disk = kernel_cache.entry_key(disk_key, backend) if kernel_cache.enabled(backend) else None
    return key, disk


def _build_group(
    nodes: Sequence[Node],
    inputs: Sequence[str],
    outputs: Sequence[str],
    types: dict[str, TensorType],
    backend: Backend,
) -> tuple[Module, tuple[int, ...], list[Any]]:
    """The group's module, its 0-d outputs written as shape (1,), and the questions its
    strategies and schedules asked of the open record blocks (with their answers): the
    kernel is reused under other records that answer them alike."""
    scalars: tuple[int, ...] = ()
    with tracking_consults() as consults:
        tuned = tuned_group(GroupIO(tuple(nodes), tuple(inputs), tuple(outputs), types), backend)
        if tuned is not None:  # an auto-scheduling record of the group: its steps
            sch, tensors = tuned
        else:
            anchors: list[Implementation] = []
            placeholders, outs = group_to_te(nodes, inputs, outputs, types, backend, anchors)
            if backend.scalars_as_vectors:
                scalars = tuple(k for k, t in enumerate(outs) if t.ndim == 0)
            outs = [_as_vector(t) if k in scalars else t for k, t in enumerate(outs)]
            sch, tensors = backend.schedule(outs, anchors), [*placeholders, *outs]
    ops = "_".join(dict.fromkeys(n.op for n in nodes))[:40]
    module = build(sch, tensors, target=backend.target, name=f"k_{ops}_{len(_CACHE)}")
    return module, scalars, consults


def context_key() -> tuple[Any, ...]:
    """What of the current PassContext changes the code a build makes: a kernel built
    with a pass disabled, another opt level or other options is another kernel."""
    ctx = PassContext.current()
    return (
        ctx.opt_level,
        tuple(sorted(ctx.required_pass)),
        tuple(sorted(ctx.disabled_pass)),
        repr(sorted(ctx.config.items())),
    )


def bind_kernel(kernel: Any, arrays: Sequence[np.ndarray]) -> Any:
    """A call of ``kernel`` (a compiled or loaded graph kernel: ``module``, ``scalar_outputs``,
    callable) on ``arrays`` taking no arguments: a CPU kernel checks them once, now
    (:meth:`ember.runtime.module.Function.bind`); a GPU kernel, which may move them, or one
    with 0-d outputs passed as views, checks them on each call."""
    if isinstance(kernel.module, CPUModule) and not kernel.scalar_outputs:
        return kernel.module.get_function(kernel.module.entry_name).bind(arrays)
    return functools.partial(kernel, *arrays)
