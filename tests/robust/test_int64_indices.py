"""Loops and indices beyond int32: ``widen_index_dtypes`` (Before/Expected), and runs
that take a huge extent or an overflowing index product on every executor without
allocating huge memory (LLVM folds the long loops into closed forms)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.functor import post_order_visit
from ember.tir.interp import run as interp_run
from ember.tir.transform.widen_index_dtypes import widen_index_dtypes
from tests.nightly import examples

HUGE = 2**31 + 5  # one more iteration than int32 can count, and then some


def _loop(v: E.Var, extent: E.ExprLike, body: S.Stmt) -> S.For:
    return S.For(v, E.const(0), E.convert(extent), S.ForKind.SERIAL, body)


def _lines(f: S.PrimFunc) -> list[str]:
    return repr(f).splitlines()[1:]


# -- Before / Expected -------------------------------------------------------------------
def test_huge_extent_widens_the_loop_variable() -> None:
    B = decl_buffer((1,), "int64", "B")
    k = E.Var("k")
    store = S.BufferStore(B, B[0] + E.Cast("int64", k), (E.const(0),))
    before = S.PrimFunc("f", (B,), _loop(k, HUGE, store))
    assert before.body.extent.dtype == "int64" and k.dtype == "int32"
    after = widen_index_dtypes(before)
    assert _lines(after) == [
        "    for k in range(int64(2147483653)):",
        "        B[0] = B[0] + int64(k)",
    ]
    assert after.body.loop_var.dtype == "int64"


def test_index_product_beyond_int32_widens_its_variables() -> None:
    A = decl_buffer((50000 * 50000,), "float32", "A")
    i, j, t = E.Var("i"), E.Var("j"), E.Var("t")
    index = i * 50000 + j
    before = S.PrimFunc(
        "f",
        (A,),
        _loop(t, 3, _loop(i, 50000, _loop(j, 50000, S.BufferStore(A, E.const(1.0), (index,))))),
    )
    after = widen_index_dtypes(before)
    assert _lines(after) == [
        "    for t in range(3):",
        "        for i in range(int64(50000)):",
        "            for j in range(int64(50000)):",
        "                A[i * int64(50000) + j] = 1.0",
    ]
    loops: list[S.For] = []
    post_order_visit(after.body, lambda n: loops.append(n) if isinstance(n, S.For) else None)
    assert {f.loop_var.name: f.loop_var.dtype for f in loops} == {
        "t": "int32",  # not part of the product: stays narrow
        "i": "int64",
        "j": "int64",
    }


def test_widened_value_is_stored_in_the_buffer_type() -> None:
    B = decl_buffer((8,), "int32", "B")
    i = E.Var("i")
    before = S.PrimFunc("f", (B,), _loop(i, HUGE, S.BufferStore(B, i, (E.floormod(i, 8),))))
    assert _lines(widen_index_dtypes(before)) == [
        "    for i in range(int64(2147483653)):",
        "        B[i % int64(8)] = int32(i)",
    ]


def test_small_symbolic_and_value_arithmetic_are_left_alone() -> None:
    B = decl_buffer((64,), "int32", "B")
    i, n = E.Var("i"), E.SizeVar("n")
    small = S.PrimFunc("f", (B,), _loop(i, 64, S.BufferStore(B, i * 2, (i,))))
    assert widen_index_dtypes(small) is small
    symbolic = S.PrimFunc("g", (B, n), _loop(i, n, S.BufferStore(B, i, (i * n,))))
    assert widen_index_dtypes(symbolic) is symbolic  # an int32 size cannot overflow int32
    # an int32 value the program computes wraps, as in TVM; only indices are widened
    value = S.PrimFunc("h", (B,), _loop(i, 64, S.BufferStore(B, i * 1000000000, (i,))))
    assert widen_index_dtypes(value) is value


# -- runs ----------------------------------------------------------------------------------
def _huge_sum(split: int | None):  # noqa: ANN202
    """``B[i] = sum_k (k + A[i])`` over ``HUGE`` values of k, in int64."""
    A = te.placeholder((5,), name="A", dtype="int64")
    k = te.reduce_axis((0, HUGE), name="k")
    B = te.compute((5,), lambda i: te.sum(k.var.astype("int64") + A[i], axis=k), name="B")
    s = te.create_schedule(B.op)
    if split:
        s[B].split(k, factor=split)
    return s, [A, B]


def _huge_sum_reference(a: np.ndarray) -> np.ndarray:
    return np.array([HUGE * (HUGE - 1) // 2 + HUGE * int(x) for x in a], dtype=np.int64)


@pytest.mark.parametrize("split", [None, 1000, 1024])
def test_reduction_over_more_than_int32_iterations_on_llvm(split: int | None) -> None:
    s, args = _huge_sum(split)
    func = ember.lower(s, args)
    loops: list[S.For] = []
    post_order_visit(func.body, lambda n: loops.append(n) if isinstance(n, S.For) else None)
    assert all(f.loop_var.dtype == "int64" for f in loops if f.loop_var.name.startswith("k"))
    a = np.random.default_rng(3).integers(-1000, 1000, 5).astype(np.int64)
    b = np.zeros(5, np.int64)
    ember.build(s, args, target="llvm")(a, b)  # used to run zero times: b stayed 0
    np.testing.assert_array_equal(b, _huge_sum_reference(a))


def test_huge_loop_in_cuda_source_counts_in_64_bits() -> None:
    s, (A, B) = _huge_sum(None)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    src = ember.build(s, [A, B], target="cuda").get_source()
    assert "for (long long k = 0LL; k < 2147483653LL; ++k)" in src


def _product_index(n: int, c: int):  # noqa: ANN202
    """``B[i] = A[(i * c) // (c + 1)]``: the product leaves int32, the index does not."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[E.floordiv(i * c, c + 1)], name="B")
    return A, B


def _product_reference(a: np.ndarray, c: int) -> np.ndarray:
    return a[[(i * c) // (c + 1) for i in range(len(a))]]  # Python ints: exact


def _run_product(n: int, c: int, seed: int) -> None:
    a = np.random.default_rng(seed).uniform(-1, 1, n).astype(np.float32)
    want = _product_reference(a, c)
    A, B = _product_index(n, c)
    s = te.create_schedule(B.op)
    out = np.full(n, np.nan, np.float32)
    interp_run(ember.lower(s, [A, B]), a, out)
    np.testing.assert_array_equal(out, want, err_msg="interp")
    out[:] = np.nan
    ember.build(s, [A, B], target="llvm")(a, out)
    np.testing.assert_array_equal(out, want, err_msg="llvm")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    out[:] = np.nan
    ember.build(s, [A, B], target="cuda").emulate(a, out)  # raises on an out-of-bounds load
    np.testing.assert_array_equal(out, want, err_msg="emulator")


@pytest.mark.parametrize(("n", "c"), [(7, 1000000007), (13, 2**30 + 3), (5, 2**31 - 2)])
def test_index_product_beyond_int32_on_interp_llvm_and_emulator(n: int, c: int) -> None:
    _run_product(n, c, seed=n)


@settings(max_examples=examples(15), deadline=None)
@given(n=st.integers(1, 23), c=st.integers(2**20, 2**31 - 2))
def test_index_products_property(n: int, c: int) -> None:
    _run_product(n, c, seed=c % 1000)


def test_large_tensor_kernel_indexes_in_64_bits() -> None:
    N = 50000  # 2.5e9 elements: never allocated, only lowered and printed
    A = te.placeholder((N, N), name="A")
    B = te.compute((N, N), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(s[B].fuse(*B.op.axis), factor=256)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    src = ember.build(s, [A, B], target="cuda").get_source()
    assert "long long i_j_fused_outer = blockIdx.x;" in src
    assert "long long i_j_fused_inner = threadIdx.x;" in src
    cpu = te.create_schedule(B.op)
    ll = ember.build(cpu, [A, B], target="llvm").get_source("ll-unopt")
    assert "mul nsw i64" in ll and 'getelementptr inbounds float, ptr %"A", i64' in ll


@pytest.mark.nvrtc
def test_64_bit_kernels_compile_with_nvrtc() -> None:
    s, (A, B) = _huge_sum(1024)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    assert ember.build(s, [A, B], target="cuda -arch=sm_80").compile().cubin
