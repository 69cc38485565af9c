"""The disk cache of whole models (``ember/graph/model_cache.py``): a stored model loads
with the same outputs, a tampered entry is rebuilt and never loaded, a model that
compiles per size is built but not kept, and the cache is off when the kernels' is."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.graph import model_cache
from ember.graph.dynamic_model import DynamicModel

pytest.importorskip("onnx")
from ember.frontend.testing.models import mlp, symbolic_batch  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_DISK_CACHE", "1")
    monkeypatch.setattr(model_cache, "STATS", dict.fromkeys(model_cache.STATS, 0))
    return tmp_path


def _model():
    model, feeds = mlp(np.random.default_rng(3), batch=3, sizes=(11, 9, 5))
    return model, list(feeds.values())


def test_a_stored_model_loads_with_the_same_outputs(cache):
    model, inputs = _model()
    key = model_cache.model_key([model.SerializeToString(), "llvm"])
    built = []

    def build():
        built.append(1)
        return ember.compile(model)

    first = model_cache.cached_model(key, build)
    second = model_cache.cached_model(key, build)
    assert built == [1] and model_cache.STATS["stored"] == 1 and model_cache.STATS["hit"] == 1
    assert second is not first
    np.testing.assert_array_equal(second.run(inputs)[0], first.run(inputs)[0])


def test_keys_separate_what_differs():
    assert model_cache.model_key(["ab", "c"]) != model_cache.model_key(["a", "bc"])
    weights = np.arange(6, dtype=np.float32)
    assert model_cache.model_key([weights]) != model_cache.model_key([weights + 1])


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_entry_is_rebuilt_not_loaded(cache, damage):
    model, inputs = _model()
    key = model_cache.model_key([model.SerializeToString(), damage])
    model_cache.cached_model(key, lambda: ember.compile(model))
    path = model_cache.entry_path(key) / model_cache.MODEL
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    again = model_cache.cached_model(key, lambda: ember.compile(model))
    assert model_cache.STATS["corrupt"] == 1 and model_cache.STATS["stored"] == 2
    ref = ember.compile(model).run(inputs)[0]
    np.testing.assert_array_equal(again.run(inputs)[0], ref)


def test_a_model_compiled_per_size_is_not_kept(cache):
    model, _ = _model()
    dynamic = symbolic_batch(model, "N")
    key = model_cache.model_key([dynamic.SerializeToString()])
    got = model_cache.cached_model(key, lambda: ember.compile(dynamic))
    assert isinstance(got, DynamicModel) and model_cache.STATS["stored"] == 0
    assert not model_cache.entry_path(key).exists()


def test_off_when_the_disk_cache_is_off(cache, monkeypatch):
    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    model, _ = _model()
    key = model_cache.model_key([model.SerializeToString()])
    model_cache.cached_model(key, lambda: ember.compile(model))
    assert model_cache.STATS == dict.fromkeys(model_cache.STATS, 0)
    assert not (cache / "models").exists()
