"""A disk cache of compiled CPU kernels, so a model compiled again in a new process skips
lowering and LLVM.

``ember/kernels.py`` asks here before building a graph kernel for an ``llvm`` target and
stores what it built. An entry is the kernel's shared library, the form artifacts store CPU
kernels in (the module's ``export_object`` linked by ``runtime.export.link_shared``, as
``export_library`` does), read back by ``ember.runtime.load_module``. It lives under
``config.cache_dir()/kernels`` in a folder named by a SHA-256 of the in-process cache key
(op or fused group, attributes, input types, target, tuning-records fingerprint), the Ember
version, the library format and the resolved CPU (triple, name, features), so another
machine's or another version's code is never picked up. Libraries are linked on a worker
thread while the compile goes on; ``ember.compile`` waits for them (:func:`flush`) before it
returns. Like the NVRTC cache (``codegen_cuda/nvrtc.py``) an entry is written into a fresh
folder and renamed into place, so concurrent processes never see half an entry; a
``meta.json`` beside the library holds the library's SHA-256, and an entry whose library does
not match it (or will not load) is deleted and rebuilt, never loaded.
``EMBER_CACHE_DIR=""`` or ``EMBER_DISK_CACHE=0`` turns the cache off (``ember.config``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ember import config, disk_cache
from ember.backend import Backend, get_backend
from ember.errors import EmberError
from ember.runtime.export import link_shared
from ember.runtime.load import VERSION, load_module
from ember.runtime.module import Module
from ember.target import Target
from ember.version import __version__

LIBRARY = "kernel.so"
META = "meta.json"
LAYOUT = 1  # bump when the entry layout changes

# lookups and stores in this process, by outcome (tests and reports read them)
STATS: dict[str, int] = {"hit": 0, "miss": 0, "corrupt": 0, "stored": 0}


def enabled(target: Backend | Target | str) -> bool:
    """Whether kernels of ``target`` are cached on disk (its backend's code is a shared
    object tied to a machine it can name, and the cache is on)."""
    return get_backend(target).disk_cache_key() is not None and config.disk_cache_enabled()


def entry_key(key: tuple[Any, ...], target: Backend | Target | str) -> str:
    """The hex name of ``key``'s entry: the in-process key plus what makes code portable."""

    backend = get_backend(target)
    payload = json.dumps(
        [
            LAYOUT,
            repr(key),
            str(backend.target),
            __version__,
            VERSION,
            source_fingerprint(),
            backend.disk_cache_key(),
        ]
    )
    return hashlib.sha256(payload.encode()).hexdigest()


# the packages whose code decides what a kernel compiles to
_CODE_PACKAGES = ("ember.tir", "ember.codegen_llvm", "ember.frontend", "ember.tuner")


@functools.cache
def source_fingerprint() -> str:
    """A SHA-256 of the source of every module that shapes a kernel, so an edited template
    or pass (a development checkout, a patched install) never loads code built by the old
    one under the same version number. Hashing the sources costs a few milliseconds, once
    per process."""
    digest = hashlib.sha256()
    roots = [Path(__file__).resolve().parent.parent]  # the ember/ folder
    for name in _CODE_PACKAGES:  # found by name, not imported: they may sit anywhere
        spec = importlib.util.find_spec(name)
        roots += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def entry_path(name: str) -> Path:
    """Where the on-disk kernel cache keeps the entry ``name`` (sharded by its first 2 chars)."""
    return config.cache_dir() / "kernels" / name[:2] / name


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(name: str) -> Module | None:
    """The cached module of entry ``name``, or None (absent, or corrupt and now removed)."""
    folder = entry_path(name)
    if not folder.is_dir():
        STATS["miss"] += 1
        return None
    try:
        meta = json.loads((folder / META).read_text())
        digest = _sha256_file(folder / LIBRARY)
    except (OSError, ValueError):  # a file missing or unreadable: the entry is not whole
        _discard(folder)
        return None
    if not isinstance(meta, dict) or meta.get("sha256") != digest:
        _discard(folder)
        return None
    try:
        module = load_module(folder / LIBRARY)
    except (EmberError, OSError):
        _discard(folder)
        return None
    STATS["hit"] += 1
    disk_cache.touch(folder)
    return module


def present(name: str) -> bool:
    """Whether entry ``name`` is on disk (whole or not: :func:`load` checks)."""
    return entry_path(name).is_dir()


def _discard(folder: Path) -> None:
    """Remove a corrupt entry (best effort: another process may be doing the same)."""
    STATS["corrupt"] += 1
    shutil.rmtree(folder, ignore_errors=True)


def store(name: str, module: Module) -> None:
    """Write ``module``'s library as entry ``name``. Its object code is emitted now and linked
    on a worker thread (the linker is a separate process, so that overlaps the next kernel's
    compile); :func:`flush` waits for what is pending. A module with no library form (one
    that calls back into Python) or an unwritable cache folder is skipped: the cache only
    saves time, it never fails a compile."""
    export = getattr(module, "export_object", None)  # a CPU module's object code
    if export is None:
        return
    try:
        obj = export()
    except (EmberError, AttributeError):
        return
    with _LOCK:
        _PENDING.append(_linker().submit(_write_entry, entry_path(name), obj))


def flush() -> None:
    """Wait until every entry :func:`store` was given is written (or skipped)."""
    with _LOCK:
        pending = list(_PENDING)
        _PENDING.clear()
    for future in pending:
        future.result()


_LOCK = threading.Lock()
_PENDING: list[Future[None]] = []


def after_fork_in_child() -> None:
    """Forget the parent's linker thread, which a forked child does not have (its
    executor would queue entries that never get written), and the parent's lock."""
    global _LOCK
    _LOCK = threading.Lock()
    _PENDING.clear()
    _linker.cache_clear()


@functools.cache
def _linker() -> ThreadPoolExecutor:
    # one worker: entries are written in order, and the linker never crowds out the compile
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="ember-kernel-cache")


def _write_entry(folder: Path, obj: bytes) -> None:
    """Link ``obj`` into the entry ``folder`` (:func:`disk_cache.write_entry`: whole or not
    at all), its SHA-256 in ``meta.json`` beside it."""

    def write(tmp: Path) -> None:
        link_shared(obj, tmp / LIBRARY)
        meta = {"sha256": _sha256_file(tmp / LIBRARY), "layout": LAYOUT}
        (tmp / META).write_text(json.dumps(meta))

    if disk_cache.write_entry(folder, write):
        with _LOCK:
            STATS["stored"] += 1
