"""Which images an export stores and which one a device loads (no GPU or NVRTC needed).

CUDA's rules, written out here as the reference: a cubin for compute capability X.Y
runs on X.Z with Z >= Y; an arch-specific cubin (``sm_90a``) only on 9.0, a
family-specific one (``sm_100f``) on 10.Z; PTX for X.Y JIT-compiles on any device of
capability >= X.Y.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ember.codegen_cuda.images import arch_parts, choose_image, export_archs
from ember.errors import ArgumentError, DeviceError

CAPABILITIES = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0), (12, 1)]


def _sm(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"


@pytest.mark.parametrize(
    "arch, parts",
    [
        ("sm_86", (8, 6, "")),
        ("sm_90a", (9, 0, "a")),
        ("sm_120", (12, 0, "")),
        ("compute_80", (8, 0, "")),
    ],
)
def test_arch_parts(arch, parts):
    assert arch_parts(arch) == parts


@pytest.mark.parametrize("bad", ["sm80", "sm_", "gfx90a", "sm_8x"])
def test_bad_arch_names_are_argument_errors(bad):
    with pytest.raises(ArgumentError, match="unknown CUDA architecture"):
        arch_parts(bad)


@pytest.mark.parametrize(
    "cubins, ptx, device, want",
    [
        (["sm_80", "sm_90"], "compute_80", "sm_90", ("cubin", "sm_90")),
        (["sm_80", "sm_90"], "compute_80", "sm_86", ("cubin", "sm_80")),
        (["sm_80", "sm_86"], "compute_80", "sm_89", ("cubin", "sm_86")),
        (["sm_80", "sm_90"], "compute_80", "sm_120", ("ptx", "compute_80")),
        (["sm_90a"], "compute_90", "sm_90", ("cubin", "sm_90a")),
        (["sm_90a"], "compute_90", "sm_100", ("ptx", "compute_90")),
        (["sm_100f"], None, "sm_103", ("cubin", "sm_100f")),
        (["sm_100a"], "compute_100f", "sm_103", ("ptx", "compute_100f")),
    ],
)
def test_choose_image(cubins, ptx, device, want):
    assert choose_image(cubins, ptx, device) == want


@pytest.mark.parametrize(
    "cubins, ptx, device, phrase",
    [
        (["sm_90"], None, "sm_120", "cubins for sm_90 and no PTX"),
        (["sm_80", "sm_90"], "compute_80", "sm_75", r"PTX for compute_80 \(too new for it\)"),
        ([], None, "sm_80", "cubins for none"),
    ],
)
def test_nothing_fits_is_a_device_error_naming_the_device(cubins, ptx, device, phrase):
    with pytest.raises(DeviceError, match=phrase) as info:
        choose_image(cubins, ptx, device, "m.ember")
    assert device in str(info.value) and "m.ember" in str(info.value)


def _runs(kind: str, arch: str, device: tuple[int, int]) -> bool:
    major, minor, suffix = arch_parts(arch)
    if suffix == "a":
        return (major, minor) == device
    if kind == "cubin" or suffix == "f":
        return major == device[0] and minor <= device[1]
    return (major, minor) <= device


@given(
    st.lists(st.sampled_from(CAPABILITIES), max_size=4),
    st.one_of(st.none(), st.sampled_from(CAPABILITIES)),
    st.sampled_from(CAPABILITIES),
)
def test_the_choice_always_runs_and_prefers_a_cubin(cubins, ptx, device):
    arches = [_sm(c) for c in cubins]
    ptx_arch = None if ptx is None else f"compute_{ptx[0]}{ptx[1]}"
    runnable = [a for a in arches if _runs("cubin", a, device)]
    ptx_ok = ptx_arch is not None and _runs("ptx", ptx_arch, device)
    if not runnable and not ptx_ok:
        with pytest.raises(DeviceError):
            choose_image(arches, ptx_arch, _sm(device))
        return
    kind, arch = choose_image(arches, ptx_arch, _sm(device))
    assert _runs(kind, arch, device)
    assert kind == ("cubin" if runnable else "ptx")
    if kind == "cubin":  # the newest cubin of the device's family
        assert arch_parts(arch)[:2] == max(arch_parts(a)[:2] for a in runnable)


@pytest.mark.parametrize(
    "lowered, requested, want",
    [
        ("sm_80", None, ["sm_80", "sm_90"]),
        ("sm_75", None, ["sm_75", "sm_80", "sm_90"]),
        ("sm_90", None, ["sm_90"]),
        ("sm_86", None, ["sm_86", "sm_90"]),
        ("sm_80", ["sm_90", "sm_80", "sm_90"], ["sm_80", "sm_90"]),
        ("sm_80", ["sm_120"], ["sm_120"]),
    ],
)
def test_export_archs(lowered, requested, want):
    assert export_archs(lowered, requested) == want


@pytest.mark.parametrize(
    "requested, phrase",
    [([], "at least one"), (["sm_75"], "lowered for sm_80"), (["compute_80"], "sm_XX")],
)
def test_export_archs_refusals(requested, phrase):
    with pytest.raises(ArgumentError, match=phrase):
        export_archs("sm_80", requested)
