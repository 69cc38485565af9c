"""Which GPU images a CUDA artifact carries, and which of them a given device can load.

A cubin is machine code for one architecture family: a cubin for ``sm_XY`` runs on
devices of compute capability ``X.Z`` with ``Z >= Y`` (same major version), and an
arch-specific one (``sm_90a``) only on ``9.0``. PTX is the virtual ISA: the driver
compiles it at load time (``cuModuleLoadData`` takes PTX text) for any device at
least as new as its ``.target``, which is what keeps an artifact usable on GPUs
newer than any cubin it holds. Exported models carry a cubin per architecture in
:func:`export_archs` and the PTX of the lowest; :func:`choose_image` picks for a
device and says clearly when nothing fits. Building goes through NVRTC
(:func:`build_images`, cached on disk like every compile).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ember.codegen_cuda.nvrtc import compile_cuda
from ember.errors import ArgumentError, DeviceError

DEFAULT_EXPORT_ARCHS = ("sm_80", "sm_90")
_ARCH = re.compile(r"^(sm|compute)_(\d{2,3})([af]?)$")  # sm_90a, sm_100f: arch-specific


def arch_parts(arch: str) -> tuple[int, int, str]:
    """``"sm_86"`` -> (8, 6, ""); ``"sm_90a"`` -> (9, 0, "a"); ``"sm_120"`` -> (12, 0, "")."""
    m = _ARCH.match(arch)
    if m is None:
        raise ArgumentError(f"unknown CUDA architecture {arch!r}; expected e.g. 'sm_80' or 'sm_90'")
    number = int(m.group(2))
    return number // 10, number % 10, m.group(3)


def _order(arch: str) -> tuple[int, int, str]:
    return arch_parts(arch)


def export_archs(lowered: str, requested: str | Sequence[str] | None = None) -> list[str]:
    """The architectures to store cubins for, lowest first; ``requested`` is a list, or one
    string of comma-separated names.

    Kernels are lowered for one architecture (``lowered``: shared-memory limits,
    asynchronous copies), so a cubin for an older one is refused; the default is the
    lowered architecture and each of ``sm_80``/``sm_90`` newer than it.
    """
    low = _order(lowered)[:2]
    if isinstance(requested, str):  # "sm_80" or "sm_80,sm_90", as the CLI's --arch takes it
        requested = [a.strip() for a in requested.split(",") if a.strip()]
    if requested is None:
        chosen = [lowered] + [a for a in DEFAULT_EXPORT_ARCHS if _order(a)[:2] > low]
    else:
        chosen = [str(a) for a in requested]
        if not chosen:
            raise ArgumentError("export: give at least one CUDA architecture (e.g. sm_80)")
        for a in chosen:
            if not a.startswith("sm_"):
                raise ArgumentError(f"export: {a!r} is not a cubin architecture; use sm_XX")
            if _order(a)[:2] < low:
                raise ArgumentError(
                    f"export: the kernels were lowered for {lowered}, so a cubin for {a} could "
                    f"not run them; compile the model with target 'cuda -arch={a}' instead"
                )
    return sorted(dict.fromkeys(chosen), key=_order)


@dataclass
class Images:
    """One module's compiled images: cubin per ``sm_XX``, and PTX (``ptx_arch``) or none."""

    cubins: dict[str, bytes]
    ptx: str | None = None
    ptx_arch: str | None = None  # "compute_80": the oldest device that can JIT it
    logs: dict[str, str] = field(default_factory=dict)  # ptxas reports, per arch


def build_images(source: str, archs: Sequence[str], fast_math: bool, ptx: bool) -> Images:
    """Compile ``source`` with NVRTC for each of ``archs`` (keeping the lowest's PTX)."""
    images = Images({})
    for arch in archs:
        out = compile_cuda(source, arch, fast_math=fast_math)
        images.cubins[arch] = out.cubin
        images.logs[arch] = out.log
        if ptx and images.ptx is None:
            images.ptx = out.ptx
            images.ptx_arch = "compute_" + arch.removeprefix("sm_")
    return images


def cubin_runs_on(cubin_arch: str, device_arch: str) -> bool:
    """Whether a cubin built for ``cubin_arch`` loads on a ``device_arch`` device."""
    major, minor, suffix = arch_parts(cubin_arch)
    d_major, d_minor, _ = arch_parts(device_arch)
    if suffix == "a":  # arch-specific: that capability only
        return (major, minor) == (d_major, d_minor)
    return major == d_major and minor <= d_minor  # plain and family-specific ("f")


def ptx_runs_on(ptx_arch: str, device_arch: str) -> bool:
    """Whether PTX targeting ``ptx_arch`` can be JIT-compiled for a ``device_arch`` device."""
    major, minor, suffix = arch_parts(ptx_arch)
    d_major, d_minor, _ = arch_parts(device_arch)
    if suffix == "a":
        return (major, minor) == (d_major, d_minor)
    if suffix == "f":
        return major == d_major and minor <= d_minor
    return (major, minor) <= (d_major, d_minor)


def choose_image(
    cubin_archs: Sequence[str], ptx_arch: str | None, device_arch: str, where: str = "the model"
) -> tuple[str, str]:
    """``("cubin", arch)`` for the best cubin the device runs (its own, else the newest of
    its family), else ``("ptx", ptx_arch)`` to JIT, else a ``DeviceError`` saying why."""
    fitting = [a for a in cubin_archs if cubin_runs_on(a, device_arch)]
    if device_arch in fitting:
        return "cubin", device_arch
    if fitting:
        return "cubin", max(fitting, key=_order)
    if ptx_arch is not None and ptx_runs_on(ptx_arch, device_arch):
        return "ptx", ptx_arch
    held = ", ".join(cubin_archs) or "none"
    ptx_text = f"PTX for {ptx_arch} (too new for it)" if ptx_arch else "no PTX"
    raise DeviceError(
        f"{where} cannot run on this GPU ({device_arch}): it holds cubins for {held} and "
        f"{ptx_text}; export it again with archs including {device_arch} (ember compile "
        f"--target 'cuda -arch={device_arch}')"
    )


__all__ = [
    "DEFAULT_EXPORT_ARCHS",
    "Images",
    "arch_parts",
    "build_images",
    "choose_image",
    "cubin_runs_on",
    "export_archs",
    "ptx_runs_on",
]
