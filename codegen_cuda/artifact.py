"""The CUDA half of compiled-model artifacts: kernels stored as TIR, source, cubins and PTX.

``ember/artifact.py`` writes and reads the archive (manifest, hashes, graph, params);
for a model compiled with ``target="cuda"`` it hands each distinct kernel module to a
:class:`CudaPacker` on export and asks a :class:`CudaLoader` for it on load. Per
module the archive holds

- ``kernels/k<i>.cu``: the CUDA C source NVRTC compiled;
- ``kernels/k<i>.<sm_XX>.cubin``: machine code for each exported architecture
  (default: the architecture the kernels were lowered for, plus sm_80/sm_90 where newer);
- ``kernels/k<i>.ptx``: PTX of the lowest architecture, which the driver JIT-compiles
  on newer GPUs (omitted with ``ptx=False``);
- ``kernels/k<i>.tir.json``: the device programs in TIR (kernels, launch list,
  workspaces, host signature). The SIMT emulator executes this TIR, and the GPU
  runtime takes the launch geometry from it. Loading prints it again and refuses the
  file unless it reproduces the stored source exactly, so what is emulated is what the
  cubins were compiled from.

The manifest's ``cuda`` section lists the architectures, the PTX's, the NVRTC version
and per module its members and launch table (grid, block, dynamic shared bytes and
argument signature of every kernel), which must match the TIR's on load; the section
carries its own SHA-256. Every member is covered by the manifest's SHA-256 table, so
a changed cubin byte is refused before anything is loaded. With a GPU, loading picks
each module's image for the device (its cubin, a compatible older cubin of the same
family, else the PTX) and says clearly when none fits; without one the model loads
and runs in the emulator (``EMBER_CUDA_EMULATE=1``), and a plain run raises
``DeviceError`` saying so.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from ember.codegen_cuda import device
from ember.codegen_cuda.images import build_images, choose_image, export_archs
from ember.codegen_cuda.module import CUDAModule
from ember.codegen_cuda.nvrtc import CompiledCuda, nvrtc_version
from ember.codegen_cuda.serialize import launch_table, module_from_parts, module_to_json
from ember.errors import ArgumentError, EmberError, InvalidModelError
from ember.runtime.artifact_schema import check_cuda_section

# What code written for well-formed TIR raises when handed TIR that only looks like it.
_MALFORMED = (
    AttributeError,
    TypeError,
    KeyError,
    IndexError,
    ValueError,
    ZeroDivisionError,
    OverflowError,
    RecursionError,
)


def emulating() -> bool:
    """Whether CUDA modules run in the SIMT emulator (``EMBER_CUDA_EMULATE``), so a load
    picks no device image."""
    return os.environ.get("EMBER_CUDA_EMULATE", "") not in ("", "0")


class CudaPacker:
    """Collects the members and the manifest section of a CUDA model's kernel modules."""

    def __init__(self, archs: Sequence[str] | None, ptx: bool) -> None:
        # a string ("sm_80" or "sm_80,sm_90") is split by export_archs, not into characters
        self.requested = archs if archs is None or isinstance(archs, str) else list(archs)
        self.ptx = ptx
        self.archs: list[str] | None = None
        self.ptx_arch: str | None = None
        self.members: dict[str, bytes] = {}
        self.modules: list[dict[str, Any]] = []
        self._ids: dict[int, int] = {}

    def add(self, module: Any, where: str) -> int:
        """The index of ``module`` in the archive (stored on first sight)."""

        if id(module) in self._ids:
            return self._ids[id(module)]
        if not isinstance(module, CUDAModule):
            raise ArgumentError(f"export: the kernel of {where} is not a CUDA module")
        archs = export_archs(module.arch, self.requested)
        if self.archs is None:
            self.archs = archs
        elif archs != self.archs:  # one arch list per file keeps loading simple
            raise ArgumentError(
                f"export: the kernels of {where} were lowered for {module.arch}, unlike the "
                f"others ({self.archs[0]}); compile the whole model for one architecture"
            )
        k = self._ids[id(module)] = len(self.modules)
        source = module.cuda_source()
        try:
            images = build_images(source, archs, module.fast_math, self.ptx)
        except EmberError as e:
            raise e.add_context(f"while compiling the kernels of {where} for export") from None
        entry: dict[str, Any] = {
            "tir": f"kernels/k{k}.tir.json",
            "source": f"kernels/k{k}.cu",
            "cubin": {a: f"kernels/k{k}.{a}.cubin" for a in archs},
            "ptx": f"kernels/k{k}.ptx" if images.ptx is not None else None,
            "launches": launch_table(module),
        }
        self.members[entry["tir"]] = json.dumps(module_to_json(module)).encode()
        self.members[entry["source"]] = source.encode()
        for a, name in entry["cubin"].items():
            self.members[name] = images.cubins[a]
        if images.ptx is not None:
            self.members[entry["ptx"]] = images.ptx.encode()
            self.ptx_arch = images.ptx_arch
        self.modules.append(entry)
        return k

    def manifest_section(self) -> dict[str, Any]:

        section = {
            "archs": self.archs or [],
            "ptx_arch": self.ptx_arch,
            "nvrtc": nvrtc_version() if self.modules else None,
            "modules": self.modules,
        }
        return {**section, "sha256": section_digest(section)}


def section_digest(section: dict[str, Any]) -> str:
    """The SHA-256 of the section's canonical JSON (its own ``sha256`` left out), so the
    image table and launch metadata are as tamper-evident as the members."""
    body = {k: v for k, v in section.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class CudaLoader:
    """Rebuilds the CUDA modules of an artifact whose hashes were already checked."""

    def __init__(self, manifest: dict[str, Any], members: dict[str, bytes], path: Path) -> None:

        raw = manifest.get("cuda")
        check_cuda_section(raw, path)  # raises unless a dict with the fields read below
        section = cast("dict[str, Any]", raw)
        if section.get("sha256") != section_digest(section):
            raise InvalidModelError(
                f"{path}: the manifest's 'cuda' section does not match its hash (tampered?)"
            )
        self.section = section
        self.members = members
        self.path = path
        self.image = self._device_image()
        self._modules: dict[int, CUDAModule] = {}

    def _device_image(self) -> tuple[str, str] | None:
        """The image kind and arch this machine's GPU loads; None without one (or emulating)."""
        arch = None if emulating() else device.visible_arch()
        if arch is None:
            return None
        archs = [str(a) for a in self.section.get("archs", [])]
        return choose_image(archs, self.section.get("ptx_arch"), arch, str(self.path))

    def _member(self, name: Any) -> bytes:
        if not isinstance(name, str) or name not in self.members:
            raise InvalidModelError(f"{self.path}: the manifest names a missing member {name!r}")
        return self.members[name]

    def count(self) -> int:
        """How many kernel modules the file holds (a step's kernel must be one of them)."""
        return len(self.section["modules"])

    def module(self, k: Any) -> CUDAModule:
        if k in self._modules:
            return self._modules[k]
        modules = self.section["modules"]
        if not isinstance(k, int) or not 0 <= k < len(modules):
            raise InvalidModelError(f"{self.path}: a step names kernel module {k!r}, absent")
        module = self._rebuild(k, modules[k])
        self._modules[k] = module
        return module

    def _rebuild(self, k: int, entry: dict[str, Any]) -> CUDAModule:

        where = f"{self.path}: kernels/k{k}"
        try:
            data = json.loads(self._member(entry.get("tir")))
            source = self._member(entry.get("source")).decode()
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            raise InvalidModelError(f"{where}: unreadable TIR or source: {e}") from e
        try:  # the TIR is data from a file: printing or reading malformed TIR may fail anywhere
            module = module_from_parts(data, source, where)
            launches = launch_table(module)
        except InvalidModelError:
            raise
        except (EmberError, *_MALFORMED) as e:
            raise InvalidModelError(
                f"{where}: the stored TIR is malformed ({type(e).__name__}: {e})"
            ) from e
        if launches != entry.get("launches"):
            raise InvalidModelError(f"{where}: the manifest's launch table disagrees with its TIR")
        cubins = entry.get("cubin") or {}
        kind, arch = self.image or ("cubin", module.arch if module.arch in cubins else "")
        cubin = self._member(cubins[arch]) if kind == "cubin" and arch in cubins else b""
        ptx_name = entry.get("ptx")
        try:
            ptx = self._member(ptx_name).decode() if ptx_name else ""
        except UnicodeDecodeError as e:
            raise InvalidModelError(f"{where}: the stored PTX is not text") from e
        module.use_compiled(CompiledCuda(ptx, cubin, "", {}, arch or module.arch))
        return module


__all__ = ["CudaLoader", "CudaPacker", "emulating", "section_digest"]
