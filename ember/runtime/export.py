"""Linking an object file into a shared library with the system C compiler.

Used by modules' ``export_library``: the code generator emits a relocatable
object (with its metadata inside), and this links it with the runtime
libraries it needs (``-lgomp`` for parallel loops, ``-lm`` for math
functions) into a ``.so`` that :func:`ember.runtime.load_module` can open.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ember.errors import CompileError


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
    cc = find_c_compiler()
    out = Path(path)
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
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_out, out)
