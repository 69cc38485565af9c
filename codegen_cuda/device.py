"""Is there a CUDA device here, and which? Asked of the driver without ever raising.

Building never needs a device; running does. These functions turn every way of
not having one (no cuda-python, no driver library, ``cuInit`` failing, zero
devices) into a plain answer and a sentence saying why, for ``ember info`` and
for the ``DeviceError`` a call raises.
"""

from __future__ import annotations

from functools import lru_cache

from ember.codegen_cuda.nvrtc import nvrtc_version, supported_archs


@lru_cache(maxsize=1)
def _probe() -> tuple[list[tuple[str, int, int, int]], str]:
    """(devices as (name, major, minor, bytes), reason there are none)."""
    try:
        # optional dependency: cuda-python
        from cuda.bindings import driver
    except ImportError:
        return [], "cuda-python is not installed (pip install ember[cuda])"
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:  # noqa: BLE001 - the driver library itself is missing
        return [], f"no CUDA driver library ({type(e).__name__})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return [], f"cuInit failed with {err.name}"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return [], "the driver reports no CUDA device"
    devices = []
    for ordinal in range(count):
        _, dev = driver.cuDeviceGet(ordinal)
        _, raw = driver.cuDeviceGetName(64, dev)
        name = raw.split(b"\0", 1)[0].decode(errors="replace")
        attr = driver.CUdevice_attribute
        _, major = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
        )
        _, minor = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
        )
        _, mem = driver.cuDeviceTotalMem(dev)
        devices.append((name, major, minor, mem))
    return devices, ""


def device_available() -> bool:
    """Whether a CUDA device can be used here, so GPU paths and tests can step aside."""
    return bool(_probe()[0])


def visible_arch() -> str | None:
    """``"sm_90"`` for device 0's compute capability, or None without a device."""
    devices, _ = _probe()
    if not devices:
        return None
    _, major, minor, _ = devices[0]
    return f"sm_{major}{minor}"


@lru_cache(maxsize=1)
def driver_version() -> str | None:
    """The CUDA driver's version ("12.4"), or None when there is no driver to ask."""
    try:
        # optional dependency: cuda-python
        from cuda.bindings import driver

        err, version = driver.cuDriverGetVersion()
    except Exception:  # noqa: BLE001 - no cuda-python or no driver library
        return None
    if err != driver.CUresult.CUDA_SUCCESS:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def describe() -> list[str]:
    """Lines for ``ember info``: NVRTC, the driver's devices, or why there are none."""
    lines = []
    try:
        lines.append(f"nvrtc {nvrtc_version()}, compiles for {', '.join(supported_archs())}")
    except Exception as e:  # noqa: BLE001 - report, do not fail
        lines.append(f"nvrtc: unavailable ({e})")
    version = driver_version()
    lines.append(f"cuda driver {version}" if version else "cuda driver: not found")
    devices, reason = _probe()
    if not devices:
        lines.append(f"no CUDA device: {reason}; CUDA modules build, and run with .emulate()")
    for n, (name, major, minor, mem) in enumerate(devices):
        lines.append(f"cuda:{n} {name}, sm_{major}{minor}, {mem / 2**30:.1f} GiB")
    return lines
