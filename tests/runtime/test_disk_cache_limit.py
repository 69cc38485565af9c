"""The disk cache stays under EMBER_CACHE_MAX_MB, dropping least recently used entries
(issue 22, item 36: an afternoon of compiling left 144 MB)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import ember
from ember import config, disk_cache, te
from ember.graph import kernel_cache


def _entry(root, sub: str, name: str, nbytes: int, age: float):
    folder = root / sub / name
    folder.mkdir(parents=True)
    (folder / "blob").write_bytes(os.urandom(nbytes))
    past = time.time() - age
    os.utime(folder, (past, past))
    return folder


def test_trim_removes_least_recently_used_until_under_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_CACHE_MAX_MB", "1")
    old = [_entry(tmp_path, "kernels/ab", f"k{i}", 300_000, age=100 - i) for i in range(3)]
    new = _entry(tmp_path, "cuda", "c0", 300_000, age=1)
    _entry(tmp_path, "kernels/ab", ".tmp-half", 300_000, age=500)  # being written: untouched
    assert disk_cache.trim(force=True) > 0
    left = {p.name for p in old + [new] if p.exists()}
    assert "c0" in left and "k2" in left and "k0" not in left
    total = sum(f.stat().st_size for f in tmp_path.rglob("blob") if ".tmp-" not in str(f))
    assert total <= config.cache_max_bytes()
    assert (tmp_path / "kernels/ab/.tmp-half").exists()
    assert disk_cache.trim(force=True) == 0  # under the limit: nothing more goes


def test_a_hit_counts_as_a_use(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_CACHE_MAX_MB", "0.5")
    n = 37
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    mod = ember.build(te.create_schedule(B.op), [A, B], target="llvm")
    kernel_cache.store("ff" + "0" * 62, mod)
    kernel_cache.flush()
    entry = kernel_cache.entry_path("ff" + "0" * 62)
    os.utime(entry, (1.0, 1.0))
    older = _entry(tmp_path, "kernels/aa", "aa-older", 600_000, age=50)
    assert kernel_cache.load("ff" + "0" * 62) is not None  # the hit touches the entry
    disk_cache.trim(force=True)
    assert entry.exists() and not older.exists()
    a, b = np.random.default_rng(0).random(n).astype("float32"), np.empty(n, "float32")
    kernel_cache.load("ff" + "0" * 62)(a, b)
    np.testing.assert_allclose(b, a * 3)


@pytest.mark.parametrize("value,mb", [("", 1024), ("abc", 1024), ("-3", 1024), ("2.5", 2.5)])
def test_the_limit_setting(monkeypatch, value, mb):
    monkeypatch.setenv("EMBER_CACHE_MAX_MB", value)
    assert config.cache_max_bytes() == int(mb * 2**20)
