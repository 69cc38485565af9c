"""How a parallel loop is shared: the partition rule (parts a multiple of the team, equal
to an iteration), its LLVM IR twin, and loops too small to share left serial, not
outlined."""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llvmlite import ir

import ember.runtime as rt
from ember.codegen_llvm import jit, parallel, parallel_work
from ember.codegen_llvm.builder_utils import I32, I64, PTR, VOID
from ember.target import Target
from ember.tir import stmt as S
from tests.codegen_llvm.llvm_helpers import build, load, loop, param, rand, sentinel, store
from tests.nightly import examples

PAR = S.ForKind.PARALLEL
C = parallel_work.CHUNKS_PER_THREAD


@settings(max_examples=examples(300), deadline=None)
@given(
    extent=st.integers(1, 1 << 40),
    threads=st.integers(0, 64),
    least=st.integers(1, 5000),
)
def test_partition_shares_evenly(extent, threads, least):
    team, parts = parallel_work.partition(extent, threads, least)
    asked = threads or parallel_work.DEFAULT_TEAM
    assert 1 <= team <= asked
    if team == 1:
        assert parts == 1
        # one thread only where there is one, or too little to give two a part each
        assert asked == 1 or extent < 2 * least
        return
    assert extent >= team * least  # every thread gets a part of at least `least`
    assert parts % team == 0 and team <= parts <= team * C  # each thread's share is whole
    assert team == asked or extent < (team + 1) * least  # fewer threads only where needed
    edges = [parallel_work.part_range(extent, parts, p) for p in range(parts)]
    assert edges[0][0] == 0 and edges[-1][1] == extent
    assert all(a[1] == b[0] for a, b in zip(edges, edges[1:]))  # contiguous, no overlap
    sizes = {end - begin for begin, end in edges}
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= least


def test_partition_of_the_cases_that_were_unbalanced():
    # fixed chunks of `least` left 3 chunks for 2 threads (15 + 15 | 10): now 2 equal parts
    assert parallel_work.partition(40, 2, 15) == (2, 2)
    # and a 17th short chunk beside 16 of 24 for 392 iterations: now 16 of 24-25
    team, parts = parallel_work.partition(392, 2, 1)
    assert (team, parts) == (2, 16)
    # 3 threads asked, iterations for 2 parts only: 2 threads, not 3 with one idle
    assert parallel_work.partition(5, 3, 2) == (2, 2)
    assert parallel_work.partition(7, 1, 1) == (1, 1)
    assert parallel_work.partition(1, 8, 1) == (1, 1)


@pytest.fixture(scope="module")
def partition_ir():
    """``emit_partition`` compiled alone: ``f(n, threads, least_index, out)`` stores
    ``(team, parts)`` for each ``least`` in :data:`LEASTS` (the rule takes a constant)."""
    module = ir.Module(name="partition")
    fn = ir.Function(module, ir.FunctionType(VOID, [I64, I32, I32, PTR]), name="part")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    n, threads, which, out = fn.args
    done = fn.append_basic_block("done")
    switch = b.switch(which, done)
    for k, least in enumerate(LEASTS):
        block = fn.append_basic_block(f"least{least}")
        switch.add_case(ir.Constant(I32, k), block)
        b.position_at_end(block)
        team, parts = parallel.emit_partition(module, b, n, threads, least)
        b.store(team, out)
        b.store(parts, b.gep(out, [ir.Constant(I64, 1)], source_etype=I64))
        b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    spec = jit.MachineSpec.from_target(Target.parse("llvm"))
    _, engine, _ = jit.compile_ir(str(module), spec)
    proto = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p)
    yield engine, proto(engine.get_function_address("part"))


LEASTS = (1, 2, 3, 7, 15, 500)


def test_partition_ir_matches_the_rule(partition_ir):
    _, f = partition_ir
    out = np.zeros(2, dtype=np.int64)
    extents = [*range(1, 70), 391, 392, 1000, 12300, 1 << 33]
    for n, threads, (k, least) in itertools.product(
        extents, (0, 1, 2, 3, 4, 16), enumerate(LEASTS)
    ):
        f(n, threads, k, out.ctypes.data)
        assert tuple(out) == parallel_work.partition(n, threads, least), (n, threads, least)


def _copy(n: int, name: str) -> object:
    A, out = param("A", (n,)), param("out", (n,))
    return build(S.PrimFunc(name, (A, out), loop(n, lambda i: store(out, i, load(A, i)), kind=PAR)))


def test_loop_too_small_to_share_is_not_outlined(monkeypatch, rng):
    """Before: a one-iteration parallel loop (or one whose iterations give two threads
    less than MIN_CHUNK_WORK each) was outlined into a body and a worker and launched at
    run time. Expected: a plain loop in the kernel, no outlined function, no launch."""
    monkeypatch.setattr(parallel_work, "MIN_PARALLEL_WORK", 0)
    monkeypatch.setattr(parallel_work, "MIN_CHUNK_WORK", 1)
    one = _copy(1, "single")
    assert ".par0" not in one.get_source("ll-unopt")
    assert "@GOMP_parallel" not in one.get_source("ll")
    two = _copy(2, "pair")
    assert ".par0" in two.get_source("ll-unopt") and "@GOMP_parallel" in two.get_source("ll")
    # iterations of ~5 operations: 2 parts of 2000 need 800 of them
    monkeypatch.setattr(parallel_work, "MIN_CHUNK_WORK", 2000)
    assert ".par0" not in _copy(500, "light").get_source("ll-unopt")
    assert ".par0" in _copy(5000, "heavy").get_source("ll-unopt")
    for mod, n in ((one, 1), (two, 2)):
        a, o = rand(n, "float32", rng), sentinel(n, "float32")
        rt.set_num_threads(2)
        try:
            mod(a, o)
        finally:
            rt.set_num_threads(None)
        np.testing.assert_array_equal(o, a)


def test_threads_go_to_the_inner_loop_of_a_single_outer_iteration(monkeypatch, rng):
    """An outer parallel loop of one iteration is a serial loop, so the parallel loop
    inside it is the one outlined (before, the inner one ran serially in the outer's
    outlined body)."""
    monkeypatch.setattr(parallel_work, "MIN_PARALLEL_WORK", 0)
    monkeypatch.setattr(parallel_work, "MIN_CHUNK_WORK", 1)
    n = 301
    A, out = param("A", (n,)), param("out", (n,))
    inner = loop(n, lambda j: store(out, j, load(A, j) * 2.0), kind=PAR, name="j")
    body = loop(1, lambda i: inner, kind=PAR)
    mod = build(S.PrimFunc("outer1", (A, out), body))
    ll = mod.get_source("ll-unopt")
    assert ".par0" in ll and ".par1" not in ll  # one region
    body = ll[ll.index('define internal i32 @"outer1.par0.body"') :].split("\n}\n")[0]
    assert "j.head:" in body and "i.head:" not in body  # the inner loop's, not the outer's
    a = rand(n, "float32", rng)
    for t in (1, 2, 3):
        o = sentinel(n, "float32")
        rt.set_num_threads(t)
        try:
            mod(a, o)
        finally:
            rt.set_num_threads(None)
        np.testing.assert_array_equal(o, a * 2)
