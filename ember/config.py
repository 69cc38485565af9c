"""Every ``EMBER_*`` environment setting, read in one place.

Settings are read when asked for, not at import, so tests can change them
with ``monkeypatch.setenv``.
"""

from __future__ import annotations

import os
from pathlib import Path


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip() not in ("", "0", "false", "False")


def debug() -> bool:
    """``EMBER_DEBUG=1``: the CLI shows tracebacks."""
    return _flag("EMBER_DEBUG")


def verify_ir() -> bool:
    """``EMBER_VERIFY_IR=1``: check TIR after every pass (on in tests)."""
    return _flag("EMBER_VERIFY_IR")


def dump_dir() -> Path | None:
    """``EMBER_DUMP_DIR``: write each pass's input and output TIR there."""
    value = os.environ.get("EMBER_DUMP_DIR")
    return Path(value) if value else None


def num_threads() -> int | None:
    """``EMBER_NUM_THREADS``: threads for parallel CPU loops (default: all cores)."""
    value = os.environ.get("EMBER_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def compile_jobs() -> int | None:
    """``EMBER_COMPILE_JOBS``: processes that build a model's missing kernels at once
    (default: the CPUs the process may use; 1 builds them one by one in the process)."""
    value = os.environ.get("EMBER_COMPILE_JOBS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def cache_dir() -> Path:
    """``EMBER_CACHE_DIR``: where compiled kernels are cached on disk (NVRTC output and
    CPU kernel libraries); default ``$XDG_CACHE_HOME/ember``, else ``~/.cache/ember``."""
    value = os.environ.get("EMBER_CACHE_DIR")
    if value:
        return Path(value)
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ember"


def cache_max_bytes() -> int:
    """``EMBER_CACHE_MAX_MB``: the disk cache's size limit (default 1024 MiB; an afternoon
    of compiling left 144 MB). A value that is not a positive number keeps the default."""
    value = os.environ.get("EMBER_CACHE_MAX_MB", "").strip()
    try:
        mb = float(value)
    except ValueError:
        mb = 0.0
    return int((mb if mb > 0 else 1024.0) * 2**20)


def disk_cache_enabled() -> bool:
    """Whether compiled kernels are cached on disk: off with ``EMBER_CACHE_DIR=""`` (set but
    empty) or ``EMBER_DISK_CACHE=0``; on otherwise."""
    if os.environ.get("EMBER_CACHE_DIR") == "":
        return False
    value = os.environ.get("EMBER_DISK_CACHE", "1").strip()
    return value not in ("0", "false", "False", "off")
