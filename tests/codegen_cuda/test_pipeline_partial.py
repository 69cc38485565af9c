"""Pipelining one of several shared stages attached to the same loop, as TVM allows:
``s[BB].double_buffer()`` (or ``pipeline(n)``) on B's tile of a GEMM while A's tile
stays a plain copy. The buffered stage gets its stages, the plain copy keeps its
barriers; the emulator checks the numbers against numpy and every shared access for
races, on sm_80 (cp.async) and sm_75 (register prefetch)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ember
from ember import te
from tests.codegen_cuda.test_cuda_build import _DropBarrier
from tests.nightly import sample_in_ci


def _gemm(M: int, N: int, K: int, buffered: dict[str, int], tile: int = 16, bk: int = 8):
    """TVM's shared/local GEMM; ``buffered`` maps "A"/"B" to 2 (double_buffer) or a
    ``pipeline`` stage count."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    y, x = C.op.axis
    by, yi = s[C].split(y, factor=tile)
    bx, xi = s[C].split(x, factor=tile)
    ty, yi = s[C].split(yi, nparts=8)
    tx, xi = s[C].split(xi, nparts=8)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    for axis, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y")):
        s[C].bind(axis, te.thread_axis(tag))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(C.op.reduce_axis[0], factor=bk)
    s[CL].reorder(ko, ki, *s[CL].op.axis)  # the tiles are filled once per ko, by all threads
    for name, shared in (("A", AA), ("B", BB)):
        s[shared].compute_at(s[CL], ko)
        f = s[shared].fuse(*s[shared].op.axis)
        fo, fi = s[shared].split(f, factor=8)
        _, fo = s[shared].split(fo, factor=8)
        s[shared].bind(fo, te.thread_axis("threadIdx.y"))
        s[shared].bind(fi, te.thread_axis("threadIdx.x"))
        stages = buffered.get(name, 1)
        if stages == 2:
            s[shared].double_buffer()
        elif stages > 2:
            s[shared].pipeline(stages)
    return s, [A, B, C]


def _run(mod, rng, M, N, K):  # noqa: ANN001
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    mod.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    return a, b


CASES = [{"B": 2}, {"A": 2}, {"B": 3}, {"A": 3, "B": 2}]


@pytest.mark.parametrize("arch", ["sm_80", "sm_75"])
@pytest.mark.parametrize("buffered", CASES, ids=lambda d: "-".join(f"{k}{v}" for k, v in d.items()))
@pytest.mark.parametrize(("M", "N", "K"), [(32, 32, 32), (45, 37, 27), (16, 20, 5)])
def test_one_buffered_stage_matches_numpy(rng, arch, buffered, M, N, K):
    sample_in_ci(arch, buffered, M, N, K)
    s, args = _gemm(M, N, K, buffered)
    mod = ember.build(s, args, target=f"cuda -arch={arch}")
    _run(mod, rng, M, N, K)


def test_only_the_buffered_stage_gets_stages():
    s, args = _gemm(64, 64, 32, {"B": 2})
    mod = ember.build(s, args, target="cuda -arch=sm_80")
    text = repr(mod.program.kernels[0])
    loop = text[text.index("for k_outer") :]
    # B's next tile is issued asynchronously, then A's tile is copied plainly, a barrier
    # makes it visible, and the compute reads B's current stage
    assert loop.index("async_copy(B.shared[(k_outer + 1) % 2") < loop.index("A.shared[")
    assert "async_copy(A.shared" not in text
    assert loop.count('barrier("shared")') == 2
    shared = [line.strip() for line in mod.get_source().splitlines() if "__shared__" in line]
    # A's 16 x 8 tile once, B's 8 x 16 tile twice
    assert any(line.endswith("A_shared[128];") for line in shared)
    assert any(line.endswith("B_shared[256];") for line in shared)


@pytest.mark.parametrize(("arch", "buffered"), [("sm_80", {"B": 2}), ("sm_75", {"A": 2})])
def test_every_barrier_is_needed(rng, arch, buffered):
    M, N, K = 32, 32, 32
    s, args = _gemm(M, N, K, buffered)
    mod = ember.build(s, args, target=f"cuda -arch={arch}")
    a, b = _run(mod, rng, M, N, K)
    program = mod.program
    (kernel,) = program.kernels
    count = repr(kernel).count("barrier(")
    assert count >= 2  # the pipeline's one, and the plain copy's read-after-write one
    for k in range(count):
        mod.program = dataclasses.replace(program, kernels=(_DropBarrier(k).visit_func(kernel),))
        with pytest.raises(ember.RaceError):
            mod.emulate(a, b, np.empty((M, N), "float32"))
    mod.program = program


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_75"])
def test_one_buffered_stage_compiles(arch):
    s, args = _gemm(64, 64, 64, {"B": 2})
    mod = ember.build(s, args, target=f"cuda -arch={arch}")
    assert mod.get_source("ptx")
    (usage,) = mod.resource_usage().values()
    assert usage.spill_bytes == 0
