"""A disk cache of whole compiled models: a process that meets a model another process
already compiled loads it (an ``.ember`` artifact) instead of importing and compiling it.

The kernel cache (``kernel_cache.py``) already spares a second compile its LLVM work, but
the import, the graph passes and the memory plan still run, and a caller such as the
``torch.compile`` backend traces the model first: ResNet-18 took 2.4 s to its first result
in a second process, 0.8 s of it Ember's compile and 0.8 s the trace. Here the caller
names the model by a key it can compute without that work (the backend hashes the FX
graph's code and every tensor it reads; ``ember.compile`` of an ONNX file hashes the
file's bytes, ``compile.py``), and :func:`cached_model` loads the entry or builds, exports
and stores it. ResNet-50 from its kernels took 4.3 s (1.2 s of it importing ``onnx``,
whose ``ml_dtypes`` registers its types with numpy), from its entry 1.2 s.

An entry is ``config.cache_dir()/models/<xx>/<key>/model.ember``, written into a fresh
folder and renamed into place (so concurrent processes never see half an entry) and
trimmed with the other caches (``disk_cache.py``). The key always folds in the Ember
version and the source fingerprint of the code that shapes kernels, so an edited Ember
never loads a model built by the old one. An entry that fails to load (truncated,
tampered: the artifact reader checks every member's SHA-256) is deleted and rebuilt.
``EMBER_CACHE_DIR=""`` or ``EMBER_DISK_CACHE=0`` turns it off, as for the kernels.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ember import config, disk_cache
from ember.errors import EmberError
from ember.graph.executor import CompiledModel
from ember.graph.kernel_cache import source_fingerprint
from ember.version import __version__

MODEL = "model.ember"

# lookups in this process, by outcome (tests and reports read them)
STATS: dict[str, int] = {"hit": 0, "miss": 0, "corrupt": 0, "stored": 0}


def model_key(parts: Iterable[Any]) -> str:
    """The hex key of a model described by ``parts`` (strings, or bytes-like objects such
    as its tensors' contiguous arrays), with the Ember version and source fingerprint
    folded in."""
    digest = hashlib.sha256()
    for part in (__version__, source_fingerprint(), *parts):
        data = part.encode() if isinstance(part, str) else memoryview(part).cast("B")
        digest.update(len(data).to_bytes(8, "little"))  # "ab"+"c" is not "a"+"bc"
        digest.update(data)
    return digest.hexdigest()


def entry_path(key: str) -> Path:
    """The folder of entry ``key`` (sharded by its first two characters)."""
    return config.cache_dir() / "models" / key[:2] / key


def cached_model(key: str, build: Callable[[], Any]) -> Any:
    """The model stored under ``key``, else ``build()``'s, stored when it is a
    :class:`CompiledModel` (a model that compiles per size or value is not kept: its
    compiled sizes change as it runs)."""
    # the reader compiles a loaded model's new sizes with compile.py, which calls this
    from ember.graph.load import load

    if not config.disk_cache_enabled():
        return build()
    folder = entry_path(key)
    if (folder / MODEL).is_file():
        try:
            model = load(folder / MODEL)
        except (EmberError, OSError):
            STATS["corrupt"] += 1
            shutil.rmtree(folder, ignore_errors=True)
        else:
            STATS["hit"] += 1
            disk_cache.touch(folder)
            return model
    STATS["miss"] += 1
    model = build()
    if isinstance(model, CompiledModel):
        _store(folder, model)
    return model


def _store(folder: Path, model: CompiledModel) -> None:
    """Export ``model`` as the entry in ``folder`` (whole or not at all)."""
    if disk_cache.write_entry(folder, lambda tmp: model.export(tmp / MODEL)):
        STATS["stored"] += 1
