"""The CPU names and features LLVM knows for a triple, and the check of ``-mcpu``/``-mattr``.

Used by :class:`ember.codegen_llvm.jit.MachineSpec` before any target machine is made:
LLVM itself only warns about an unknown CPU and then aborts the whole process on the
first 64-bit instruction ("64-bit code requested on a subtarget that doesn't support
it"), and a feature written without its ``+``/``-`` trips an assertion. llvmlite has no
call that lists the choices, but LLVM prints them when asked for the CPU ``help``; that
text goes to the C-level stderr, so it is read from a redirected file descriptor, once
per triple.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import tempfile
import threading

import llvmlite.binding as llvm

from ember.errors import ArgumentError

_LOCK = threading.Lock()
_ENTRY = re.compile(r"^\s{2}(\S+)\s+- ")


@functools.cache
def llvm_choices(triple: str) -> tuple[frozenset[str], frozenset[str]]:
    """``(cpu names, feature names)`` LLVM accepts for ``triple`` (empty if it cannot say)."""
    llvm.initialize_native_target()  # idempotent; from_triple fails before it
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError:
        return frozenset(), frozenset()
    with _LOCK, tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            target.create_target_machine(cpu="help")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        text = sink.read().decode("utf-8", "replace")
    cpus: set[str] = set()
    features: set[str] = set()
    section: set[str] | None = None
    for line in text.splitlines():
        if line.startswith("Available CPUs"):
            section = cpus
        elif line.startswith("Available features"):
            section = features
        elif section is not None and (m := _ENTRY.match(line)):
            section.add(m.group(1))
    return frozenset(cpus), frozenset(features)


def _unknown(kind: str, name: str, valid: frozenset[str], triple: str) -> ArgumentError:
    close = difflib.get_close_matches(name, sorted(valid), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return ArgumentError(
        f"unknown {kind} {name!r} for {triple}{hint}; valid choices: {', '.join(sorted(valid))}"
    )


def check_cpu_and_features(triple: str, cpu: str, mattr: str) -> None:
    """Raise ``ArgumentError`` unless ``cpu`` (``""``: the host's) and every ``+f``/``-f``
    entry of ``mattr`` are known."""
    for item in filter(None, (f.strip() for f in mattr.split(","))):
        if item[0] not in "+-" or len(item) == 1:
            raise ArgumentError(
                f"-mattr entry {item!r} must be a feature name with + or - in front "
                f"(e.g. -mattr=+{item.lstrip('+-') or 'avx2'},-fma)"
            )
    cpus, features = llvm_choices(triple)
    if cpu and cpus and cpu not in cpus:
        raise _unknown("-mcpu", cpu, cpus, triple)
    if features:
        for item in filter(None, (f.strip() for f in mattr.split(","))):
            if item[1:] not in features:
                raise _unknown("-mattr feature", item[1:], features, triple)


__all__ = ["check_cpu_and_features", "llvm_choices"]
