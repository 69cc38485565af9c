"""Software pipelining (``inject_pipeline``): multi-stage shared tiles, cp.async, their races."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.codegen_cuda.transform.inject_pipeline import Phase, phases_may_meet, split_stage
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Mutator
from ember.tuner import create_task
from tests.codegen_cuda.test_cuda_build import _DropBarrier
from tests.nightly import examples, sample_in_ci


def _matmul(shape, arch="sm_80", **knobs):  # noqa: ANN001, ANN003
    M, N, K = shape
    target = f"cuda -arch={arch}"
    task = create_task("matmul.cuda", args=(M, N, K, "float32"), target=target)
    space = task.config_space
    choices = {name: knob.default_index for name, knob in space.knobs.items()}
    for name, value in knobs.items():
        choices[name] = list(space.knobs[name].candidates).index(value)
    s, tensors = task.instantiate(choices)
    return ember.build(s, tensors, target=target, name="matmul")


def _inputs(rng, shape):  # noqa: ANN001
    M, N, K = shape
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    return a, b


def _emulate(mod, a, b):  # noqa: ANN001
    c = np.full((a.shape[0], b.shape[1]), np.nan, "float32")
    mod.emulate(a, b, c)
    return c


@pytest.mark.parametrize("arch", ["sm_80", "sm_75"])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", [(64, 64, 64), (70, 50, 33), (40, 72, 8)])
def test_pipelined_matmul_matches_numpy(rng, arch, stages, shape):
    sample_in_ci(arch, stages, shape)
    mod = _matmul(shape, arch, stages=stages)
    a, b = _inputs(rng, shape)
    np.testing.assert_allclose(_emulate(mod, a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_loop_shape_with_cp_async():
    mod = _matmul((64, 64, 64), "sm_80", stages=3)
    (kernel,) = mod.program.kernels
    text = repr(kernel)
    # two tiles in flight before the loop; then wait, one barrier, fill ahead, compute
    assert text.count("async_commit()") == 3
    assert text.count("async_wait(1)") == 1
    assert text.count('barrier("shared")') == 1
    source = mod.get_source("cuda")
    assert "cp.async.cg.shared.global" in source
    assert "cp.async.wait_group 1;" in source
    usage = mod.resource_usage()["matmul_kernel"]
    # three stages of the A tile (64 rows of 8, padded to 12 against bank conflicts) and
    # the B tile (8 rows of 64)
    assert usage.shared_bytes == 3 * ((63 * 12 + 8) + 8 * 64) * 4


def test_older_architectures_prefetch_through_registers():
    mod = _matmul((64, 64, 64), "sm_75", stages=2)
    (kernel,) = mod.program.kernels
    text = repr(kernel)
    assert "async" not in text
    assert text.count('barrier("shared")') == 1
    assert "cp.async" not in mod.get_source("cuda")
    # in the loop: the next tiles' global loads into registers, the compute, then the
    # registers into the other stage
    loop = text[text.index("for k_outer") :]
    load = loop.index("A.shared.next[ramp(0, 1, 4)] = A[")
    compute = loop.index("A.shared.local[")
    store = loop.index("] = A.shared.next[ramp(0, 1, 4)]")
    assert load < compute < store


def test_a_fill_too_big_for_registers_is_copied_directly(rng):
    # 128x32 A tiles over 32 threads: 128 floats a thread, over the register budget
    mod = _matmul((128, 64, 64), "sm_75", stages=2, bm=128, bn=16, bk=32, tm=8, tn=8)
    text = repr(mod.program.kernels[0])
    assert ".next" not in text
    assert text.count('barrier("shared")') == 1
    a, b = _inputs(rng, (128, 64, 64))
    np.testing.assert_allclose(_emulate(mod, a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_unpipelined_matmul_keeps_two_barriers():
    mod = _matmul((64, 64, 64), "sm_80", stages=1)
    (kernel,) = mod.program.kernels
    assert repr(kernel).count('barrier("shared")') == 2
    assert "async" not in repr(kernel)


@pytest.mark.parametrize(("arch", "stages"), [("sm_80", 2), ("sm_80", 3), ("sm_75", 2)])
def test_every_barrier_of_a_pipelined_kernel_is_needed(rng, arch, stages):
    shape = (64, 64, 32)
    mod = _matmul(shape, arch, stages=stages)
    a, b = _inputs(rng, shape)
    program = mod.program
    (kernel,) = program.kernels
    count = repr(kernel).count("barrier(")
    assert count >= 1
    for k in range(count):
        mod.program = dataclasses.replace(program, kernels=(_DropBarrier(k).visit_func(kernel),))
        with pytest.raises(ember.RaceError):
            _emulate(mod, a, b)
    mod.program = program


class _Wait(Mutator):
    """Every ``async_wait`` set to ``pending`` (None: removed)."""

    def __init__(self, pending: int | None) -> None:
        self.pending = pending

    def visit_AsyncWait(self, s: S.AsyncWait) -> S.Stmt:
        return S.seq() if self.pending is None else S.AsyncWait(self.pending)


@pytest.mark.parametrize("pending", [None, 2])
def test_reading_before_the_copy_lands_is_a_race(rng, pending):
    shape = (64, 64, 32)
    mod = _matmul(shape, "sm_80", stages=3)
    a, b = _inputs(rng, shape)
    (kernel,) = mod.program.kernels
    broken = _Wait(pending).visit_func(kernel)
    mod.program = dataclasses.replace(mod.program, kernels=(broken,))
    with pytest.raises(ember.RaceError, match="premature access.*has not landed"):
        _emulate(mod, a, b)


def test_waiting_for_everything_is_correct_but_not_pipelined(rng):
    shape = (64, 64, 32)
    mod = _matmul(shape, "sm_80", stages=3)
    a, b = _inputs(rng, shape)
    (kernel,) = mod.program.kernels
    mod.program = dataclasses.replace(mod.program, kernels=(_Wait(0).visit_func(kernel),))
    np.testing.assert_allclose(_emulate(mod, a, b), a @ b, rtol=1e-4, atol=1e-4)


@settings(max_examples=examples(12), deadline=None)
@given(
    m=st.integers(1, 80),
    n=st.integers(1, 80),
    k=st.integers(1, 70),
    stages=st.sampled_from([1, 2, 3, 4]),
    bk=st.sampled_from([4, 8, 16]),
    arch=st.sampled_from(["sm_75", "sm_80"]),
)
def test_pipelined_matmul_property(m, n, k, stages, bk, arch):
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    mod = _matmul((m, n, k), arch, stages=stages, bk=bk, bm=32, bn=32)
    a, b = _inputs(rng, (m, n, k))
    np.testing.assert_allclose(_emulate(mod, a, b), a @ b, rtol=1e-4, atol=1e-4)


# -- a hand-written schedule ---------------------------------------------------------------
def _row_sums(R: int, C: int, tile: int, stages: int | None, double: bool = False):  # noqa: ANN202
    """``out[r] = sum_c X[r, c]``: one thread per row, X tiles staged through shared memory."""
    X = te.placeholder((R, C), "float32", name="X")
    k = te.reduce_axis((0, C), name="k")
    out = te.compute((R,), lambda r: te.sum(X[r, k], axis=k), name="out")
    s = te.create_schedule(out.op)
    XS = s.cache_read(X, "shared", [out])
    (r,) = s[out].op.axis
    bx, tx = s[out].split(r, factor=32)
    s[out].bind(bx, "blockIdx.x")
    s[out].bind(tx, "threadIdx.x")
    ko, _ = s[out].split(s[out].op.reduce_axis[0], factor=tile)
    s[XS].compute_at(s[out], ko)
    if stages is not None:
        s[XS].pipeline(stages)
    if double:
        s[XS].double_buffer()
    rows, cols = s[XS].op.axis
    fused = s[XS].fuse(rows, cols)
    _, t = s[XS].split(fused, factor=32)
    s[XS].bind(t, "threadIdx.x")
    return s, [X, out]


@pytest.mark.parametrize(("stages", "double"), [(2, False), (3, False), (None, True)])
@pytest.mark.parametrize("shape", [(64, 40), (37, 29)])
def test_handwritten_schedule_pipelines(rng, stages, double, shape):
    R, C = shape
    s, args = _row_sums(R, C, 8, stages, double)
    mod = ember.build(s, args, target="cuda -arch=sm_80")
    assert "async_copy" in repr(mod.program.kernels[0])
    x = rng.uniform(-1, 1, shape).astype("float32")
    out = np.full((R,), np.nan, "float32")
    mod.emulate(x, out)
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_cpu_build_ignores_the_pipeline(rng):
    s, args = _row_sums(37, 29, 8, 3)
    del s, args  # a GPU schedule; the CPU takes a plain one
    X = te.placeholder((37, 29), "float32", name="X")
    k = te.reduce_axis((0, 29), name="k")
    out = te.compute((37,), lambda r: te.sum(X[r, k], axis=k), name="out")
    s = te.create_schedule(out.op)
    XS = s.cache_read(X, "global", [out])
    ko, _ = s[out].split(s[out].op.reduce_axis[0], factor=8)
    s[XS].compute_at(s[out], ko)
    s[XS].pipeline(3)
    mod = ember.build(s, [X, out], target="llvm")
    x = rng.uniform(-1, 1, (37, 29)).astype("float32")
    got = np.full((37,), np.nan, "float32")
    mod(x, got)
    np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_pipeline_rejects_bad_stage_counts():
    X = te.placeholder((8, 8), "float32", name="X")
    Y = te.compute((8, 8), lambda i, j: X[i, j] + 1, name="Y")
    s = te.create_schedule(Y.op)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ember.ScheduleError, match="stages must be an integer"):
            s[Y].pipeline(bad)


def test_pipelining_a_stage_that_reads_shared_memory_is_refused():
    X = te.placeholder((64, 32), "float32", name="X")
    k = te.reduce_axis((0, 32), name="k")
    out = te.compute((64,), lambda r: te.sum(X[r, k], axis=k), name="out")
    s = te.create_schedule(out.op)
    XS = s.cache_read(X, "shared", [out])
    XS2 = s.cache_read(XS, "shared", [out])
    (r,) = s[out].op.axis
    bx, tx = s[out].split(r, factor=32)
    s[out].bind(bx, "blockIdx.x")
    s[out].bind(tx, "threadIdx.x")
    ko, _ = s[out].split(s[out].op.reduce_axis[0], factor=8)
    for stage in (XS, XS2):
        s[stage].compute_at(s[out], ko)
        fused = s[stage].fuse(*s[stage].op.axis)
        _, t = s[stage].split(fused, factor=32)
        s[stage].bind(t, "threadIdx.x")
    s[XS2].pipeline(2)
    with pytest.raises(ember.LoweringError, match="only a copy from global memory"):
        ember.build(s, [X, out], target="cuda")


# -- the stage index and its phases ----------------------------------------------------------
def test_split_stage_reads_back_the_phase():
    ko = E.Var("ko")
    rest = E.Var("t") * 4
    for e, want in ((ko, Phase(ko, 0, 3)), (ko + 2, Phase(ko, 2, 3)), (E.const(1), None)):
        mod = E.BinOp("int32", E.BinaryOp.FLOORMOD, e, E.const(3))
        term = E.BinOp("int32", E.BinaryOp.MUL, mod, E.const(512))
        index = E.BinOp("int32", E.BinaryOp.ADD, term, rest)
        phase, inner = split_stage(index)
        assert inner is rest
        assert phase == (want or Phase(None, 1, 3))
    assert split_stage(rest + 3) is None
    assert not phases_may_meet(Phase(ko, 2, 3), Phase(ko, 0, 3))
    assert phases_may_meet(Phase(ko, 3, 3), Phase(ko, 0, 3))
    assert phases_may_meet(Phase(None, 0, 3), Phase(ko, 0, 3))
    assert phases_may_meet(None, Phase(ko, 1, 3))


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_pipelined_kernels_compile(arch, stages):
    sample_in_ci(arch, stages)
    mod = _matmul((256, 256, 256), arch, stages=stages, bm=128, bn=128, bk=16, tm=8, tn=8)
    usage = mod.resource_usage()["matmul_kernel"]
    assert usage.spill_bytes == 0
    assert usage.registers <= 255
    total = usage.shared_bytes + usage.dynamic_shared_bytes
    assert total == stages * (128 * 16 + 16 * 128) * 4  # over 48 KiB: dynamic
    assert ("cp.async" in mod.get_source("ptx")) == (arch != "sm_75")
