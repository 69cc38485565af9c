"""Linking an object file into a shared library with the system C compiler.

Used by modules' ``export_library``: the code generator emits a relocatable
object (with its metadata inside), and this links it with the runtime
libraries it needs (``-lgomp`` for parallel loops, ``-lm`` for math
functions) into a ``.so`` that :func:`ember.runtime.load_module` can open.

The finished library is written to a fresh file beside ``path`` and renamed over
it (:func:`install_file`), never rewritten in place: a process that has the old
library mapped keeps running the old code instead of crashing on changed pages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ember.errors import ArgumentError, CompileError


def find_c_compiler() -> str:
    """The C compiler used as linker: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on PATH."""
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return str(shutil.which(name))
    raise CompileError(
        "exporting a library needs a C compiler to link it, and none was found "
        "(tried $CC, cc, gcc, clang); install gcc or set CC"
    )


def link_shared(obj: bytes, path: str | Path, libs: Sequence[str] = ("gomp", "m")) -> None:
    """Write ``obj`` to a temporary file and link it into the shared library ``path``."""
    out = check_output_path(path)  # before the link, so a bad path fails fast
    cc = find_c_compiler()
    with tempfile.TemporaryDirectory(prefix="ember-link-") as tmp:
        obj_path = Path(tmp) / "module.o"
        obj_path.write_bytes(obj)
        tmp_out = Path(tmp) / "module.so"
        cmd = [cc, "-shared", "-o", str(tmp_out), str(obj_path), *(f"-l{lib}" for lib in libs)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(
                f"linking {out.name} failed: {' '.join(cmd)}", log=proc.stdout + proc.stderr
            )
        install_file(tmp_out, out)


def link_with(
    fcompile: Any, obj: bytes, path: str | Path, options: Sequence[str] | None = None
) -> None:
    """TVM's ``export_library(path, fcompile)``: write ``obj`` to a temporary ``.o`` and call
    ``fcompile(path, [that file], options=...)``, which must produce ``path``."""
    if not callable(fcompile):
        raise ArgumentError(f"export_library: fcompile must be a function, got {fcompile!r}")
    out = check_output_path(path)
    with tempfile.TemporaryDirectory(prefix="ember-link-") as tmp:
        obj_path = Path(tmp) / "lib0.o"
        obj_path.write_bytes(obj)
        try:
            if options is None:
                fcompile(str(out), [str(obj_path)])
            else:
                fcompile(str(out), [str(obj_path)], options=list(options))
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            raise CompileError(f"export_library: fcompile failed for {out}: {e}") from e
    if not out.is_file():
        raise CompileError(f"export_library: fcompile returned without writing {out}")


def create_shared(
    output: str | Path,
    objects: Sequence[str | Path] | str,
    options: Sequence[str] | None = None,
    cc: str | None = None,
) -> None:
    """TVM's ``contrib.cc.create_shared``: link object files into a shared library with the
    C compiler ``cc`` (default: the one :func:`find_c_compiler` finds), adding ``options``
    (``["-O2"]``, ``["-L/path", "-lfoo"]``) and libgomp and libm, which Ember's code uses."""
    objs = [objects] if isinstance(objects, (str, Path)) else list(objects)
    compiler = cc or find_c_compiler()
    cmd = [compiler, "-shared", "-fPIC", "-o", str(output), *map(str, objs)]
    cmd += [*(options or ()), "-lgomp", "-lm"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise CompileError(f"create_shared: cannot run {compiler}: {e}") from e
    if proc.returncode != 0:
        raise CompileError(f"create_shared: {' '.join(cmd)} failed", log=proc.stdout + proc.stderr)


def write_output(path: str | Path, data: bytes | str) -> None:
    """``data`` written to ``path`` (Module.save), through a temporary file and a rename."""
    out = check_output_path(path)
    with tempfile.TemporaryDirectory(prefix="ember-save-") as tmp:
        tmp_path = Path(tmp) / out.name
        if isinstance(data, bytes):
            tmp_path.write_bytes(data)
        else:
            tmp_path.write_text(data)
        install_file(tmp_path, out)


def check_output_path(path: str | Path) -> Path:
    """``path`` as a file Ember may write, or an ArgumentError saying why not."""
    out = Path(path)
    if out.is_dir():
        raise ArgumentError(
            f"export_library: {out} is a directory; give a file path such as {out / 'module.so'}"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArgumentError(
            f"export_library: cannot create the folder {out.parent}: {e.strerror}"
        ) from e
    return out


def install_file(src: str | Path | BinaryIO, path: str | Path) -> None:
    """Copy ``src`` (a file name or an open binary file, read from its start) to ``path`` by
    writing a temporary file in ``path``'s folder and renaming it into place (``os.replace``),
    so the old file's inode (which may be mapped) stays intact."""
    out = check_output_path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    except OSError as e:
        raise ArgumentError(f"export_library: cannot write to {out.parent}: {e.strerror}") from e
    try:
        with os.fdopen(fd, "wb") as dst:
            if isinstance(src, (str, Path)):
                with open(src, "rb") as f:
                    shutil.copyfileobj(f, dst)
            else:
                src.seek(0)
                shutil.copyfileobj(src, dst)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o755 & ~umask)
        os.replace(tmp, out)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise ArgumentError(f"export_library: cannot write {out}: {e.strerror}") from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
