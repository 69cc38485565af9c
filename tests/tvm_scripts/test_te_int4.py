"""int4 and uint4 tensors, written as TVM's TE tests write them (only the import differs).

TVM accepts ``"int4"``/``"uint4"`` wherever a dtype goes; arithmetic wraps to 4 bits
(int4: -8..7, uint4: 0..15). Ember keeps one 4-bit value per byte: an int4 tensor is
an ``int8`` numpy array (sign-extended), a uint4 tensor a ``uint8`` one (zero-extended),
where TVM's NDArray packs two values into each byte. Every reference below is numpy
with the 4-bit wrap written out (:func:`wrap4`), never another Ember path.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember as tvm
from ember import te
from ember.errors import ArgumentError
from ember.tir.arith.analyzer import Analyzer
from ember.tir.interp import run as interpret
from tests.codegen_cuda.host_cuda import have_compiler, run_on_host
from tests.nightly import examples
from tests.tvm_scripts.common import CUDA

DTYPES = ("int4", "uint4")
STORAGE = {"int4": np.int8, "uint4": np.uint8}
RANGE = {"int4": (-8, 8), "uint4": (0, 16)}


def wrap4(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` (any integers) reduced to 4-bit two's complement, in the storage type."""
    x = np.asarray(x).astype(np.int64)
    low = x & 15
    out = (low ^ 8) - 8 if dtype == "int4" else low
    return out.astype(STORAGE[dtype])


def random4(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    lo, hi = RANGE[dtype]
    return rng.integers(lo, hi, size=shape).astype(STORAGE[dtype])


def elementwise(n: int, m: int, dtype: str):
    """C = A*B - A + 5 (wraps), D = int4(F) + C (a float truncated, then wrapped),
    E = int32(D), G = max(A, B) if A < B else A // B-ish: compare, select and divide."""
    A = te.placeholder((n, m), name="A", dtype=dtype)
    B = te.placeholder((n, m), name="B", dtype=dtype)
    F = te.placeholder((n, m), name="F", dtype="float32")
    C = te.compute((n, m), lambda i, j: A[i, j] * B[i, j] - A[i, j] + tvm.tir.const(5, dtype))
    D = te.compute((n, m), lambda i, j: F[i, j].astype(dtype) + C[i, j], name="D")
    E = te.compute((n, m), lambda i, j: D[i, j].astype("int32"), name="E")
    G = te.compute(
        (n, m),
        lambda i, j: tvm.tir.Select(
            A[i, j] + B[i, j] < C[i, j], te.max(A[i, j], B[i, j]), A[i, j] - B[i, j]
        ),
        name="G",
    )
    return (A, B, F), (C, D, E, G)


def elementwise_reference(a: np.ndarray, b: np.ndarray, f: np.ndarray, dtype: str):
    ai, bi = a.astype(np.int64), b.astype(np.int64)
    c = wrap4(ai * bi - ai + 5, dtype)
    d = wrap4(np.trunc(f).astype(np.int64) + c, dtype)
    s = wrap4(ai + bi, dtype).astype(np.int64)
    g = np.where(s < c, np.maximum(a, b), wrap4(ai - bi, dtype))
    return c, d, d.astype(np.int32), g.astype(STORAGE[dtype])


def _inputs(rng: np.random.Generator, shape: tuple[int, int], dtype: str):
    a, b = random4(rng, shape, dtype), random4(rng, shape, dtype)
    f = (rng.standard_normal(shape) * 30).astype(np.float32)  # many casts leave -8..15
    return a, b, f


def _outputs(shape: tuple[int, int], dtype: str):
    filler = np.full(shape, 99, STORAGE[dtype])  # out of range: an unwritten element shows
    return filler.copy(), filler.copy(), np.full(shape, 99, np.int32), filler.copy()


def _check(outs, refs) -> None:
    for got, want in zip(outs, refs):
        np.testing.assert_array_equal(got, want)


def _gpu_schedule(outs):
    s = te.create_schedule([t.op for t in outs])
    for t in outs:
        fused = s[t].fuse(*s[t].op.axis)
        bx, tx = s[t].split(fused, factor=32)
        s[t].bind(bx, te.thread_axis("blockIdx.x"))
        s[t].bind(tx, te.thread_axis("threadIdx.x"))
    return s


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 13), (1, 5)])
def test_int4_elementwise_llvm_and_interpreter(rng, dtype, shape):
    ins, outs = elementwise(*shape, dtype)
    s = te.create_schedule([t.op for t in outs])
    a, b, f = _inputs(rng, shape, dtype)
    refs = elementwise_reference(a, b, f, dtype)
    got = _outputs(shape, dtype)
    tvm.build(s, [*ins, *outs], target="llvm")(a, b, f, *got)
    _check(got, refs)
    got = _outputs(shape, dtype)
    interpret(tvm.lower(s, [*ins, *outs]), a, b, f, *got)
    _check(got, refs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_vectorized_llvm(rng, dtype):
    shape = (5, 19)
    ins, outs = elementwise(*shape, dtype)
    s = te.create_schedule([t.op for t in outs])
    for t, lanes in zip(outs, (8, 4, 8, 16)):
        _, inner = s[t].split(s[t].op.axis[1], factor=lanes)
        s[t].vectorize(inner)
    mod = tvm.build(s, [*ins, *outs], target="llvm")
    assert " x i4>" in mod.get_source()  # really computed as 4-bit vectors
    a, b, f = _inputs(rng, shape, dtype)
    got = _outputs(shape, dtype)
    mod(a, b, f, *got)
    _check(got, elementwise_reference(a, b, f, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_cuda_emulated(rng, dtype):
    shape = (9, 11)
    ins, outs = elementwise(*shape, dtype)
    mod = tvm.build(_gpu_schedule(outs), [*ins, *outs], target=CUDA)
    a, b, f = _inputs(rng, shape, dtype)
    got = _outputs(shape, dtype)
    mod.emulate(a, b, f, *got)
    _check(got, elementwise_reference(a, b, f, dtype))
    assert f"ember_wrap_{dtype}(" in mod.get_source()


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_cuda_shared_and_vectorized_emulated(rng, dtype):
    """A shared-memory stage and 4-lane vector accesses (one 32-bit word of four values)."""
    n = 192
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: A[i] * A[i] + A[i], name="B")
    s = te.create_schedule(B.op)
    bx, x = s[B].split(B.op.axis[0], factor=64)
    tx, v = s[B].split(x, factor=4)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].vectorize(v)
    AS = s.cache_read(A, "shared", [B])
    s[AS].compute_at(s[B], bx)
    _, t = s[AS].split(s[AS].op.axis[0], factor=16)
    s[AS].bind(t, te.thread_axis("threadIdx.x"))
    mod = tvm.build(s, [A, B], target=CUDA)
    a = random4(rng, (n,), dtype)
    b = np.full(n, 99, STORAGE[dtype])
    mod.emulate(a, b)
    np.testing.assert_array_equal(b, wrap4(a.astype(np.int64) ** 2 + a, dtype))


def _run_printed_cuda_on_host(mod, arrays, workdir) -> None:
    """Each kernel's printed CUDA C, compiled by g++ and run thread by thread (the
    emulator runs the TIR; this checks that the C text wraps as the TIR means)."""
    program = mod.program_of(None)
    by_data = {buf.data: arr for buf, arr in zip(program.buffers, arrays)}
    kernels = {k.name: k for k in program.kernels}
    for launch in program.launches:
        run_on_host(kernels[launch.kernel], [by_data[b.data] for b in launch.args], workdir)


@pytest.mark.skipif(not have_compiler(), reason="needs g++ to run printed CUDA on the host")
@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_printed_cuda_runs_on_host(rng, tmp_path, dtype):
    shape = (5, 13)
    ins, outs = elementwise(*shape, dtype)
    mod = tvm.build(_gpu_schedule(outs), [*ins, *outs], target=CUDA)
    a, b, f = _inputs(rng, shape, dtype)
    got = _outputs(shape, dtype)
    _run_printed_cuda_on_host(mod, [a, b, f, *got], tmp_path)
    _check(got, elementwise_reference(a, b, f, dtype))


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_cuda_compiles_with_nvrtc(dtype):
    ins, outs = elementwise(9, 11, dtype)
    mod = tvm.build(_gpu_schedule(outs), [*ins, *outs], target=CUDA)
    usage = mod.resource_usage()  # NVRTC compiled every kernel to a cubin
    assert len(usage) == 4 and all(u.spill_bytes == 0 for u in usage.values())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_cuda_on_gpu(monkeypatch, rng, dtype):
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    shape = (33, 65)
    ins, outs = elementwise(*shape, dtype)
    mod = tvm.build(_gpu_schedule(outs), [*ins, *outs], target="cuda")
    a, b, f = _inputs(rng, shape, dtype)
    got = _outputs(shape, dtype)
    mod(a, b, f, *got)
    _check(got, elementwise_reference(a, b, f, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_nd_arrays(rng, dtype):
    """tvm.nd.array / tvm.nd.empty as TVM's tests use them: one value per byte here."""
    n = 23
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: A[i] * tvm.tir.const(3, dtype) + A[i], name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B], target="llvm")
    dev = tvm.cpu(0)
    a_np = random4(rng, (n,), dtype)
    a = tvm.nd.array(a_np, dev)
    b = tvm.nd.empty((n,), dtype, dev)
    assert b.numpy().dtype == STORAGE[dtype]
    f(a, b)
    np.testing.assert_array_equal(b.numpy(), wrap4(a_np.astype(np.int64) * 4, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", ["llvm", "emulator", "printed_cuda", "interpreter"])
def test_int4_division_and_reductions(rng, tmp_path, dtype, target):
    n, k = 6, 7
    A = te.placeholder((n, k), name="A", dtype=dtype)
    B = te.placeholder((n, k), name="B", dtype=dtype)
    r = te.reduce_axis((0, k), name="r")
    Q = te.compute((n, k), lambda i, j: te.floordiv(A[i, j], B[i, j]), name="Q")
    T = te.compute((n, k), lambda i, j: te.truncmod(A[i, j], B[i, j]), name="T")
    M = te.compute((n,), lambda i: te.max(A[i, r], axis=r), name="M")
    S = te.compute((n,), lambda i: te.sum(A[i, r], axis=r), name="S")
    a = random4(rng, (n, k), dtype)
    b = random4(rng, (n, k), dtype)
    b[b == 0] = 1
    if dtype == "int4":
        a[0, :2], b[0, :2] = -8, -1  # -8 // -1 is 8, which wraps to -8
        a[1] = -8  # the max of an all -8 row: the int4 identity, not int8's -128
    ai, bi = a.astype(np.int64), b.astype(np.int64)
    refs = [
        wrap4(ai // bi, dtype),
        wrap4(np.fmod(ai, bi), dtype),
        a.max(axis=1),
        wrap4(ai.sum(axis=1), dtype),
    ]
    got = [np.full(x.shape, 99, STORAGE[dtype]) for x in refs]
    if target in ("emulator", "printed_cuda"):
        if target == "printed_cuda" and not have_compiler():
            pytest.skip("needs g++ to run printed CUDA on the host")
        mod = tvm.build(_gpu_schedule([Q, T, M, S]), [A, B, Q, T, M, S], target=CUDA)
        if target == "emulator":
            mod.emulate(a, b, *got)
        else:
            _run_printed_cuda_on_host(mod, [a, b, *got], tmp_path)
    else:
        s = te.create_schedule([Q.op, T.op, M.op, S.op])
        if target == "llvm":
            tvm.build(s, [A, B, Q, T, M, S], target="llvm")(a, b, *got)
        else:
            interpret(tvm.lower(s, [A, B, Q, T, M, S]), a, b, *got)
    _check(got, refs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_input_out_of_range_is_refused(dtype):
    A = te.placeholder((4,), name="A", dtype=dtype)
    B = te.compute((4,), lambda i: A[i] + tvm.tir.const(1, dtype), name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B], target="llvm")
    bad = np.array([1, 2, 3, 16 if dtype == "uint4" else -9], STORAGE[dtype])
    out = np.zeros(4, STORAGE[dtype])
    with pytest.raises(ArgumentError, match=rf"'A' is {dtype} and must hold values in"):
        f(bad, out)
    with pytest.raises(ArgumentError, match="one value per byte"):
        f(bad.astype(np.int32), out)
    f(np.array([0, 7, 3, 5], STORAGE[dtype]), out)  # an output's old contents are not checked
    np.testing.assert_array_equal(out, wrap4([1, 8, 4, 6], dtype))


def test_int4_constant_folding_wraps():
    ana = Analyzer()
    assert ana.simplify(tvm.tir.const(7, "int4") + tvm.tir.const(1, "int4")).value == -8
    assert ana.simplify(tvm.tir.const(15, "uint4") + tvm.tir.const(1, "uint4")).value == 0
    assert ana.simplify(tvm.tir.const(20, "int32").astype("int4")).value == 4
    assert ana.simplify(tvm.tir.const(-3, "int32").astype("uint4")).value == 13
    assert (tvm.tir.const(-8, "int4") * tvm.tir.const(3, "int4")).value == 8 - 16  # -24 wraps
    with pytest.raises(ArgumentError, match=r"int4 holds -8\.\.7"):
        tvm.tir.const(9, "int4")  # TVM's IntImm refuses it too


def test_int4_bit_counts_are_refused():
    x = te.var("x", dtype="int4")
    with pytest.raises(ArgumentError, match="cast it to int8"):
        tvm.tir.popcount(x)


# -- property: casts from int32 and the arithmetic on the result wrap to 4 bits -------------

_OPS = {
    "add": (lambda x, y: x + y, np.add),
    "sub": (lambda x, y: x - y, np.subtract),
    "mul": (lambda x, y: x * y, np.multiply),
}
N = 11


@functools.cache
def _cast_kernels(dtype: str, op: str):
    X = te.placeholder((N,), name="X", dtype="int32")
    Y = te.placeholder((N,), name="Y", dtype="int32")
    fn = _OPS[op][0]
    Z = te.compute((N,), lambda i: fn(X[i].astype(dtype), Y[i].astype(dtype)).astype("int32"))
    s = te.create_schedule(Z.op)
    cpu = tvm.build(s, [X, Y, Z], target="llvm")
    lowered = tvm.lower(s, [X, Y, Z])
    gpu = tvm.build(_gpu_schedule([Z]), [X, Y, Z], target=CUDA)
    return cpu, gpu, functools.partial(interpret, lowered)


@settings(max_examples=examples(12), deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    op=st.sampled_from(sorted(_OPS)),
    xs=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=N, max_size=N),
    ys=st.lists(st.integers(-300, 300), min_size=N, max_size=N),
)
def test_int4_cast_and_arithmetic_wrap_property(dtype, op, xs, ys):
    x, y = np.array(xs, np.int32), np.array(ys, np.int32)
    want = wrap4(_OPS[op][1](wrap4(x, dtype).astype(np.int64), wrap4(y, dtype)), dtype)
    cpu, gpu, interpreted = _cast_kernels(dtype, op)
    for run in (cpu, gpu.emulate, interpreted):
        got = np.zeros(N, np.int32)
        run(x, y, got)
        np.testing.assert_array_equal(got, want.astype(np.int32))
