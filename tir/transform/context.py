"""``PassContext``: the options every pass of one build sees, and the target facts it is built for.

TVM users write ``with tvm.transform.PassContext(opt_level=3, disabled_pass=[...],
config={...}): tvm.build(...)``; Ember reads the same context (``ember.transform``
re-exports it). It carries what the user chose — the optimisation level, passes
to skip, configuration keys (checked against :data:`CONFIG_KEYS`, TVM's names
where TVM has them) and pass instruments — and, once a build has picked its
target, the target facts the target's passes need (``target``, ``arch``), so no
pass takes extra positional arguments. Contexts nest; :meth:`PassContext.current`
is the innermost one entered on this thread, or the defaults.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ember.errors import ArgumentError


@dataclasses.dataclass(frozen=True)
class UnrollConfig:
    """``tir.UnrollLoop``, as TVM spells it (the rule is in :mod:`.unroll_loops`).

    ``auto_max_step``: unroll a serial loop when the statements it runs (extent
    times its body's) are at most this; ``auto_max_extent``: or when its extent is
    at most this; ``auto_max_depth``: but only with at most this many unrolled
    loops inside. ``explicit_unroll=False`` leaves loops to unroll as loops with an
    unroll hint for the backend compiler (LLVM, NVRTC) instead of copying their
    bodies in TIR.
    """

    auto_max_step: int = 0
    auto_max_depth: int = 8
    auto_max_extent: int = 0
    explicit_unroll: bool = True


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, (bool, int)):
        raise ArgumentError(f"config '{key}' takes a bool, got {value!r}")
    return bool(value)


def _unroll(key: str, value: Any) -> UnrollConfig:
    if isinstance(value, UnrollConfig):
        return value
    fields = {f.name: f.type for f in dataclasses.fields(UnrollConfig)}
    if not isinstance(value, Mapping) or set(value) - set(fields):
        raise ArgumentError(
            f"config '{key}' takes a dict with keys among {', '.join(fields)}, got {value!r}"
        )
    out: dict[str, Any] = {}
    for name, v in value.items():
        if name == "explicit_unroll":
            out[name] = _bool(f"{key}.{name}", v)
        elif isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ArgumentError(f"config '{key}.{name}' takes a non-negative int, got {v!r}")
        else:
            out[name] = v
    return UnrollConfig(**out)


def _lower_passes(key: str, value: Any) -> tuple[tuple[int, Any], ...]:
    """``[(phase, pass), ...]``: a ``prim_func_pass`` or a function ``f(func, mod, ctx)``."""
    try:
        pairs = [(phase, p) for phase, p in value]
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"config '{key}' takes a list of (phase, pass) pairs") from e
    for phase, p in pairs:
        if isinstance(phase, bool) or not isinstance(phase, int) or phase < 0:
            raise ArgumentError(f"config '{key}': a phase is an int >= 0, got {phase!r}")
        if not callable(p):
            raise ArgumentError(f"config '{key}': {p!r} is not a pass")
    return tuple(pairs)


def _directory(key: str, value: Any) -> str | None:
    """A directory path (str or os.PathLike), or None for none."""
    if value is None:
        return None
    try:
        path = os.fspath(value)
    except TypeError as e:
        raise ArgumentError(f"config '{key}' takes a directory path, got {value!r}") from e
    if not isinstance(path, str) or not path:
        raise ArgumentError(f"config '{key}' takes a directory path, got {value!r}")
    return path


# Known configuration keys: name -> (validator, default).
CONFIG_KEYS: dict[str, tuple[Callable[[str, Any], Any], Any]] = {
    "tir.disable_vectorize": (_bool, False),
    "tir.UnrollLoop": (_unroll, UnrollConfig()),
    "tir.noalias": (_bool, True),
    "tir.instrument_bound_checkers": (_bool, False),
    "tir.add_lower_pass": (_lower_passes, ()),
    # TVM's: a CUDA build also writes its source and PTX there (tvm_kernels.cu / .ptx)
    "cuda.kernels_output_dir": (_directory, None),
}


# TVM's names for the passes Ember has, so TVM programs' disabled_pass lists keep working.
TVM_PASS_NAMES = {
    "tir.Simplify": "simplify",
    "tir.StorageFlatten": "flatten_buffers",
    "tir.FlattenBuffer": "flatten_buffers",
    "tir.LoopPartition": "loop_partition",
    "tir.VectorizeLoop": "vectorize_loops",
    "tir.UnrollLoop": "unroll_loops",
    "tir.InstrumentBoundCheckers": "instrument_bound_checkers",
    "tir.SplitHostDevice": "split_host_device",
    "tir.InjectSoftwarePipeline": "inject_pipeline",
    "tir.ThreadSync": "inject_sync",
    "tir.VerifyGPUCode": "verify_gpu",
}


# A TVM pass name: CamelCase, maybe behind a namespace (``AlterOpLayout``, ``tir.HoistIfThenElse``).
_TVM_STYLE_NAME = re.compile(r"^(?:(?:tir|relay|relax|transform|te)\.)?[A-Z][A-Za-z0-9_]*$")


def _pass_names(names: Iterable[str], what: str) -> tuple[str, ...]:
    """Ember's names for ``names``: TVM's names of passes Ember has are translated; a TVM
    pass Ember has no counterpart of (``AlterOpLayout``, ``tir.HoistIfThenElse``) is
    ignored with a warning, as there is nothing to disable (TVM programs list them); any
    other name is kept, and a build refuses it if its target has no such pass."""
    if isinstance(names, str):
        raise ArgumentError(f"{what} takes a list of pass names, got {names!r}")
    out = []
    for n in names:
        if not isinstance(n, str):
            raise ArgumentError(f"{what} takes pass names (str), got {n!r}")
        if n not in TVM_PASS_NAMES and _TVM_STYLE_NAME.match(n):
            warnings.warn(
                f"{what}: {n!r} is a TVM pass with no Ember counterpart; it is ignored",
                UserWarning,
                stacklevel=3,
            )
            continue
        out.append(TVM_PASS_NAMES.get(n, n))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class PassInfo:
    """What instruments and user passes learn about a pass: its name, level, and if required."""

    name: str
    opt_level: int = 0
    required: bool = False


class PassContext:
    """Options for the passes of the builds run inside ``with PassContext(...):``.

    ``opt_level`` (TVM's default 2): a pass whose ``opt_level`` is higher is skipped
    unless required (Ember's own passes are level 0 and always run, as TVM's
    lowering passes are). ``disabled_pass``: pass names to skip, TIR or graph passes
    (``fuse_ops``), checked when a build knows its target. ``config``: keys of
    :data:`CONFIG_KEYS`. ``instruments``: objects with any of ``enter_pass_ctx()``,
    ``exit_pass_ctx()``, ``should_run(ir, info)``, ``run_before_pass(ir, info)``,
    ``run_after_pass(ir, info)`` (TVM's pass-instrument hooks); ``ir`` is a PrimFunc,
    or the Graph for a graph pass.
    """

    def __init__(
        self,
        opt_level: int = 2,
        required_pass: Sequence[str] = (),
        disabled_pass: Iterable[str] = (),
        instruments: Sequence[Any] = (),
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(opt_level, bool) or not isinstance(opt_level, int) or opt_level < 0:
            raise ArgumentError(f"opt_level must be an int >= 0, got {opt_level!r}")
        self.opt_level = opt_level
        self.required_pass = _pass_names(required_pass, "required_pass")
        self.disabled_pass = _pass_names(disabled_pass, "disabled_pass")
        self.instruments = tuple(instruments)
        self.config = _check_config(config or {})
        self.target: Any = None  # set by a build: ember.target.Target
        self.arch: str | None = None  # set by a CUDA build: "sm_80", ...

    # -- configuration --------------------------------------------------------------
    def get(self, key: str) -> Any:
        """The value of a configuration key (its default when not set)."""
        if key not in CONFIG_KEYS:
            raise ArgumentError(_unknown_key(key))
        return self.config.get(key, CONFIG_KEYS[key][1])

    def with_target(self, target: Any, arch: str | None = None) -> PassContext:
        """A copy carrying the facts of the target being built."""
        ctx = self._copy()
        ctx.target, ctx.arch = target, arch
        return ctx

    def with_disabled(self, names: Iterable[str]) -> PassContext:
        """A copy that also skips ``names`` (what ``build(..., disabled_passes=)`` adds)."""
        ctx = self._copy()
        ctx.disabled_pass = (*self.disabled_pass, *_pass_names(names, "disabled_passes"))
        return ctx

    def pass_enabled(self, info: PassInfo) -> bool:
        if info.required or info.name in self.required_pass:
            return True
        return info.name not in self.disabled_pass and info.opt_level <= self.opt_level

    def _copy(self) -> PassContext:
        ctx = PassContext.__new__(PassContext)
        ctx.__dict__.update(self.__dict__)
        return ctx

    # -- nesting ------------------------------------------------------------------------
    @staticmethod
    def current() -> PassContext:
        stack = _stack()
        return stack[-1] if stack else PassContext()

    def __enter__(self) -> PassContext:
        for inst in self.instruments:
            if hasattr(inst, "enter_pass_ctx"):
                inst.enter_pass_ctx()
        _stack().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _stack().pop()
        for inst in self.instruments:
            if hasattr(inst, "exit_pass_ctx"):
                inst.exit_pass_ctx()

    def __repr__(self) -> str:
        return (
            f"PassContext(opt_level={self.opt_level}, disabled_pass={list(self.disabled_pass)}, "
            f"config={self.config})"
        )


_local = threading.local()


def _stack() -> list[PassContext]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack  # type: ignore[no-any-return]


def _unknown_key(key: str) -> str:
    return f"unknown PassContext config key {key!r}; known keys: {', '.join(CONFIG_KEYS)}"


def _check_config(config: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise ArgumentError(f"config must be a dict, got {type(config).__name__}")
    out = {}
    for key, value in config.items():
        if key not in CONFIG_KEYS:
            raise ArgumentError(_unknown_key(key))
        out[key] = CONFIG_KEYS[key][0](key, value)
    return out


__all__ = ["CONFIG_KEYS", "TVM_PASS_NAMES", "PassContext", "PassInfo", "UnrollConfig"]
