"""Parallel loops on Ember's pool: dynamic chunks, the small-work cut-off, the pool itself."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ember.runtime as rt
from ember.codegen_llvm import parallel_work, pool
from ember.runtime import threads as th
from ember.tir import expr as E
from ember.tir import stmt as S
from tests.codegen_llvm.llvm_helpers import build, load, loop, param, rand, sentinel, store

PAR = S.ForKind.PARALLEL


@pytest.fixture(autouse=True)
def no_backoff():
    """These tests count the threads in a job: a stall in another test (a loaded machine
    preempting a pool thread) must not leave the caller alone in the next ones."""
    pool.set_backoff(0)
    yield
    pool.set_backoff(pool.BACKOFF_NS / 1e9)


@pytest.fixture
def fine_chunks(monkeypatch):
    """Every loop forks, and chunks are one iteration where the extent allows."""
    monkeypatch.setattr(parallel_work, "MIN_PARALLEL_WORK", 0)
    monkeypatch.setattr(parallel_work, "MIN_CHUNK_WORK", 1)


def _affine(n: int, name: str):
    """``out[i] = A[i] * 2 + 1`` over ``n`` iterations, as a parallel loop."""
    A, out = param("A", (n,)), param("out", (n,))
    body = loop(n, lambda i: store(out, i, load(A, i) * 2.0 + 1.0), kind=PAR)
    return build(S.PrimFunc(name, (A, out), body))


@pytest.mark.parametrize("n", [2, 3, 7, 1000])
def test_dynamic_chunks_cover_every_iteration_once(fine_chunks, n, rng):
    mod = _affine(n, f"chunks{n}")
    ll = mod.get_source("ll-unopt")
    assert "atomicrmw add" in ll and "__ember_parallel_launch" in ll
    a = rand(n, "float32", rng)
    for t in (1, 2, 3, 4):
        rt.set_num_threads(t)
        try:
            o = sentinel(n, "float32")
            mod(a, o)
            assert bool(mod._launch_cell.value) == (t > 1)  # Ember's pool, not libgomp
        finally:
            rt.set_num_threads(None)
        np.testing.assert_array_equal(o, a * 2 + 1)


@pytest.mark.parametrize("n", [2, 3, 7, 64, 1001])
def test_parts_from_both_ends_run_each_iteration_once(fine_chunks, n):
    """``out[i] += A[i]`` is not idempotent: a part run twice, or skipped, shows. The two
    threads take parts from opposite ends of the range wherever they sit on CPUs of both
    parities; each call must still add every ``A[i]`` exactly once."""
    A, out = param("A", (n,)), param("out", (n,))
    body = loop(n, lambda i: store(out, i, load(out, i) + load(A, i)), kind=PAR)
    mod = build(S.PrimFunc(f"both_ends{n}", (A, out), body))
    if sys.platform.startswith("linux"):
        assert "sched_getcpu" in mod.get_source("ll-unopt")
    a = np.arange(1, n + 1, dtype="float32")
    o = np.zeros(n, "float32")
    calls = 0
    for t in (2, 3, 4):
        rt.set_num_threads(t)
        try:
            for _ in range(30):
                mod(a, o)
                calls += 1
        finally:
            rt.set_num_threads(None)
    np.testing.assert_array_equal(o, a * calls)


FROM_ONE_END = """
import os, sys, numpy as np
import ember.runtime as rt
from ember.codegen_llvm import parallel_work
from ember.tir import expr as E
from ember.tir import stmt as S
from tests.codegen_llvm.llvm_helpers import build, load, loop, param, store
os.sched_setaffinity(0, {int(sys.argv[1])})  # before the pool starts: its threads inherit it
parallel_work.MIN_PARALLEL_WORK = 0
parallel_work.MIN_CHUNK_WORK = 1
n = 400
A, out = param("A", (n,)), param("out", (n,))
body = loop(n, lambda i: S.AssertStmt(i < n - 1, "the last iteration", store(out, i, load(A, i))),
            kind=S.ForKind.PARALLEL)
mod = build(S.PrimFunc("one_end", (A, out), body))
rt.set_num_threads(2)
o = np.zeros(n, "float32")
try:
    mod(np.ones(n, "float32"), o)
except Exception as e:
    print("raised", type(e).__name__)
print("written", int(o.sum()))
"""


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or not {0, 1} <= os.sched_getaffinity(0),
    reason="needs Linux and CPUs 0 and 1",
)
@pytest.mark.parametrize("cpu", [0, 1])
def test_threads_on_an_odd_cpu_take_parts_from_the_back(cpu):
    """Both threads pinned to one CPU take parts from the same end: from the front on CPU 0,
    so the assert in the loop's last iteration fails after every other iteration has
    stored, and from the back on CPU 1, so it fails in the first part taken (one of 16,
    25 iterations each) and at most the part the other thread took beside it ran too
    (a thread stops taking parts once the failure is stored)."""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-c", FROM_ONE_END, str(cpu)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    n, lines = 400, run.stdout.split("\n")
    assert lines[0] == "raised ArgumentError"
    written = int(lines[1].split()[1])
    assert written == n - 1 if cpu == 0 else written <= 2 * 25 - 1


def test_symbolic_extent_decides_at_run_time(rng):
    n = E.Var("n", "int32")
    A, out = param("A", (n,)), param("out", (n,))
    body = loop(n, lambda i: store(out, i, load(A, i) + 1.0), kind=PAR)
    mod = build(S.PrimFunc("symbolic", (A, out), body))
    assert "@GOMP_parallel" in mod.get_source("ll")  # the launch stays: n may be large
    rt.set_num_threads(3)
    try:
        for size in (0, 1, 5, parallel_work.MIN_PARALLEL_WORK + 3):
            a = rand(size, "float32", rng)
            o = sentinel(size, "float32")
            mod(a, o)
            np.testing.assert_array_equal(o, a + 1)
    finally:
        rt.set_num_threads(None)


def test_small_static_loop_opens_no_region():
    assert "@GOMP_parallel" not in _affine(100, "small").get_source("ll")
    assert "@GOMP_parallel" in _affine(parallel_work.MIN_PARALLEL_WORK, "big").get_source("ll")


def test_work_estimate():
    A, out = param("A", (64,)), param("out", (64,))
    inner = loop(16, lambda j: store(out, j, load(A, j)), name="j")
    outer = loop(4, lambda i: inner, kind=PAR)
    work = parallel_work.iteration_work(outer)
    assert work is not None and 16 * 3 <= work <= 16 * 8
    symbolic = loop(4, lambda i: loop(E.Var("m", "int32"), lambda j: inner), kind=PAR)
    assert parallel_work.iteration_work(symbolic) is None
    assert parallel_work.serial_below(None) == 0 and parallel_work.min_chunk(None) == 1


def test_libgomp_path_still_right(fine_chunks, monkeypatch, rng):
    mod = _affine(501, "viagomp")
    monkeypatch.setattr(th, "_launcher", 0)  # as EMBER_THREAD_POOL=gomp
    rt.set_num_threads(2)
    try:
        a, o = rand(501, "float32", rng), sentinel(501, "float32")
        mod(a, o)
        assert not mod._launch_cell.value
        np.testing.assert_array_equal(o, a * 2 + 1)
    finally:
        rt.set_num_threads(None)


def test_exported_library_runs_on_the_pool(fine_chunks, tmp_path, rng):
    mod = _affine(333, "exported")
    mod.export_library(tmp_path / "k.so")
    loaded = rt.load_module(tmp_path / "k.so")
    rt.set_num_threads(3)
    try:
        a, o = rand(333, "float32", rng), sentinel(333, "float32")
        loaded(a, o)
        assert loaded._launch_cell.value == pool.launcher_address()
        np.testing.assert_array_equal(o, a * 2 + 1)
    finally:
        rt.set_num_threads(None)


def test_beside_openblas_and_another_caller(fine_chunks, rng):
    """Kernels stay right while numpy's OpenBLAS threads and a second caller share the pool."""
    mod = _affine(999, "crowd")
    a = rand(999, "float32", rng)
    m = rng.standard_normal((160, 160))
    want_mm = m @ m
    errors: list[str] = []

    def blas() -> None:
        for _ in range(20):
            if not np.allclose(m @ m, want_mm):
                errors.append("matmul")

    def kernel() -> None:
        for _ in range(200):
            o = sentinel(999, "float32")
            mod(a, o)
            if not np.array_equal(o, a * 2 + 1):
                errors.append("kernel")

    rt.set_num_threads(2)
    try:
        workers = [threading.Thread(target=f) for f in (blas, kernel, kernel)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        rt.set_num_threads(None)
    assert not errors


WORKER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
RUN = ctypes.CFUNCTYPE(None, WORKER, ctypes.c_void_p, ctypes.c_int32)


def test_pool_threads_join_the_caller():
    """The caller's call waits until a pool thread has entered the same job."""
    addr = pool.launcher_address()
    if not addr:
        pytest.skip("no Ember pool on this platform")
    assert _pool_threads_seen(addr, 3) == 3
    calls = []
    RUN(addr)(WORKER(lambda _: calls.append(1)), None, 1)  # one thread: the caller alone
    assert calls == [1]


def test_thread_count_follows_affinity(monkeypatch, tmp_path):
    monkeypatch.setattr(th.os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert th.available_cpus(tmp_path / "absent") == 3
    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")
    assert th.available_cpus(quota) == 2  # 1.5 CPUs: two threads
    quota.write_text("max 100000\n")
    assert th.available_cpus(quota) == 3
    quota.write_text("50000 100000\n")
    assert th.available_cpus(quota) == 1
    th._default_threads.cache_clear()
    monkeypatch.delenv("EMBER_NUM_THREADS", raising=False)
    monkeypatch.setattr(th, "CGROUP_CPU_MAX", tmp_path / "absent")
    try:
        rt.set_num_threads(None)
        assert rt.get_num_threads() == 3
    finally:
        th._default_threads.cache_clear()


FIRST_USE_FROM_THREADS = """
import threading, numpy as np
import ember.runtime as rt
from ember.codegen_llvm import parallel_work
from ember.tir import stmt as S
from tests.codegen_llvm.llvm_helpers import build, load, loop, param, store
parallel_work.MIN_PARALLEL_WORK = 0
A, out = param("A", (777,)), param("out", (777,))
body = loop(777, lambda i: store(out, i, load(A, i) * 2.0), kind=S.ForKind.PARALLEL)
mod = build(S.PrimFunc("first", (A, out), body))
rt.set_num_threads(2)
a = np.random.default_rng(0).standard_normal(777).astype("float32")
start, bad = threading.Barrier(6), []
def work():
    start.wait()
    for _ in range(50):
        o = np.full(777, np.nan, "float32")
        mod(a, o)
        bad.extend([] if np.array_equal(o, a * 2) else [1])
ts = [threading.Thread(target=work) for _ in range(6)]
[t.start() for t in ts]
[t.join() for t in ts]
print("bad", len(bad))
"""


def test_pool_first_used_by_many_threads_at_once():
    """Six threads make the process's first parallel call together: one pool is built.
    Its threads and callers never spin, so every wait is a futex sleep and wake."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "EMBER_POOL_SPIN": "0", "EMBER_POOL_JOIN_SPIN": "0"}
    run = subprocess.run(
        [sys.executable, "-c", FIRST_USE_FROM_THREADS],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["bad", "0"]


def _pool_threads_seen(addr: int, n: int) -> int:
    """The most threads that ran one job of ``n`` threads at once (each entering thread
    waits up to 5 s for ``n`` to be in)."""
    inside = [0, 0]  # now, most
    lock = threading.Lock()

    def work(_: int | None) -> None:
        with lock:
            inside[0] += 1
            inside[1] = max(inside)
        deadline = time.monotonic() + 5
        while inside[1] < n and time.monotonic() < deadline:
            time.sleep(0.001)
        with lock:
            inside[0] -= 1

    RUN(addr)(WORKER(work), None, n)
    return inside[1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_pool_starts_new_threads_in_a_forked_child():
    addr = pool.launcher_address()
    if not addr:
        pytest.skip("no Ember pool on this platform")
    assert _pool_threads_seen(addr, 3) == 3
    pid = os.fork()
    if pid == 0:  # child: the parent's pool threads are gone; the exit code says what ran
        code = 1
        try:
            code = 0 if _pool_threads_seen(addr, 3) == 3 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_a_stall_leaves_the_caller_alone_for_a_while():
    """A pool thread still inside a job long after the caller is done (as one preempted
    holding a part) makes the caller run the next jobs alone until the backoff ends."""
    addr = pool.launcher_address()
    if not addr:
        pytest.skip("no Ember pool on this platform")
    caller = threading.get_ident()
    inside: list[float] = []

    def stalling(_: int | None) -> None:
        if threading.get_ident() != caller:  # 'preempted' for longer than the caller ran
            inside.append(time.monotonic())
            time.sleep(0.05 + 2 * (inside[0] - start))
            return
        deadline = time.monotonic() + 5
        while not inside and time.monotonic() < deadline:  # until a pool thread is in
            time.sleep(0.0005)

    def pool_threads_in_a_job() -> int:
        entered: set[int] = set()

        def work(_: int | None) -> None:
            entered.add(threading.get_ident())
            deadline = time.monotonic() + 0.05
            while len(entered) < 2 and time.monotonic() < deadline:
                time.sleep(0.0005)

        RUN(addr)(WORKER(work), None, 2)
        return len(entered - {caller})

    pool.set_backoff(30.0)
    start = time.monotonic()
    RUN(addr)(WORKER(stalling), None, 2)
    assert inside, "no pool thread entered the job"
    assert [pool_threads_in_a_job() for _ in range(3)] == [0, 0, 0]  # alone after it
    pool.set_backoff(0)  # ends the backoff: the pool's threads join again
    assert _pool_threads_seen(addr, 2) == 2
