"""Reading ptxas reports and computing occupancy (no CUDA needed)."""

from __future__ import annotations

import pytest

from ember.codegen_cuda.resources import (
    ARCH_LIMITS,
    ResourceUsage,
    launch_bounds,
    max_threads_for_registers,
    occupancy,
    parse_ptxas_log,
)
from ember.errors import ArgumentError

LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'small' for 'sm_80'
ptxas info    : Function properties for small
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 2048 bytes smem, 360 bytes cmem[0]
ptxas info    : Function properties for helper
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'big' for 'sm_80'
ptxas info    : Function properties for big
ptxas         .     96 bytes stack frame, 64 bytes spill stores, 64 bytes spill loads
ptxas info    : Used 255 registers, 360 bytes cmem[0]
ptxas info    : Compile time = 8.265 ms
"""
SOURCE = (
    'extern "C" __global__ void __launch_bounds__(128) small(float* A) {}\n'
    'extern "C" __global__ void __launch_bounds__(1024) big(float* A) {}\n'
)


def test_parse_ptxas_log():
    usage = parse_ptxas_log(LOG, "sm_80", SOURCE)
    assert set(usage) == {"small", "big"}  # 'helper' is a device function
    assert usage["small"] == ResourceUsage(10, 2048, 0, 128, 0)
    big = usage["big"]
    assert (big.registers, big.shared_bytes, big.local_bytes, big.spill_bytes) == (255, 0, 96, 64)
    assert big.max_threads == 256  # 255 registers leave room for 8 warps only


def test_launch_bounds_from_source():
    assert launch_bounds(SOURCE) == {"small": 128, "big": 1024}


@pytest.mark.parametrize(
    ("registers", "arch", "expected"),
    [(32, "sm_80", 1024), (64, "sm_80", 1024), (128, "sm_80", 512), (255, "sm_90", 256)],
)
def test_max_threads_for_registers(registers, arch, expected):
    assert max_threads_for_registers(registers, arch) == expected
    assert max_threads_for_registers(registers, arch, launch_bound=96) == min(96, expected)


@pytest.mark.parametrize(
    ("registers", "shared", "threads", "arch", "blocks", "limited_by"),
    [
        (32, 0, 256, "sm_80", 8, "threads"),
        (64, 0, 256, "sm_80", 4, "registers"),
        (16, 0, 32, "sm_80", 32, "blocks"),
        (32, 48 * 1024, 128, "sm_80", 3, "shared memory"),
        (32, 100 * 1024, 128, "sm_90", 2, "shared memory"),
        (32, 0, 100, "sm_90", 16, "threads"),  # 100 threads occupy 4 warps
    ],
)
def test_occupancy(registers, shared, threads, arch, blocks, limited_by):
    occ = occupancy(ResourceUsage(registers, shared, 0, 1024), threads, arch)
    assert (occ.blocks_per_sm, occ.limited_by) == (blocks, limited_by)
    assert occ.warps_per_sm == blocks * -(-threads // 32)
    assert 0 < occ.fraction(arch) <= 1


def test_tables_cover_the_required_archs():
    for arch in ("sm_80", "sm_90"):
        limits = ARCH_LIMITS[arch]
        assert limits.registers_per_sm == 65536 and limits.max_threads_per_sm == 2048
        assert limits.max_blocks_per_sm == 32
    assert ARCH_LIMITS["sm_80"].max_shared_per_block == 163 * 1024
    assert ARCH_LIMITS["sm_90"].max_shared_per_block == 227 * 1024
    assert ARCH_LIMITS["sm_80"].static_shared_per_block == 48 * 1024


def test_occupancy_rejects_bad_input():
    usage = ResourceUsage(32, 0, 0, 1024)
    with pytest.raises(ArgumentError, match="sm_80"):
        occupancy(usage, 128, "sm_12")
    with pytest.raises(ArgumentError, match="1..1024"):
        occupancy(usage, 2048, "sm_80")
