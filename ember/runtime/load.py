"""``load_module(path)``: open a library written by ``export_library`` in any process.

The library carries its own description: a C function ``__ember_metadata``
returns JSON with every function's signature and assert messages, the
module's fixed thread count and its LLVM IR. So a module loaded in a fresh
process checks its arguments exactly as the module that was exported.

``dlopen`` hands back the library already mapped under a path name even when the
file at that path has since been replaced (``export_library`` renames a new file
into place), so a path loaded before whose file changed is opened through a
private copy: ``load_module`` always returns the code now in the file.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from ember.errors import ArgumentError
from ember.runtime.cpu import METADATA_SYMBOL, SharedLibraryModule
from ember.runtime.module import Module
from ember.runtime.signature import FunctionSignature
from ember.runtime.threads import prepare_openmp

FORMAT = "ember-cpu-library"
VERSION = 2  # 2: the metadata carries "sha256", a hash of the rest of it


def metadata_digest(meta: dict) -> str:
    """The SHA-256 of ``meta`` without its ``sha256`` entry, in a canonical JSON spelling.

    The argument checks a loaded module runs come from this metadata, and the native code
    trusts them: a library whose shapes were hand-edited would let a call write past its
    buffers. The hash makes such an edit a load error instead (it guards against mistakes,
    not against someone who also rewrites the hash)."""
    rest = {k: v for k, v in meta.items() if k != "sha256"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_metadata(lib: ctypes.CDLL, path: Path) -> dict:
    """The metadata a library exported by Ember embeds under its metadata symbol; raises
    ``ArgumentError`` for a library that Ember did not export."""
    try:
        fn = lib[METADATA_SYMBOL]
    except AttributeError as e:
        raise ArgumentError(
            f"{path} is not a library exported by Ember (no {METADATA_SYMBOL})"
        ) from e
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    try:
        meta = json.loads(fn().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ArgumentError(f"{path}: the embedded Ember metadata is not valid JSON ({e})") from e
    if not isinstance(meta, dict):
        raise ArgumentError(f"{path}: the embedded Ember metadata is not a JSON object")
    found = (meta.get("format"), meta.get("version"))
    if found != (FORMAT, VERSION):
        raise ArgumentError(
            f"{path} has Ember library format {found[0]!r} version {found[1]!r}; "
            f"this Ember reads {FORMAT!r} version {VERSION}: export the module again"
        )
    if meta.get("sha256") != metadata_digest(meta):
        raise ArgumentError(
            f"{path}: the embedded metadata (function signatures, buffer shapes) does not match "
            "its hash, so it was changed after export; calling the library could overrun "
            "its buffers, so it is refused: export the module again"
        )
    return meta


def _signatures(meta: dict, lib: ctypes.CDLL, path: Path) -> list[FunctionSignature]:
    try:
        sigs = [FunctionSignature.from_json(f) for f in meta["functions"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ArgumentError(f"{path}: malformed function signatures in its metadata ({e})") from e
    for sig in sigs:
        if not hasattr(lib, sig.native_symbol):
            raise ArgumentError(
                f"{path}: its metadata names a function '{sig.native_symbol}' the library lacks"
            )
    return sigs


# resolved path -> (device, inode) of the file dlopen mapped under that name in this process
_MAPPED: dict[str, tuple[int, int]] = {}


def _dlopen(p: Path) -> tuple[ctypes.CDLL, BinaryIO]:
    """The library at ``p`` and an open handle on the very file it was loaded from (which
    ``export_library`` of the loaded module copies, even after ``p`` was replaced)."""
    real = p.resolve()
    handle = open(real, "rb")  # noqa: SIM115 -- kept open by the module
    st = os.fstat(handle.fileno())
    file_id = (st.st_dev, st.st_ino)
    seen = _MAPPED.setdefault(str(real), file_id)
    try:
        if seen == file_id:
            return ctypes.CDLL(str(real), mode=ctypes.RTLD_LOCAL), handle
        # the name is taken by an older file's mapping: load this file under a fresh name
        with tempfile.TemporaryDirectory(prefix="ember-load-") as tmp:
            copy = Path(tmp) / real.name
            with open(copy, "wb") as out:
                shutil.copyfileobj(handle, out)
            return ctypes.CDLL(str(copy), mode=ctypes.RTLD_LOCAL), handle  # mapping outlives it
    except BaseException:
        handle.close()
        raise


def load_module(path: str | Path) -> Module:
    """Load a compiled module from a shared library written by ``Module.export_library``."""
    p = Path(path)
    if not p.is_file():
        raise ArgumentError(f"cannot load module: no file {p}")
    try:
        prepare_openmp()  # the library may bring libgomp in
        lib, handle = _dlopen(p)
    except OSError as e:
        raise ArgumentError(f"cannot load module {p}: {e}") from e
    try:
        meta = read_metadata(lib, p)
        signatures = _signatures(meta, lib, p)
    except BaseException:
        handle.close()
        raise
    sources = {"ll": meta["ll"]} if meta.get("ll") else {}
    parallel = bool(meta.get("parallel", True))
    module = SharedLibraryModule(
        p, lib, signatures, meta.get("num_threads"), sources, parallel, handle
    )
    module.cannot_run_here = _cannot_run_here(meta.get("cpu"), p)
    return module


def _cannot_run_here(cpu: Any, path: Path) -> str | None:
    """Why this CPU cannot run the library's code, from the ``cpu`` section its metadata
    carries (libraries exported before it was recorded are not checked)."""
    if cpu is None:
        return None
    features = cpu.get("features") if isinstance(cpu, dict) else None
    listed = features is None or (
        isinstance(features, list) and all(isinstance(f, str) for f in features)
    )
    named = isinstance(cpu, dict) and all(isinstance(cpu.get(k), str) for k in ("name", "triple"))
    if not (named and listed):
        raise ArgumentError(f"{path}: the embedded metadata's 'cpu' entry is malformed: {cpu!r}")
    from ember.backend import get_backend

    return get_backend("llvm").cannot_run(cpu)
