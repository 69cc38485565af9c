"""Warp shuffles: the block reductions' last steps, their CUDA text, and their emulation.

``block_reduce`` (reduce.cuda, softmax.cuda, layer_norm.cuda) halves in shared
memory down to 32 partials and lets the first warp finish with
``__shfl_xor_sync``. The emulator gathers across the lanes of each warp and
rejects a shuffle that a warp executes only in part; the CPU paths reject
shuffles with a clear message.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen_cuda.emulator import emulate
from ember.codegen_cuda.printer_cuda import TYPE_NAMES, print_kernel
from ember.codegen_cuda.schedules.block_reduce import block_reduce
from ember.errors import ArgumentError, CompileError, RaceError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.interp import run
from ember.tir.ir_builder import IRBuilder
from ember.tir.transform.vectorize_loops import vectorize_loops
from ember.tuner import create_task
from tests.nightly import sample_in_ci

XOR, DOWN = E.Intrinsic.WARP_SHUFFLE_XOR, E.Intrinsic.WARP_SHUFFLE_DOWN
KNOBS = [0, 1, 2, 3, 4]  # threads 32, 64, 128, 256, 512
COLS = [1, 31, 33, 1000]


def _build(name: str, args: tuple, knob: int, arch: str = "sm_80") -> Any:
    task = create_task(name, args=args, target=f"cuda -arch={arch}")
    s, tensors = task.instantiate({"threads": knob})
    mod = ember.build(s, tensors, target=f"cuda -arch={arch}")
    (kernel,) = mod.program.kernels
    assert kernel.attr("launch")[1] == (32 << knob, 1, 1)
    return mod


# -- the templates ------------------------------------------------------------------------


@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("knob", KNOBS)
def test_reduce_cuda_matches_numpy(rng, knob, cols):
    sample_in_ci(knob, cols)
    x = rng.uniform(-1, 1, (3, cols)).astype("float32")
    for kind, ref in (("sum", np.sum), ("max", np.max), ("min", np.min)):
        mod = _build("reduce.cuda", (3, cols, kind, "float32"), knob)
        y = np.full(3, np.nan, "float32")
        mod.emulate(x, y)
        np.testing.assert_allclose(y, ref(x, axis=1), rtol=1e-5, atol=1e-5, err_msg=kind)


@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("knob", KNOBS)
def test_softmax_cuda_matches_numpy(rng, knob, cols):
    x = rng.uniform(-4, 4, (3, cols)).astype("float32")
    mod = _build("softmax.cuda", (3, cols, "float32"), knob)
    y = np.full((3, cols), np.nan, "float32")
    mod.emulate(x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("knob", KNOBS)
def test_layer_norm_cuda_matches_numpy(rng, knob, cols):
    x = rng.uniform(-2, 2, (3, cols)).astype("float32") + 3.0
    g = rng.uniform(0.5, 1.5, cols).astype("float32")
    b = rng.uniform(-1, 1, cols).astype("float32")
    mod = _build("layer_norm.cuda", (3, cols, 1e-5, "float32"), knob)
    y = np.full((3, cols), np.nan, "float32")
    mod.emulate(x, g, b, y)
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    np.testing.assert_allclose(y, (x - mu) / np.sqrt(var + 1e-5) * g + b, rtol=1e-4, atol=1e-4)


TEMPLATES = {  # name -> (args, number of block reductions in the kernel)
    "reduce.cuda": ((4, 300, "max", "float32"), 1),
    "softmax.cuda": ((4, 300, "float32"), 2),
    "layer_norm.cuda": ((4, 300, 1e-5, "float32"), 2),
}


@pytest.mark.parametrize("knob", KNOBS)
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_intra_warp_steps_are_shuffles(name, knob):
    args, reductions = TEMPLATES[name]
    src = _build(name, args, knob).get_source("cuda")
    threads = 32 << knob
    # five xor exchanges (16, 8, 4, 2, 1) finish each reduction in the first warp
    offsets = re.findall(r"__shfl_xor_sync\(0xffffffffu, \w+, (\d+)\)", src)
    assert offsets == ["16", "8", "4", "2", "1"] * reductions
    assert "_step16" not in src and "_step1[" not in src
    assert src.count("_warp[32];") == reductions  # one value per lane of the first warp
    if threads > 32:
        assert src.count(" < 32) {") >= reductions  # only the first warp shuffles
    # per reduction: a barrier before each shared halving step (threads -> 32) and one
    # that publishes the warp's result; the tree alone needed log2(threads) + 1
    shared_steps = int(math.log2(threads // 32))
    assert src.count("__syncthreads();") == reductions * (shared_steps + 1)


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("knob", [0, 4])
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_templates_with_shuffles_compile(name, knob, arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    mod = _build(name, TEMPLATES[name][0], knob, arch=arch)
    assert "shfl.sync.bfly" in mod.get_source("ptx")
    for use in mod.resource_usage().values():
        assert use.local_bytes == 0 and use.spill_bytes == 0


def test_block_reduce_needs_a_whole_warp():
    with pytest.raises(ArgumentError, match="power of two of at least a warp"):
        block_reduce(2, 10, lambda r, c: E.const(1.0), "sum", 16, "red")


# -- hand-written kernels -----------------------------------------------------------------


def _shuffle_kernel(
    op: E.Intrinsic,
    offset: int | None,
    block: tuple[int, int] = (64, 1),
    blocks: int = 3,
    dtype: str = "float32",
    active: int | None = None,
    in_select: bool = False,
) -> S.PrimFunc:
    """``Y[i] = shuffle(X[i], offset)`` for every thread ``i`` of every block (an offset of
    None: ``threadIdx.x % 7``, per lane); ``active`` guards it to the first threads."""
    bx_n, by_n = block
    n = blocks * bx_n * by_n
    ib = IRBuilder()
    X = ib.param((n,), dtype, name="X")
    Y = ib.param((n,), dtype, name="Y")
    with ib.for_range(0, blocks, name="b", kind="thread_binding", thread_tag="blockIdx.x") as b:
        with ib.for_range(
            0, by_n, name="ty", kind="thread_binding", thread_tag="threadIdx.y"
        ) as ty:
            with ib.for_range(
                0, bx_n, name="tx", kind="thread_binding", thread_tag="threadIdx.x"
            ) as tx:
                t = ty * bx_n + tx
                i = b * (bx_n * by_n) + t
                off = tx % 7 if offset is None else offset
                value = E.warp_shuffle(op, X[i], off)
                if in_select:
                    value = E.select(t < 8, value, X[i])
                if active is None:
                    ib.store(Y, i, value)
                else:
                    with ib.if_then_else(t < active):
                        ib.store(Y, i, value)
    launch = ((blocks, 1, 1), (bx_n, by_n, 1))
    return ib.get_func("shuffle", attrs=(("kernel", True), ("launch", launch)))


def _reference(op: E.Intrinsic, x: np.ndarray, offset: int | np.ndarray) -> np.ndarray:
    """numpy: warps are rows of 32 consecutive threads; outside the warp, a lane keeps its own."""
    warps = x.reshape(-1, 32)
    lane = np.arange(32)
    src = lane ^ offset if op is XOR else lane + offset
    src = np.where((src >= 0) & (src < 32), src, lane)
    return warps[:, src].reshape(x.shape)


@pytest.mark.parametrize("offset", [0, 1, 2, 5, 16, 31])
@pytest.mark.parametrize("op", [XOR, DOWN], ids=["xor", "down"])
def test_emulated_shuffle_matches_numpy(rng, op, offset):
    f = _shuffle_kernel(op, offset)
    x = rng.uniform(-1, 1, 192).astype("float32")
    y = np.full(192, np.nan, "float32")
    emulate(f, x, y)
    np.testing.assert_array_equal(y, _reference(op, x, offset))


@pytest.mark.parametrize("dtype", ["int32", "float64", "float16"])
def test_emulated_shuffle_keeps_the_dtype(rng, dtype):
    x = (rng.uniform(-100, 100, 192)).astype(dtype)
    y = np.zeros(192, dtype)
    emulate(_shuffle_kernel(XOR, 3, dtype=dtype), x, y)
    np.testing.assert_array_equal(y, _reference(XOR, x, 3))


def test_emulated_shuffle_with_per_lane_offsets(rng):
    x = rng.uniform(-1, 1, 192).astype("float32")
    y = np.full(192, np.nan, "float32")
    emulate(_shuffle_kernel(XOR, None), x, y)  # lane mask threadIdx.x % 7
    i = np.arange(192)
    src = i - i % 32 + ((i % 32) ^ (i % 64 % 7))
    np.testing.assert_array_equal(y, x[src])


def test_emulated_shuffle_follows_the_linear_thread_order(rng):
    # a 16 x 4 block: warp 0 is threadIdx.y 0 and 1, warp 1 is threadIdx.y 2 and 3
    f = _shuffle_kernel(DOWN, 16, block=(16, 4), blocks=2)
    x = rng.uniform(-1, 1, 128).astype("float32")
    y = np.full(128, np.nan, "float32")
    emulate(f, x, y)
    np.testing.assert_array_equal(y, _reference(DOWN, x, 16))


def test_shuffle_in_a_whole_warp_under_a_guard_is_fine(rng):
    f = _shuffle_kernel(XOR, 4, active=32)  # the second warp of each block skips it whole
    x = rng.uniform(-1, 1, 192).astype("float32")
    y = np.full(192, np.nan, "float32")
    emulate(f, x, y)
    first = (np.arange(192) % 64) < 32
    np.testing.assert_array_equal(y[first], _reference(XOR, x, 4)[first])
    assert np.isnan(y[~first]).all()


def test_shuffle_in_part_of_a_warp_is_a_race():
    f = _shuffle_kernel(XOR, 1, active=16)
    x = np.linspace(-1, 1, 192, dtype="float32")
    with pytest.raises(RaceError, match=r"partial warp.*thread \(16, 0, 0\) does not execute"):
        emulate(f, x, np.empty(192, "float32"))


def test_shuffle_in_a_thread_dependent_select_is_a_race():
    f = _shuffle_kernel(XOR, 1, in_select=True)
    x = np.linspace(-1, 1, 192, dtype="float32")
    with pytest.raises(RaceError, match="partial warp"):
        emulate(f, x, np.empty(192, "float32"))


def test_shuffle_in_a_block_of_part_of_a_warp_is_a_race():
    f = _shuffle_kernel(XOR, 1, block=(48, 1), blocks=2)
    x = np.linspace(-1, 1, 96, dtype="float32")
    with pytest.raises(RaceError, match="only 48 threads"):
        emulate(f, x, np.empty(96, "float32"))


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", sorted(TYPE_NAMES))
def test_shuffle_kernels_compile(dtype, arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    from ember.codegen_cuda.nvrtc import compile_cuda

    for op, name in ((XOR, "__shfl_xor_sync"), (DOWN, "__shfl_down_sync")):
        src = print_kernel(_shuffle_kernel(op, 8, dtype=dtype))
        # a 4-bit value travels wrapped to its range (ember_wrap_int4), like every int4 value
        assert re.search(rf"{name}\(0xffffffffu, (ember_wrap_u?int4\()?X\[", src), src
        assert ".entry shuffle(" in compile_cuda(src, arch).ptx


# -- the CPU paths --------------------------------------------------------------------------


def test_interpreter_rejects_a_shuffle():
    f = _shuffle_kernel(XOR, 1)
    with pytest.raises(ArgumentError, match="reference interpreter cannot do"):
        run(f, np.ones(192, "float32"), np.empty(192, "float32"))


def test_llvm_rejects_a_shuffle():
    A = te.placeholder((64,), "float32", name="A")
    B = te.compute((64,), lambda i: E.warp_shuffle(XOR, A[i], 1), name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(CompileError, match="GPU warp shuffle"):
        ember.build(s, [A, B], target="llvm")


def test_a_shuffle_is_never_vectorized():
    ib = IRBuilder()
    X = ib.param((64,), "float32", name="X")
    Y = ib.param((64,), "float32", name="Y")
    with ib.for_range(0, 4, name="v", kind="vectorized") as v:
        ib.store(Y, v, E.warp_shuffle(XOR, X[v], 1))
    loop = vectorize_loops(ib.get_func("f")).body
    # short loops that cannot be vectorized are unrolled, one scalar shuffle per lane
    assert isinstance(loop, S.For) and loop.kind is S.ForKind.UNROLLED
    assert "x4" not in repr(loop)


def test_warp_shuffle_checks_its_operands():
    x = E.Var("x", "float32")
    assert E.warp_shuffle(XOR, x, 3).args[1].dtype == "int32"
    with pytest.raises(ArgumentError, match="not a warp shuffle"):
        E.warp_shuffle(E.Intrinsic.EXP, x, 1)
    with pytest.raises(ArgumentError, match="scalar"):
        E.warp_shuffle(XOR, E.Var("v", "float32x4"), 1)
