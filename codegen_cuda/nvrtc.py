"""Compile CUDA C to PTX and cubin in-process with NVRTC, cached on disk by content.

The CUDA source comes from :mod:`ember.codegen_cuda.printer_cuda`; what this
module gives back (:class:`CompiledCuda`) is what the driver runtime loads and what
``resource_usage()`` reports. It uses cuda-python's NVRTC bindings and the headers
of the ``nvidia-*`` wheels (found through the installed package, never a system
toolkit), so it needs no GPU. ptxas runs with ``-v`` and its report becomes one
:class:`~ember.codegen_cuda.resources.ResourceUsage` per kernel. A rejected source
raises ``CompileError`` showing the offending lines; results are stored under
``ember.config.cache_dir()/cuda`` keyed by a hash of source, arch, options and
NVRTC version, so rebuilding an unchanged kernel costs a file read.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ember import config, disk_cache
from ember.codegen_cuda.resources import ResourceUsage, parse_ptxas_log
from ember.errors import ArgumentError, CompileError, DeviceError

PROGRAM_NAME = "ember_kernels.cu"
_ARCH = re.compile(r"^(sm|compute)_\d+[a-z]?$")
_ERROR_LINE = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?P<kind>error|catastrophic error)")
CONTEXT_LINES = 2
MAX_SHOWN_ERRORS = 3


@dataclass(frozen=True)
class CompiledCuda:
    """NVRTC's output for one translation unit; ``resources`` is keyed by kernel name."""

    ptx: str
    cubin: bytes
    log: str
    resources: dict[str, ResourceUsage] = field(default_factory=dict)
    arch: str = "sm_80"
    from_cache: bool = False


def _import_nvrtc() -> Any:
    try:
        return importlib.import_module("cuda.bindings.nvrtc")
    except ImportError as e:
        raise DeviceError(
            "compiling CUDA needs cuda-python with NVRTC, which is not installed; "
            "install the extra with `pip install ember[cuda]`"
        ) from e


@lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """Header folders of the installed NVIDIA wheels (those holding ``cuda_fp16.h``)."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    found: list[str] = []
    for root in roots:
        for candidate in sorted(Path(root).glob("*/include")):
            if (candidate / "cuda_fp16.h").is_file() and str(candidate) not in found:
                found.append(str(candidate))
    return tuple(found)


def _options(arch: str, fast_math: bool, extra: tuple[str, ...]) -> list[str]:
    opts = [f"--gpu-architecture={arch}", "--std=c++17", "--ptxas-options=-v"]
    if fast_math:
        opts.append("--use_fast_math")
    return opts + list(extra)


def _check(nvrtc: Any, result: tuple[Any, ...], what: str) -> tuple[Any, ...]:
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise DeviceError(f"NVRTC failed to {what}: {text.decode(errors='replace')}")
    return result[1:]


def _read(nvrtc: Any, prog: Any, size_fn: str, get_fn: str) -> bytes:
    (size,) = _check(nvrtc, getattr(nvrtc, size_fn)(prog), f"size the output ({size_fn})")
    buf = b" " * size
    _check(nvrtc, getattr(nvrtc, get_fn)(prog, buf), f"read the output ({get_fn})")
    return buf


def nvrtc_version() -> str:
    """The NVRTC version as ``"major.minor"``, for cache keys and error messages."""
    nvrtc = _import_nvrtc()
    major, minor = _check(nvrtc, nvrtc.nvrtcVersion(), "report its version")
    return f"{major}.{minor}"


@lru_cache(maxsize=1)
def supported_archs() -> tuple[str, ...]:
    """The ``sm_XX`` architectures this NVRTC compiles for (``nvrtcGetSupportedArchs``).

    Each CUDA release drops old architectures (CUDA 13 no longer builds sm_70), so
    the list comes from the installed library rather than from a table here.
    """
    nvrtc = _import_nvrtc()
    (archs,) = _check(nvrtc, nvrtc.nvrtcGetSupportedArchs(), "list its architectures")
    return tuple(f"sm_{int(a)}" for a in archs)


def check_arch(arch: str) -> None:
    """Refuse an architecture this NVRTC cannot compile for, listing the ones it can.

    ``sm_90a`` and ``compute_90`` count as 90: the suffix selects features, not a
    different base architecture.
    """
    if not isinstance(arch, str) or not _ARCH.match(arch):
        raise ArgumentError(f"unknown CUDA architecture {arch!r}; expected e.g. 'sm_80' or 'sm_90'")
    number = int(re.sub(r"\D", "", arch))
    supported = supported_archs()
    if f"sm_{number}" not in supported:
        raise ArgumentError(
            f"the installed NVRTC {nvrtc_version()} cannot compile for {arch}; "
            f"it supports {', '.join(supported)}"
        )


def format_compile_error(source: str, log: str, arch: str, name: str = PROGRAM_NAME) -> str:
    """The compiler's errors, each followed by the source lines around it, the line marked."""
    lines = source.splitlines()
    width = len(str(len(lines)))
    errors = [m for m in map(_ERROR_LINE.match, log.splitlines()) if m]
    parts = [f"NVRTC could not compile '{name}' for {arch}:"]
    for m in errors[:MAX_SHOWN_ERRORS]:
        parts.append(m.string.strip())
        if m.group("file") != name:
            continue  # inside a header: its lines are not ours to show
        bad = int(m.group("line"))
        lo, hi = max(1, bad - CONTEXT_LINES), min(len(lines), bad + CONTEXT_LINES)
        for n in range(lo, hi + 1):
            marker = ">" if n == bad else " "
            parts.append(f"  {marker} {n:>{width}} | {lines[n - 1]}")
    if len(errors) > MAX_SHOWN_ERRORS:
        parts.append(f"... and {len(errors) - MAX_SHOWN_ERRORS} more errors (see .log)")
    if not errors:
        parts.append(log.strip() or "(no log)")
    return "\n".join(parts)


def _compile(source: str, arch: str, opts: list[str], name: str) -> tuple[str, bytes, str]:
    nvrtc = _import_nvrtc()
    (prog,) = _check(
        nvrtc, nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "start"
    )
    try:
        all_opts = [o.encode() for o in opts + [f"-I{d}" for d in include_dirs()]]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(all_opts), all_opts)
        log = _read(nvrtc, prog, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog")
        log_text = log.rstrip(b"\x00 ").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(
                format_compile_error(source, log_text, arch, name), source=source, log=log_text
            )
        ptx = _read(nvrtc, prog, "nvrtcGetPTXSize", "nvrtcGetPTX").rstrip(b"\x00")
        cubin = b""
        if arch.startswith("sm_"):
            cubin = _read(nvrtc, prog, "nvrtcGetCUBINSize", "nvrtcGetCUBIN")
        return ptx.decode(), cubin, log_text
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _cache_key(source: str, arch: str, opts: list[str]) -> str:
    payload = json.dumps([source, arch, opts, nvrtc_version()], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _load_cached(path: Path) -> tuple[str, bytes, str] | None:
    try:
        ptx = (path / "kernel.ptx").read_text()
        cubin = (path / "kernel.cubin").read_bytes()
        log = (path / "compile.log").read_text()
    except OSError:
        return None
    disk_cache.touch(path)
    return ptx, cubin, log


def _store_cached(path: Path, ptx: str, cubin: bytes, log: str) -> None:
    """Write into a fresh folder and rename it into place, so readers never see half a entry."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=path.parent))
        (tmp / "kernel.ptx").write_text(ptx)
        (tmp / "kernel.cubin").write_bytes(cubin)
        (tmp / "compile.log").write_text(log)
        try:
            os.replace(tmp, path)
        except OSError:  # another process stored the same entry first
            shutil.rmtree(tmp, ignore_errors=True)
        disk_cache.trim()
    except OSError:
        pass  # an unwritable cache only costs the next compile


def compile_cuda(
    source: str,
    arch: str = "sm_80",
    fast_math: bool = False,
    options: tuple[str, ...] = (),
    name: str = PROGRAM_NAME,
    use_cache: bool = True,
) -> CompiledCuda:
    """Compile ``source`` for ``arch`` ("sm_80", "sm_90"; "compute_XX" gives PTX only)."""
    check_arch(arch)
    opts = _options(arch, fast_math, tuple(options))
    use_cache = use_cache and config.disk_cache_enabled()
    path = config.cache_dir() / "cuda" / _cache_key(source, arch, opts)
    cached = _load_cached(path) if use_cache else None
    if cached is not None:
        ptx, cubin, log = cached
    else:
        ptx, cubin, log = _compile(source, arch, opts, name)
        if use_cache:
            _store_cached(path, ptx, cubin, log)
    resources = parse_ptxas_log(log, arch, source)
    return CompiledCuda(ptx, cubin, log, resources, arch, from_cache=cached is not None)


__all__ = [
    "CompiledCuda",
    "compile_cuda",
    "format_compile_error",
    "include_dirs",
    "nvrtc_version",
]
