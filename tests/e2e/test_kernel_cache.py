"""The disk kernel cache: a compile in a fresh process reuses the kernels a previous process
stored, with identical outputs; a corrupt entry is rebuilt, never loaded; the cache folder
follows ``EMBER_CACHE_DIR`` and is off with ``EMBER_CACHE_DIR=""`` or ``EMBER_DISK_CACHE=0``.

Every test points ``EMBER_CACHE_DIR`` at its own ``tmp_path`` (the suite's conftest already
gives each test process a private folder) and clears the in-process cache, so what a test
counts is what it did.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import config
from ember.graph import kernel_cache
from ember.graph.kernels import clear_cache
from ember.target import Target
from tests.nightly import nightly_param

onnx = pytest.importorskip("onnx")
ROOT = Path(__file__).resolve().parents[2]

COMPILE_AND_RUN = """
import json, sys, time, numpy as np, ember
from ember.graph import kernel_cache
start = time.perf_counter()
# the file's bytes, not its path: a path is answered by the whole-model cache first
model = ember.compile(open(sys.argv[1], "rb").read())
took = time.perf_counter() - start
np.save(sys.argv[3], model.run([np.load(sys.argv[2])])[0])
print(json.dumps({"stats": kernel_cache.STATS, "seconds": took}))
"""


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    from ember.frontend.testing.models import small_cnn

    model, feeds = small_cnn(np.random.default_rng(11), batch=2, h=12, w=10)
    folder = tmp_path_factory.mktemp("cnn")
    onnx.save(model, str(folder / "cnn.onnx"))
    np.save(folder / "x.npy", feeds["x"])
    return folder, model, feeds["x"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(folder))
    monkeypatch.delenv("EMBER_DISK_CACHE", raising=False)
    monkeypatch.setenv("EMBER_COMPILE_JOBS", "1")  # one process: these tests count its builds
    clear_cache()
    for k in kernel_cache.STATS:
        monkeypatch.setitem(kernel_cache.STATS, k, 0)
    yield folder
    clear_cache()


def _entries(folder: Path) -> list[Path]:
    return sorted(p.parent for p in folder.glob("kernels/*/*/kernel.so"))


def _in_subprocess(cnn, folder: Path, out: Path) -> dict:
    env = {**__import__("os").environ, "EMBER_CACHE_DIR": str(folder)}
    cmd = [sys.executable, "-c", COMPILE_AND_RUN, str(cnn[0] / "cnn.onnx"), str(cnn[0] / "x.npy")]
    done = subprocess.run(
        [*cmd, str(out)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_fresh_process_hits_the_cache_with_identical_outputs(cnn, cache, tmp_path):
    cold = _in_subprocess(cnn, cache, tmp_path / "cold.npy")
    warm = _in_subprocess(cnn, cache, tmp_path / "warm.npy")
    n = cold["stats"]["stored"]
    assert n >= 4 and cold["stats"]["hit"] == 0 and len(_entries(cache)) == n
    assert warm["stats"]["hit"] == n and warm["stats"]["miss"] == 0 and warm["stats"]["stored"] == 0
    np.testing.assert_array_equal(np.load(tmp_path / "cold.npy"), np.load(tmp_path / "warm.npy"))
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(cnn[1].SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": cnn[2]})
    np.testing.assert_allclose(np.load(tmp_path / "warm.npy"), want, rtol=1e-5, atol=1e-5)


def test_concurrent_processes_share_one_cache_safely(cnn, cache, tmp_path):
    env = {**__import__("os").environ, "EMBER_CACHE_DIR": str(cache)}
    src, x = str(cnn[0] / "cnn.onnx"), str(cnn[0] / "x.npy")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", COMPILE_AND_RUN, src, x, str(tmp_path / f"{k}.npy")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "0.npy"), np.load(tmp_path / "1.npy"))
    for entry in _entries(cache):  # whoever won each race, every entry is whole
        meta = json.loads((entry / "meta.json").read_text())
        assert meta["sha256"] == kernel_cache._sha256_file(entry / "kernel.so")
    assert not list(cache.glob("kernels/*/.tmp-*"))


def _compile_and_run(cnn) -> np.ndarray:
    clear_cache()
    return ember.compile(cnn[1]).run([cnn[2]])[0]


# a truncated library fails the same checksum as a flipped byte: nightly only
@pytest.mark.parametrize(
    "damage", ["library", nightly_param("truncated"), "meta", "missing-library"]
)
def test_a_corrupt_entry_is_rebuilt_not_loaded(cnn, cache, damage):
    want = _compile_and_run(cnn)
    entries = _entries(cache)
    assert entries and kernel_cache.STATS["stored"] == len(entries)
    for entry in entries:
        lib = entry / "kernel.so"
        data = bytearray(lib.read_bytes())
        if damage == "library":
            data[len(data) // 2] ^= 0xFF
            lib.write_bytes(bytes(data))
        elif damage == "truncated":
            lib.write_bytes(bytes(data[: len(data) // 3]))
        elif damage == "meta":
            (entry / "meta.json").write_text("{not json")
        else:
            lib.unlink()
    got = _compile_and_run(cnn)
    np.testing.assert_array_equal(got, want)
    assert kernel_cache.STATS["corrupt"] == len(entries) and kernel_cache.STATS["hit"] == 0
    assert _entries(cache) == entries  # rebuilt in place, whole again
    for entry in entries:
        meta = json.loads((entry / "meta.json").read_text())
        assert meta["sha256"] == kernel_cache._sha256_file(entry / "kernel.so")
    np.testing.assert_array_equal(_compile_and_run(cnn), want)
    assert kernel_cache.STATS["hit"] == len(entries)


def test_the_cache_folder_follows_the_environment(cnn, cache, tmp_path, monkeypatch):
    _compile_and_run(cnn)
    assert _entries(cache)
    other = tmp_path / "other"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(other))
    _compile_and_run(cnn)
    assert len(_entries(other)) == len(_entries(cache))


# both switches end in config.disk_cache_enabled (the next test checks each without a
# compile): one compiles in CI, both nightly
@pytest.mark.parametrize("off", [nightly_param(("EMBER_CACHE_DIR", "")), ("EMBER_DISK_CACHE", "0")])
def test_the_cache_can_be_turned_off(cnn, cache, monkeypatch, off):
    monkeypatch.setenv(*off)
    assert not config.disk_cache_enabled()
    want = _compile_and_run(cnn)
    assert kernel_cache.STATS == {"hit": 0, "miss": 0, "corrupt": 0, "stored": 0}
    assert not cache.exists()
    np.testing.assert_array_equal(_compile_and_run(cnn), want)


@pytest.mark.parametrize("off", [("EMBER_CACHE_DIR", ""), ("EMBER_DISK_CACHE", "0")])
def test_either_switch_turns_the_cache_off(monkeypatch, off):
    monkeypatch.setenv("EMBER_DISK_CACHE", "1")
    monkeypatch.setenv("EMBER_CACHE_DIR", "/tmp/somewhere")
    assert config.disk_cache_enabled()
    monkeypatch.setenv(*off)
    assert not config.disk_cache_enabled()


def test_default_folder_is_under_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("EMBER_CACHE_DIR", raising=False)
    monkeypatch.delenv("EMBER_DISK_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert config.cache_dir() == tmp_path / "ember"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert config.cache_dir() == Path.home() / ".cache" / "ember"
    assert config.disk_cache_enabled()


def test_the_entry_name_changes_with_version_target_and_key(monkeypatch):
    key = ("group", ("body",), "llvm", None)
    llvm = Target.parse("llvm")
    name = kernel_cache.entry_key(key, llvm)
    assert name == kernel_cache.entry_key(key, llvm)
    assert name != kernel_cache.entry_key((*key[:3], "records-fingerprint"), llvm)
    assert name != kernel_cache.entry_key(key, Target.parse("llvm -opt-level=2"))
    monkeypatch.setattr(kernel_cache, "__version__", "99.0.0")  # what the key reads
    assert name != kernel_cache.entry_key(key, llvm)


def test_cuda_kernels_are_not_stored_as_cpu_libraries():
    assert not kernel_cache.enabled(Target.parse("cuda"))


def test_the_entry_name_changes_with_the_source(monkeypatch, tmp_path):
    """An edited template under the same version number must not load the old kernels."""
    key = ("group", ("body",), "llvm", None)
    llvm = Target.parse("llvm")
    name = kernel_cache.entry_key(key, llvm)
    monkeypatch.setattr(kernel_cache, "source_fingerprint", lambda: "edited")
    assert name != kernel_cache.entry_key(key, llvm)


def test_the_source_fingerprint_follows_an_edit(monkeypatch, tmp_path):
    package = tmp_path / "fake_codegen"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "schedule.py").write_text("TILE = 4\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_CODE_PACKAGES", ("fake_codegen",))
    kernel_cache.source_fingerprint.cache_clear()
    try:
        before = kernel_cache.source_fingerprint()
        kernel_cache.source_fingerprint.cache_clear()
        assert kernel_cache.source_fingerprint() == before
        (package / "schedule.py").write_text("TILE = 8\n")
        kernel_cache.source_fingerprint.cache_clear()
        assert kernel_cache.source_fingerprint() != before
    finally:
        kernel_cache.source_fingerprint.cache_clear()
