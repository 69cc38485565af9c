"""A ``CUDAModule`` as stored parts, and back: the programs' TIR, the source, the launch table.

A compiled model's artifact (``codegen_cuda/artifact.py``) keeps each CUDA module as
its device programs in TIR JSON (:mod:`ember.tir.serialize`: kernels, launches,
workspaces, the host signature), the CUDA C source NVRTC compiled, and the images
(cubin per architecture, PTX; :mod:`.images`). The TIR is what the SIMT emulator runs
and what the GPU runtime reads launch geometry from; :func:`module_from_parts`
prints it again and refuses it unless it gives the stored source byte for byte, so
the emulated kernels are the ones whose machine code is stored beside them.
:func:`launch_table` is the host-side launch metadata (grid, block, dynamic shared
bytes, argument signature) written into the manifest for readers and checked
against the TIR on load.
"""

from __future__ import annotations

import re
from typing import Any

from ember.codegen_cuda.module import CUDAModule
from ember.codegen_cuda.shared_layout import dynamic_shared_bytes
from ember.codegen_cuda.transform.split_host_device import DeviceProgram, Launch
from ember.errors import InvalidModelError
from ember.tir import expr as E
from ember.tir import serialize
from ember.tir.signature import size_text

_EXTRA = (DeviceProgram, Launch)


def module_to_json(module: CUDAModule) -> dict[str, Any]:
    """The module's programs (entry first) with the facts needed to rebuild it."""
    programs = tuple(module.programs.values())
    return {
        "arch": module.arch,
        "fast_math": module.fast_math,
        "programs": serialize.to_json(programs, _EXTRA),
    }


def module_from_parts(data: dict[str, Any], source: str, where: str) -> CUDAModule:
    """The module stored as ``data`` (from :func:`module_to_json`) and its ``source``.

    ``where`` names the stored module in errors."""
    if not isinstance(data, dict):
        raise InvalidModelError(f"{where}: the stored TIR is not an object")
    arch, fast_math = data.get("arch"), data.get("fast_math")
    if not isinstance(arch, str) or not re.fullmatch(r"sm_\d+[af]?", arch):
        raise InvalidModelError(f"{where}: the stored arch {str(arch)[:40]!r} is not sm_XX")
    if not isinstance(fast_math, bool):
        raise InvalidModelError(f"{where}: the stored fast_math flag is not true or false")
    programs = serialize.from_json(data.get("programs"), _EXTRA)
    if not isinstance(programs, tuple) or not programs:
        raise InvalidModelError(f"{where}: the stored TIR holds no device programs")
    if not all(isinstance(p, DeviceProgram) for p in programs):
        raise InvalidModelError(f"{where}: the stored TIR holds no device programs")
    module = CUDAModule(list(programs), arch, fast_math)
    if module.cuda_source() != source:
        raise InvalidModelError(
            f"{where}: the stored TIR does not print to the stored CUDA source; the file was "
            "written by a different Ember or altered"
        )
    return module


def _extent(e: Any) -> int | str:
    if isinstance(e, E.PrimExpr):
        text = size_text(e)
        return text if isinstance(text, int) else str(text)
    return int(e)


def launch_table(module: CUDAModule) -> list[dict[str, Any]]:
    """One entry per kernel: what the host needs to launch it (in launch-argument order:
    the buffers' pointers, then the sizes by value)."""
    table = []
    for func in module.kernels:
        grid, block = func.attr("launch")
        table.append(
            {
                "kernel": func.name,
                "symbol": func.attr("global_symbol") or func.name,
                "grid": [_extent(g) for g in grid],
                "block": [int(b) for b in block],
                "dynamic_shared_bytes": dynamic_shared_bytes(func),
                "args": [[b.name, b.dtype, "pointer"] for b in func.buffers]
                + [[v.name, v.dtype, "value"] for v in func.size_vars()],
            }
        )
    return table


__all__ = ["launch_table", "module_from_parts", "module_to_json"]
