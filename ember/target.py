"""Targets: what machine a program is compiled for, parsed from strings like ``"llvm"``.

Accepted forms: ``"llvm"`` (host CPU, ``-mcpu=native``), ``"llvm -mcpu=skylake-avx512
-mattr=+avx512f -num-threads=2"``, ``"cuda"``, ``"cuda -arch=sm_90"``. A Target is a
small immutable value with a canonical string form, used as a cache and record key.
This module imports nothing else of Ember but its errors.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ember.errors import ArgumentError

KINDS = ("llvm", "cuda")

# kind -> a function that imports that target's built-in schedule templates. The
# package root (ember/__init__.py), which may import every layer, fills it; the
# tuner calls it on first lookup, so the tuner never names a code generator.
TEMPLATE_LOADERS: dict[str, Callable[[], None]] = {}

# sm_80, sm_90a, sm_100f, compute_90: two or more digits (major and minor version)
_CUDA_ARCH = re.compile(r"^(sm|compute)_[1-9]\d+[af]?$")
_OPTIONS = {
    "llvm": ("mcpu", "mattr", "mtriple", "num-threads", "fast-math", "opt-level"),
    "cuda": ("arch", "max-threads-per-block", "max-shared-memory-per-block"),
}


@dataclass(frozen=True)
class Target:
    kind: str
    options: tuple[tuple[str, str], ...] = field(default=())

    @staticmethod
    def parse(text: str | Target) -> Target:
        if isinstance(text, Target):
            return text
        if not isinstance(text, str) or not text.strip():
            raise ArgumentError(f"target must be a string such as 'llvm' or 'cuda', got {text!r}")
        kind, *rest = text.split()
        if kind not in KINDS:
            raise ArgumentError(
                f"unknown target kind {kind!r} in {text!r}; expected one of {KINDS}"
            )
        opts: dict[str, str] = {}
        for token in rest:
            if not token.startswith("-"):
                raise ArgumentError(
                    f"target option {token!r} in {text!r} must look like -key=value"
                )
            key, eq, value = token.lstrip("-").partition("=")
            if eq and not value:
                raise ArgumentError(f"target option -{key} in {text!r} has an empty value")
            if key not in _OPTIONS[kind]:
                raise ArgumentError(
                    f"unknown option -{key} for target {kind!r}; known: "
                    + ", ".join(f"-{o}" for o in _OPTIONS[kind])
                )
            opts[key] = value or "1"
        if kind == "cuda" and "arch" in opts and not _CUDA_ARCH.match(opts["arch"]):
            raise ArgumentError(
                f"-arch={opts['arch']} in {text!r} is not a CUDA architecture; expected "
                "sm_<major><minor> such as sm_75, sm_80, sm_90 or sm_90a"
            )
        return Target(kind, tuple(sorted(opts.items())))

    def get(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)

    @property
    def mcpu(self) -> str:
        return self.get("mcpu", "native") or "native"

    @property
    def arch(self) -> str:
        return self.get("arch", "") or ""

    def __str__(self) -> str:
        return " ".join([self.kind, *(f"-{k}={v}" for k, v in self.options)])


def as_target(target: str | Target) -> Target:
    return Target.parse(target)


def host_cpu_model() -> str:
    """The CPU model the OS reports ("AMD EPYC 7B13"), or ``"unknown"``: ``ember info``
    prints it beside LLVM's guess, and the tuner records it as the device of CPU records."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
