"""The disk cache's size limit: least recently used entries go first.

The disk caches — CPU kernel libraries (``ember/kernel_cache.py``, entries
``kernels/<xx>/<key>/``), NVRTC output (``codegen_cuda/nvrtc.py``, entries
``cuda/<key>/``) and whole models (``ember/graph/model_cache.py``, entries
``models/<xx>/<key>/``) — live under ``config.cache_dir()`` as one folder per entry, written whole
and renamed into place. A hit touches its folder (:func:`touch`), so a folder's mtime is its
last use; after a store, :func:`trim` removes the least recently used entries until the
cache is back under ``config.cache_max_bytes()`` (to 90% of it, so a full cache is not
trimmed again on every store). Trimming walks the cache, so it runs at most every
``TRIM_EVERY`` seconds in a process. Removal is best effort: another process may be
reading or removing the same entry, and a reader that loses an entry recompiles it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ember import config
from ember.errors import EmberError

# (folder under the cache root, depth of an entry folder below it)
LAYOUT = (("kernels", 2), ("cuda", 1), ("models", 2))
TRIM_EVERY = 30.0  # seconds between two walks of the cache in one process

_lock = threading.Lock()
_last_trim = float("-inf")


def write_entry(folder: Path, write: Callable[[Path], None]) -> bool:
    """Make the entry ``folder``: ``write(tmp)`` fills a fresh folder beside it, which is
    renamed into place, so a reader never sees half an entry; then the cache is trimmed.
    False where it was not stored — a full disk, a read-only cache, ``write`` failing
    (``EmberError``, ``OSError``) or another process storing it first (its entry stays):
    a cache only saves time, it never fails the work it caches."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    except OSError:
        return False
    try:
        write(tmp)
        os.replace(tmp, folder)
    except (EmberError, OSError):
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    trim()
    return True


def touch(entry: Path) -> None:
    """Mark ``entry`` as just used (best effort)."""
    try:
        os.utime(entry)
    except OSError:
        pass


def _entries(root: Path) -> list[tuple[float, int, Path]]:
    """(last use, bytes, folder) of every whole entry under ``root``."""
    found = []
    for sub, depth in LAYOUT:
        for folder in (root / sub).glob("/".join(["*"] * depth)):
            if not folder.is_dir() or folder.name.startswith(".tmp-"):
                continue
            try:
                size = sum(f.stat().st_size for f in folder.iterdir())
                found.append((folder.stat().st_mtime, size, folder))
            except OSError:  # removed under us
                continue
    return found


def trim(force: bool = False) -> int:
    """Remove least recently used entries until the cache is under its limit; returns the
    bytes removed. Without ``force`` it does nothing within ``TRIM_EVERY`` s of the last."""
    global _last_trim
    with _lock:
        now = time.monotonic()
        if not force and now - _last_trim < TRIM_EVERY:
            return 0
        _last_trim = now
    limit = config.cache_max_bytes()
    entries = sorted(_entries(config.cache_dir()), key=lambda e: e[0])
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return 0
    removed = 0
    for _, size, folder in entries:
        if total - removed <= 0.9 * limit:
            break
        shutil.rmtree(folder, ignore_errors=True)
        removed += size
    return removed


__all__ = ["touch", "trim", "write_entry"]
