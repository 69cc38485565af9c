"""Targets: what machine a program is compiled for, parsed from strings like ``"llvm"``.

Accepted forms: ``"llvm"`` (host CPU, ``-mcpu=native``), ``"llvm -mcpu=skylake-avx512
-mattr=+avx512f -num-threads=2"``, ``"cuda"``, ``"cuda -arch=sm_90"``. A Target is a
small immutable value with a canonical string form, used as a cache and record key.
This module imports nothing else of Ember but its errors.
"""

from __future__ import annotations

import platform
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ember.errors import ArgumentError

# sm_80, sm_90a, sm_100f, compute_90: two or more digits (major and minor version)
_CUDA_ARCH = re.compile(r"^(sm|compute)_[1-9]\d+[af]?$")


@dataclass(frozen=True)
class KindInfo:
    """What parsing and the tuner need to know of a target kind before its backend loads.

    Target facts live here as a table, so nothing outside a backend asks "is this cuda?":
    ``options`` the ``-key=value`` options it accepts; ``keys`` TVM's target keys (the
    generic schedules it falls back to); ``warp_size`` and ``max_threads`` TVM's
    ``thread_warp_size`` / ``max_num_threads`` defaults; ``is_host`` whether its code
    runs on this machine's CPU (it can be a build's host, and its tuning records hold
    only where they were measured); ``check`` a last check of the parsed options."""

    options: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    warp_size: int = 1
    max_threads: int = 1
    is_host: bool = False
    check: Callable[[str, dict[str, str]], None] | None = None


def _check_cuda(text: str, opts: dict[str, str]) -> None:
    if "arch" in opts and not _CUDA_ARCH.match(opts["arch"]):
        raise ArgumentError(
            f"-arch={opts['arch']} in {text!r} is not a CUDA architecture; expected "
            "sm_<major><minor> such as sm_75, sm_80, sm_90 or sm_90a"
        )


# The built-in kinds; ``ember.backend.register_backend`` adds more.
TARGET_KINDS: dict[str, KindInfo] = {
    "llvm": KindInfo(
        options=("mcpu", "mattr", "mtriple", "num-threads", "fast-math", "opt-level"),
        keys=("cpu",),
        is_host=True,
    ),
    "cuda": KindInfo(
        options=("arch", "max-threads-per-block", "max-shared-memory-per-block", "fast-math"),
        keys=("cuda", "gpu"),
        warp_size=32,
        max_threads=1024,
        check=_check_cuda,
    ),
}
# options that are whole numbers, with their least and greatest values (None: no bound);
# verify_gpu holds kernels to them (``codegen_cuda/pipeline.py``). llvm's counts are
# checked where they are read (``codegen_llvm``), with their own messages.
_INT_OPTIONS: dict[str, tuple[int, int | None, str]] = {
    "max-threads-per-block": (1, 1024, "CUDA allows at most 1024 threads in a block"),
    "max-shared-memory-per-block": (1, None, "bytes of shared memory a block may use"),
}
# a flag's values that mean "on"; any other value (0, false, ...) means off
_TRUE = ("1", "true", "yes", "on")


def register_target_kind(kind: str, info: KindInfo) -> None:
    """Let ``Target.parse`` accept ``kind`` (a new backend's; see ``ember.backend``)."""
    if not kind.isidentifier():
        raise ArgumentError(f"a target kind must be an identifier, got {kind!r}")
    TARGET_KINDS[kind] = info


class TargetKind(str):
    """A target's kind, ``"llvm"`` or ``"cuda"``: equal to (and hashed as) that string, with
    TVM's ``.name`` (``tgt.kind.name``)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(self)


@dataclass(frozen=True, init=False)
class Target:
    """What a program is compiled for, built as TVM builds one: ``Target("llvm
    -mcpu=haswell")``, ``Target(target="llvm", host="llvm")``, ``Target({"kind": "cuda",
    "arch": "sm_80"})`` or ``Target(other_target)``; ``.kind.name``, ``.attrs``, ``.keys``,
    ``.host``, ``.arch`` as in TVM.

    ``host`` is accepted for TVM's sake and must be an ``llvm`` target; Ember's host side
    always runs in this process on this CPU, so a host changes nothing that is built and is
    not part of the canonical string (the cache and record key)."""

    kind: TargetKind
    options: tuple[tuple[str, str], ...] = field(default=())
    host: Target | None = field(default=None, compare=False)

    def __init__(self, target: str | Target | dict[str, Any], host: Any = None) -> None:
        parsed = Target.parse(target)
        host_target = _host(host if host is not None else parsed.host)
        object.__setattr__(self, "kind", parsed.kind)
        object.__setattr__(self, "options", parsed.options)
        object.__setattr__(self, "host", host_target)

    @staticmethod
    def _of(kind: str, options: tuple[tuple[str, str], ...]) -> Target:
        """A Target of already checked parts (what :meth:`parse` gives)."""
        tgt = object.__new__(Target)
        object.__setattr__(tgt, "kind", TargetKind(kind))
        object.__setattr__(tgt, "options", options)
        object.__setattr__(tgt, "host", None)
        return tgt

    @staticmethod
    def parse(text: str | Target | dict[str, Any]) -> Target:
        if isinstance(text, Target):
            return text
        if isinstance(text, dict):
            text = _from_dict(text)
        if not isinstance(text, str) or not text.strip():
            raise ArgumentError(f"target must be a string such as 'llvm' or 'cuda', got {text!r}")
        kind, *rest = text.split()
        if kind not in TARGET_KINDS:
            raise ArgumentError(
                f"unknown target kind {kind!r} in {text!r}; expected one of {tuple(TARGET_KINDS)}"
            )
        opts: dict[str, str] = {}
        for token in rest:
            key, value = _option(kind, token, text)
            if key in opts:  # the last would silently win: refuse instead
                raise ArgumentError(
                    f"target option -{key} is given twice in {text!r} "
                    f"(-{key}={opts[key]} and -{key}={value}); give it once"
                )
            opts[key] = value
        check = TARGET_KINDS[kind].check
        if check is not None:
            check(text, opts)
        return Target._of(kind, tuple(sorted(opts.items())))

    def get(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)

    def flag(self, key: str) -> bool:
        """Whether a yes/no option such as ``-fast-math`` is on (``-fast-math``,
        ``-fast-math=1`` or ``=true``), read the same way for every kind."""
        return (self.get(key) or "0").lower() in _TRUE

    @property
    def info(self) -> KindInfo:
        return TARGET_KINDS[self.kind]

    @property
    def mcpu(self) -> str:
        return self.get("mcpu", "native") or "native"

    @property
    def arch(self) -> str:
        return self.get("arch", "") or ""

    @property
    def attrs(self) -> dict[str, Any]:
        """TVM's ``target.attrs``: the options given (whole numbers as ints) and ``keys``."""
        attrs: dict[str, Any] = {k: int(v) if k in _INT_OPTIONS else v for k, v in self.options}
        attrs["keys"] = list(self.keys)
        return attrs

    @property
    def keys(self) -> tuple[str, ...]:
        return self.info.keys

    @property
    def max_num_threads(self) -> int:
        """TVM's ``max_num_threads``: threads per block on ``cuda``, 1 on ``llvm``."""
        return int(self.get("max-threads-per-block") or self.info.max_threads)

    @property
    def thread_warp_size(self) -> int:
        return self.info.warp_size

    def __str__(self) -> str:
        return " ".join([self.kind, *(f"-{k}={v}" for k, v in self.options)])

    # -- TVM's target scope: ``with Target("llvm -mcpu=x86-64-v3"): ...`` -----------------
    def __enter__(self) -> Target:
        _scope().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _scope().pop()

    @staticmethod
    def current(allow_none: bool = True) -> Target | None:
        """The innermost target of an enclosing ``with target:`` block on this thread, as
        TVM's ``Target.current``; templates read it for the machine they schedule for (the
        CPU's vector registers). Ember enters it while compiling a model and instantiating a
        tuning task; outside any block, None (or ``ArgumentError`` without
        ``allow_none``)."""
        stack = _scope()
        if stack:
            return stack[-1]
        if allow_none:
            return None
        raise ArgumentError("no target is in scope: use `with ember.target.Target(...):`")


_SCOPE = threading.local()


def _scope() -> list[Target]:
    if not hasattr(_SCOPE, "stack"):
        _SCOPE.stack = []
    return _SCOPE.stack  # type: ignore[no-any-return]


def _option(kind: str, token: str, text: str) -> tuple[str, str]:
    """``-key=value`` of target ``kind``, checked; a bare ``-flag`` is ``"1"``."""
    if not token.startswith("-"):
        raise ArgumentError(f"target option {token!r} in {text!r} must look like -key=value")
    key, eq, value = token.lstrip("-").partition("=")
    if eq and not value:
        raise ArgumentError(f"target option -{key} in {text!r} has an empty value")
    known = TARGET_KINDS[kind].options
    if key not in known:
        raise ArgumentError(
            f"unknown option -{key} for target {kind!r}; known: "
            + (", ".join(f"-{o}" for o in known) or "none")
        )
    if key in _INT_OPTIONS:
        lo, hi, what = _INT_OPTIONS[key]
        number = int(value) if re.fullmatch(r"[+-]?\d+", value) else None
        if number is None or number < lo or (hi is not None and number > hi):
            span = f"{lo}..{hi}" if hi is not None else f"{lo} or more"
            raise ArgumentError(
                f"target option -{key}={value or '(none)'} in {text!r} must be a whole number "
                f"in {span} ({what})"
            )
        return key, str(number)
    return key, value or "1"


def _from_dict(spec: dict[str, Any]) -> str:
    """TVM's dict form ``{"kind": "cuda", "arch": "sm_80"}`` as a target string."""
    if not isinstance(spec.get("kind"), str):
        raise ArgumentError(f"a target dict needs a 'kind' string, got {spec!r}")
    parts = [spec["kind"]]
    for key, value in spec.items():
        if key in ("kind", "keys", "host"):
            continue
        parts.append(f"-{key}={value}")
    return " ".join(parts)


def _host(host: Any) -> Target | None:
    """The host target: Ember's host code is the CPU's, so only ``llvm`` is accepted."""
    if host is None:
        return None
    tgt = Target.parse(host)
    if not tgt.info.is_host:
        raise ArgumentError(f"target host must be an 'llvm' target (the CPU), got {str(tgt)!r}")
    return tgt


def as_target(target: str | Target) -> Target:
    """``target`` as a :class:`Target`, parsing a string; APIs take either."""
    return Target.parse(target)


def host_cpu_model() -> str:
    """The CPU model the OS reports ("AMD EPYC 7B13"), or ``"unknown"``: ``ember info``
    prints it beside LLVM's guess, and the tuner records it as the device of CPU records."""

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
