"""Parallel loops on libgomp: 1 and 2 threads, captured values, nesting, asserts in threads."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import ember.runtime as rt
from ember.codegen_llvm import parallel_work
from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from tests.codegen_llvm.llvm_helpers import build, load, loop, param, rand, sentinel, store

PAR = S.ForKind.PARALLEL


@pytest.fixture(autouse=True)
def always_fork(monkeypatch):
    """These loops are small: open a parallel region for them all the same (no work
    cut-off, and parts of one iteration may go to each thread)."""
    monkeypatch.setattr(parallel_work, "MIN_PARALLEL_WORK", 0)
    monkeypatch.setattr(parallel_work, "MIN_CHUNK_WORK", 1)


@pytest.fixture(params=[1, 2], ids=lambda n: f"{n}threads")
def threads(request):
    rt.set_num_threads(request.param)
    yield request.param
    rt.set_num_threads(None)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_parallel_elementwise(threads, dtype, rng):
    n = 1001
    A, out = param("A", (n,)), param("out", (n,))
    scale = E.Var("scale", "float32")
    body = S.LetStmt(
        scale,
        load(A, E.const(0)) * 0.0 + 3.0,
        loop(n - 3, lambda i: store(out, i, load(A, i) * scale), kind=PAR, start=3, dtype=dtype),
    )
    mod = build(S.PrimFunc("par_scale", (A, out), body))
    assert "GOMP_parallel" in mod.get_source("ll")
    a = rand(n, "float32", rng)
    o = sentinel(n, "float32")
    mod(a, o)
    np.testing.assert_array_equal(o[3:], a[3:] * 3)
    assert np.isnan(o[:3]).all()
    assert mod._threads_cell is not None and mod._threads_cell.value == threads


def test_parallel_rows_with_private_accumulator(threads, rng):
    m, n, k = 37, 19, 23
    A, B, C = param("A", (m, k)), param("B", (k, n)), param("C", (m, n))
    acc = decl_buffer((1,), "float32", "acc", scope="local")
    zero = E.const(0)

    def row(i):
        def col(j):
            upd = loop(
                k,
                lambda r: store(
                    acc, zero, load(acc, zero) + load(A, i * k + r) * load(B, r * n + j)
                ),
                name="r",
            )
            return S.seq(
                store(acc, zero, E.const(0.0, "float32")), upd, store(C, i * n + j, load(acc, zero))
            )

        return S.Allocate(acc, loop(n, col, name="j"))

    mod = build(S.PrimFunc("par_mm", (A, B, C), loop(m, row, kind=PAR)))
    a, b = rand((m, k), "float32", rng), rand((k, n), "float32", rng)
    c = sentinel((m, n), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_nested_parallel_runs_inner_serially(threads, rng):
    A, out = param("A", (12, 34)), param("out", (12, 34))
    body = loop(
        12,
        lambda i: loop(
            34, lambda j: store(out, i * 34 + j, load(A, i * 34 + j) + 1.0), kind=PAR, name="j"
        ),
        kind=PAR,
    )
    mod = build(S.PrimFunc("nested", (A, out), body))
    assert mod.get_source("ll-unopt").count('call void @"GOMP_parallel"') == 1
    a = rand((12, 34), "float32", rng)
    o = sentinel((12, 34), "float32")
    mod(a, o)
    np.testing.assert_array_equal(o, a + 1)


@pytest.mark.parametrize("size", [4, 20000])  # stack / heap scratch inside each thread
def test_assert_inside_parallel_loop(threads, size, rng):
    n = 64
    A, out = param("A", (n,)), param("out", (n,))
    tmp = decl_buffer((size,), "float32", "tmp")
    body = loop(
        n,
        lambda i: S.Allocate(
            tmp,
            S.AssertStmt(
                load(A, i) < 100.0,
                "A must stay below 100",
                S.seq(store(tmp, E.const(0), load(A, i)), store(out, i, load(tmp, E.const(0)))),
            ),
        ),
        kind=PAR,
    )
    mod = build(S.PrimFunc("par_assert", (A, out), body))
    a = rand(n, "float32", rng)
    o = sentinel(n, "float32")
    mod(a, o)
    np.testing.assert_array_equal(o, a)
    a[n - 1] = 1000.0
    with pytest.raises(ArgumentError, match="par_assert: A must stay below 100"):
        mod(a, o)


def test_empty_parallel_range_does_nothing(rng):
    A, out = param("A", (4,)), param("out", (4,))
    mod = build(
        S.PrimFunc("empty", (A, out), loop(0, lambda i: store(out, i, load(A, i)), kind=PAR))
    )
    o = sentinel(4, "float32")
    mod(rand(4, "float32", rng), o)
    assert np.isnan(o).all()


def test_target_num_threads_is_fixed(rng):
    A, out = param("A", (100,)), param("out", (100,))
    f = S.PrimFunc("fixed", (A, out), loop(100, lambda i: store(out, i, load(A, i)), kind=PAR))
    mod = build(f, target="llvm -num-threads=2")
    rt.set_num_threads(1)
    try:
        o = sentinel(100, "float32")
        a = rand(100, "float32", rng)
        mod(a, o)
        assert mod._threads_cell.value == 2
        np.testing.assert_array_equal(o, a)
    finally:
        rt.set_num_threads(None)


def test_thread_count_setting(monkeypatch):
    rt.set_num_threads(None)
    monkeypatch.setenv("EMBER_NUM_THREADS", "3")
    assert rt.get_num_threads() == 3
    rt.set_num_threads(5)
    assert rt.get_num_threads() == 5
    rt.set_num_threads(None)
    monkeypatch.delenv("EMBER_NUM_THREADS")
    assert rt.get_num_threads() >= 1
    for bad in (0, -1, 2.5, "2", True):
        with pytest.raises(ArgumentError, match="positive integer"):
            rt.set_num_threads(bad)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_runs_parallel_loops_serially(rng):
    """libgomp's pool does not survive fork(); a child must not hang in a parallel loop."""
    A, out = param("A", (500,)), param("out", (500,))
    mod = build(
        S.PrimFunc("forky", (A, out), loop(500, lambda i: store(out, i, load(A, i)), kind=PAR))
    )
    a = rand(500, "float32", rng)
    rt.set_num_threads(2)
    try:
        mod(a, sentinel(500, "float32"))  # the parent's pool now exists
        pid = os.fork()
        if pid == 0:  # child: exit code says what happened
            code = 2
            try:
                o = sentinel(500, "float32")
                mod(a, o)
                code = 0 if (o == a).all() and rt.get_num_threads() == 1 else 1
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("a forked child hung in a parallel loop")
    finally:
        rt.set_num_threads(None)
