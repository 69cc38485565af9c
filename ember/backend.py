"""Backends: one object per target that answers every question about that target.

A parsed :class:`~ember.target.Target` becomes its :class:`Backend` once
(:func:`get_backend`), and the compile carries that object, never a kind string:
``ember.build`` asks it for its TIR passes and its code generator, ``ember.compile``
for its graph passes, its operator strategies and its generic schedule, the kernel
cache whether its code may be cached on disk, the artifact writer how to store its
modules. Code outside the backends does not branch on a target kind, so a new target
is one new module: a ``Backend`` subclass registered with :func:`register_backend`
(``tests/e2e/test_toy_backend.py`` registers the reference interpreter as a target).

This is the base layer: it imports nothing of Ember but the errors and the target,
and the built-in backends (``codegen_llvm/backend.py``, ``codegen_cuda/backend.py``)
register through loaders that the package root fills, as the tuner's template
loaders are, so this module never names a code generator.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ember.errors import ArgumentError
from ember.target import TARGET_KINDS, KindInfo, Target, register_target_kind

if TYPE_CHECKING:  # types only: the backends sit above the IR and the frontend
    from pathlib import Path

    from ember.frontend.graph import TensorType
    from ember.runtime.module import Module
    from ember.runtime.step_loop import StepLoop
    from ember.tir.schedule.schedule import Schedule
    from ember.tir.stmt import PrimFunc
    from ember.tir.te.tensor import Tensor
    from ember.tir.transform.context import PassContext
    from ember.tir.transform.pipeline import Pass
    from ember.tuner.strategy import Implementation, StrategyTable


class ArtifactPacker(Protocol):
    """How ``CompiledModel.export`` stores a target's kernels: :meth:`add` files a module
    (once) and gives its index, ``members`` are the archive files made so far."""

    members: dict[str, bytes]

    def add(self, module: Module, where: str) -> int: ...


class ArtifactLoader(Protocol):
    """How loading an ``.ember`` file gets a target's kernels back: how many modules the
    file holds, and module ``k`` rebuilt for this machine."""

    def count(self) -> int: ...

    def module(self, k: int) -> Module: ...


class Backend:
    """The answers for one target. Subclasses set :attr:`kind` and override what differs;
    the defaults describe a target with no passes, strategies or caches of its own.

    A backend is made once per canonical target string (:func:`get_backend`) and shared,
    so it holds no per-compile state."""

    kind: str = ""
    # 0-d outputs are written as shape (1,) (a GPU thread needs an axis to stand on)
    scalars_as_vectors: bool = False
    # code for a GPU: it runs on a device this process may lack (device_available) or in
    # the SIMT emulator, and artifacts store it per architecture (``--arch``)
    gpu: bool = False
    # the operator strategies (``tuner/strategy.py``'s StrategyTable), or None for a target
    # whose every node takes its op's generic compute and that names no tuning task
    strategy: StrategyTable | None = None

    def __init__(self, target: Target) -> None:
        self.target = target

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.target)!r})"

    # -- TIR: what ember.build runs after the common passes ----------------------
    def passes(self, ctx: PassContext) -> list[Pass]:
        """This target's own TIR passes, run after the common list by the same runner."""
        return []

    def build(self, funcs: Sequence[PrimFunc], ctx: PassContext) -> Module:
        """Compile lowered functions (through :meth:`passes`) into one callable module."""
        raise NotImplementedError(f"{type(self).__name__} has no code generator")

    # -- graphs: what ember.compile asks -----------------------------------------
    def graph_passes(self, common: Sequence[Pass]) -> tuple[Pass, ...]:
        """The graph passes ``ember.compile`` and ``ember.extract_tasks`` run, in order:
        ``common`` (``frontend/passes``' list) with this target's own placed among them."""
        return tuple(common)

    def compute(
        self, op: str, args: list[Tensor], attrs: dict[str, Any]
    ) -> tuple[list[Tensor], Implementation] | None:
        """The outputs of this target's best strategy implementation of ``op`` on ``args``
        and that implementation (TVM's ``OpStrategy``: implementations by priority, each a
        ``tir/topi`` compute paired with its schedule and tuning task), or None where the
        op's generic compute (``frontend/ops``) serves."""
        if self.strategy is None:
            return None
        return self.strategy.compute(op, args, attrs, self.target)

    def cannot_run(self, built_for: dict[str, Any]) -> str | None:
        """Why this machine cannot run code built for ``built_for`` (a library's recorded
        ``cpu`` section), or None: a CPU backend names the instructions it lacks."""
        return None

    def vector_lanes(self, dtype: str) -> int:
        """Elements of ``dtype`` in one vector register of this target (the CPU's; 1 where
        it has none), what register tiles and channel blocks are sized by."""
        return 1

    def tile_row_lanes(self, dtype: str) -> int:
        """Elements of ``dtype`` in one row of a GEMM-like register tile of this target,
        what weight panels are at most as wide as."""
        return self.vector_lanes(dtype)

    def schedule(self, outs: Sequence[Tensor], anchors: Sequence[Implementation] = ()) -> Schedule:
        """The schedule of a fused group computing ``outs``: each implementation in
        ``anchors`` (what :meth:`compute` returned for the group's nodes) schedules its
        own stages, this target's generic schedule the rest."""
        raise NotImplementedError(f"{type(self).__name__} has no graph schedule")

    def strategy_key(self, ops: Sequence[str]) -> tuple[Any, ...]:
        """What of this target's strategy tables decides the kernels of ``ops``: the names
        of the implementations that may take them, so a kernel cached before an
        implementation was registered is not reused after."""
        if self.strategy is None:
            return ()
        table = self.strategy
        return tuple(
            (op, tuple(i.name for i in table.implementations(op, self.target))) for op in ops
        )

    def task_for(
        self, op: str, in_types: Sequence[TensorType], attrs: dict[str, Any]
    ) -> tuple[Any, ...] | None:
        """``(template name, arguments)`` of the tuning task a node's kernel runs here, with
        ``{knob: value}`` third where the node fixes some knobs (``tuner.strategy.Task``), or
        None (``ember.extract_tasks``)."""
        if self.strategy is None:
            return None
        return self.strategy.task(op, in_types, attrs, self.target)

    # -- runtime and storage ----------------------------------------------------------
    def disk_cache_key(self) -> str | None:
        """What a kernel built here depends on beyond the target string (the machine the
        code is tuned for), or None when its kernels are not cached on disk."""
        return None

    def device_available(self) -> bool:
        """Whether modules built here can run in this process now."""
        return True

    def step_loop(self) -> StepLoop | None:
        """A native loop that calls a compiled model's bound kernels in order in one call
        (:mod:`ember.runtime.step_loop`), or None: the executor calls each from Python."""
        return None

    def load_templates(self) -> None:
        """Import this target's built-in tuning templates (the tuner asks on first lookup)."""

    def artifact_packer(self, archs: Sequence[str] | None, ptx: bool) -> ArtifactPacker | None:
        """How ``CompiledModel.export`` stores this target's kernels: an object with
        ``add(module, where) -> index``, ``members`` and what :meth:`artifact_manifest`
        reads, or None for shared objects (``Module.export_library``). ``archs`` and
        ``ptx`` choose GPU images, which a target without them refuses."""
        if archs is not None or not ptx:
            raise ArgumentError("export: archs= and ptx= apply to CUDA models only")
        return None

    def artifact_manifest(self, packer: ArtifactPacker) -> dict[str, Any]:
        """Sections this target adds to an ``.ember`` manifest (what the code needs)."""
        return {}

    def artifact_loader(
        self, manifest: dict[str, Any], members: dict[str, bytes], path: Path
    ) -> ArtifactLoader | None:
        """The reader of this target's kernels in a checked ``.ember`` file: an object with
        ``count()`` and ``module(k)``, or None for shared objects, after checking that this
        machine can run what the manifest says the code needs."""
        return None


_LOADERS: dict[str, Callable[[], type[Backend]]] = {}
_MADE: dict[str, Backend] = {}
_LOCK = threading.Lock()


def register_backend(
    kind: str,
    backend: type[Backend] | Callable[[], type[Backend]],
    info: KindInfo | None = None,
) -> None:
    """Make ``kind`` a target: ``backend`` is the class, or a function returning it (so a
    built-in backend's module loads on first use). ``info`` gives the options ``Target``
    accepts and the kind's facts; a built-in kind keeps its own when None."""
    if info is not None or kind not in TARGET_KINDS:
        register_target_kind(kind, info or KindInfo())
    if isinstance(backend, type):
        cls = backend
        _LOADERS[kind] = lambda: cls
    else:
        _LOADERS[kind] = backend
    with _LOCK:
        for key in [k for k, b in _MADE.items() if b.kind == kind or k.split()[0] == kind]:
            del _MADE[key]


def get_backend(target: str | Target | Backend) -> Backend:
    """The backend of ``target`` (one per canonical target string, made on first use)."""
    if isinstance(target, Backend):
        return target
    tgt = Target.parse(target)
    key = str(tgt)
    made = _MADE.get(key)
    if made is not None:
        return made
    loader = _LOADERS.get(tgt.kind)
    if loader is None:
        raise ArgumentError(f"no backend is registered for target kind {tgt.kind!r}")
    with _LOCK:
        made = _MADE.get(key)
        if made is None:
            made = _MADE[key] = loader()(tgt)
    return made


def backend_kinds() -> tuple[str, ...]:
    """The target kinds that have a backend."""
    return tuple(_LOADERS)
