"""A cold compile builds the kernels missing from the disk cache in forked processes
(``ember/graph/parallel_build.py``): the model computes what onnxruntime computes, and what
a compile in one process computes, bit for bit; a child that fails leaves its kernels to
the compiling process; an error is reported with its node, as without the children.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import ember
from ember.errors import EmberError
from ember.graph import kernel_cache, kernels, parallel_build
from ember.graph.kernels import clear_cache

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or not os.sys.platform.startswith("linux"), reason="needs fork()"
)


@pytest.fixture(scope="module")
def cnn():
    from ember.frontend.testing.models import small_cnn

    model, feeds = small_cnn(np.random.default_rng(5), batch=2, h=13, w=11)
    return model, feeds["x"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh disk cache, two compile processes, counters from zero."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBER_DISK_CACHE", raising=False)
    monkeypatch.setenv("EMBER_COMPILE_JOBS", "2")
    clear_cache()
    for k in kernel_cache.STATS:
        monkeypatch.setitem(kernel_cache.STATS, k, 0)
    yield tmp_path / "cache"
    clear_cache()


def _entries(folder) -> int:
    return len(list(folder.glob("kernels/*/*/kernel.so")))


def _processes(monkeypatch) -> list[int]:
    """Records how many processes each prebuild used."""
    used: list[int] = []
    real = parallel_build.prebuild

    def spy(jobs, backend):
        used.append(real(jobs, backend))
        return used[-1]

    monkeypatch.setattr("ember.graph.compile.prebuild", spy)
    return used


def test_a_cold_compile_on_two_processes_matches_onnxruntime_and_one_process(
    cnn, cache, monkeypatch
):
    used = _processes(monkeypatch)
    got = ember.compile(cnn[0]).run([cnn[1]])[0]
    assert used == [2]
    built_here = kernel_cache.STATS["stored"]
    assert kernel_cache.STATS["hit"] >= 1  # the child's kernels, loaded from its entries
    assert _entries(cache) == built_here + kernel_cache.STATS["hit"]
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(cnn[0].SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": cnn[1]})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    monkeypatch.setenv("EMBER_DISK_CACHE", "0")  # one process, nothing from the cache
    clear_cache()
    np.testing.assert_array_equal(ember.compile(cnn[0]).run([cnn[1]])[0], got)
    assert used == [2, 1]


def test_a_warm_compile_forks_nothing(cnn, cache, monkeypatch):
    ember.compile(cnn[0])
    used = _processes(monkeypatch)
    clear_cache()
    ember.compile(cnn[0])
    assert used == [1]  # every kernel on disk: nothing missing, no child


def test_kernels_a_child_fails_to_build_are_built_by_the_compile(cnn, cache, monkeypatch):
    parent = os.getpid()
    real = kernels._build_group

    def only_here(*args, **kwargs):
        if os.getpid() != parent:
            raise RuntimeError("a child that cannot build")
        return real(*args, **kwargs)

    monkeypatch.setattr(kernels, "_build_group", only_here)
    used = _processes(monkeypatch)
    got = ember.compile(cnn[0]).run([cnn[1]])[0]
    assert used == [2] and kernel_cache.STATS["hit"] == 0
    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    clear_cache()
    np.testing.assert_array_equal(ember.compile(cnn[0]).run([cnn[1]])[0], got)


def test_an_error_is_reported_with_its_node(cnn, cache, monkeypatch):
    real = kernels._build_group

    def no_convs(nodes, *args, **kwargs):
        if any(n.op.startswith("conv") for n in nodes):
            raise EmberError("no conv today")
        return real(nodes, *args, **kwargs)

    monkeypatch.setattr(kernels, "_build_group", no_convs)
    with pytest.raises(EmberError, match="no conv today") as info:
        ember.compile(cnn[0])
    assert "while compiling" in str(info.value) and "Conv" in str(info.value)


def test_only_the_main_thread_forks(monkeypatch):
    monkeypatch.setenv("EMBER_COMPILE_JOBS", "4")
    assert parallel_build.processes(9) == 4
    assert parallel_build.processes(3) == 3
    assert parallel_build.processes(1) == 1
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(parallel_build.processes(9)))
    t.start()
    t.join()
    assert seen == [1]
    monkeypatch.setenv("EMBER_COMPILE_JOBS", "1")
    assert parallel_build.processes(9) == 1


def test_kernels_past_the_queue_are_built_by_the_compile(cnn, cache, monkeypatch):
    monkeypatch.setattr(parallel_build, "MAX_JOBS", 2)  # the queue fits one pipe write
    used = _processes(monkeypatch)
    got = ember.compile(cnn[0]).run([cnn[1]])[0]
    assert used == [2] and kernel_cache.STATS["hit"] <= 2  # at most the queue came from it
    assert kernel_cache.STATS["stored"] + kernel_cache.STATS["hit"] == _entries(cache) > 2
    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    clear_cache()
    np.testing.assert_array_equal(ember.compile(cnn[0]).run([cnn[1]])[0], got)


def test_a_refused_fork_leaves_the_compile_to_one_process(cnn, cache, monkeypatch):
    def refuse() -> int:
        raise BlockingIOError("fork: resource temporarily unavailable")

    monkeypatch.setattr(parallel_build.os, "fork", refuse)
    used = _processes(monkeypatch)
    got = ember.compile(cnn[0]).run([cnn[1]])[0]
    assert used == [1] and kernel_cache.STATS["hit"] == 0  # this process built them all
    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    clear_cache()
    np.testing.assert_array_equal(ember.compile(cnn[0]).run([cnn[1]])[0], got)


def test_children_reaped_by_the_system_are_not_waited_for(cnn, cache, monkeypatch):
    """With SIGCHLD ignored the kernel reaps a child as it exits; waiting for it fails."""
    import signal

    old = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        used = _processes(monkeypatch)
        ember.compile(cnn[0])
    finally:
        signal.signal(signal.SIGCHLD, old)
    assert used == [2] and kernel_cache.STATS["hit"] >= 1
