"""``load_module(path)``: open a library written by ``export_library`` in any process.

The library carries its own description: a C function ``__ember_metadata``
returns JSON with every function's signature and assert messages, the
module's fixed thread count and its LLVM IR. So a module loaded in a fresh
process checks its arguments exactly as the module that was exported.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

from ember.errors import ArgumentError
from ember.runtime.cpu import METADATA_SYMBOL, SharedLibraryModule
from ember.runtime.module import Module
from ember.runtime.signature import FunctionSignature

FORMAT = "ember-cpu-library"
VERSION = 1


def read_metadata(lib: ctypes.CDLL, path: Path) -> dict:
    try:
        fn = lib[METADATA_SYMBOL]
    except AttributeError as e:
        raise ArgumentError(
            f"{path} is not a library exported by Ember (no {METADATA_SYMBOL})"
        ) from e
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    meta = json.loads(fn().decode("utf-8"))
    found = (meta.get("format"), meta.get("version"))
    if found != (FORMAT, VERSION):
        raise ArgumentError(
            f"{path} has Ember library format {found[0]!r} version {found[1]!r}; "
            f"this Ember reads {FORMAT!r} version {VERSION}"
        )
    return meta


def load_module(path: str | Path) -> Module:
    """Load a compiled module from a shared library written by ``Module.export_library``."""
    p = Path(path)
    if not p.is_file():
        raise ArgumentError(f"cannot load module: no file {p}")
    try:
        lib = ctypes.CDLL(str(p.resolve()), mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        raise ArgumentError(f"cannot load module {p}: {e}") from e
    meta = read_metadata(lib, p)
    signatures = [FunctionSignature.from_json(f) for f in meta["functions"]]
    sources = {"ll": meta["ll"]} if meta.get("ll") else {}
    parallel = bool(meta.get("parallel", True))
    return SharedLibraryModule(p, lib, signatures, meta.get("num_threads"), sources, parallel)
