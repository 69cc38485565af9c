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


# -- ember.compile of an ONNX file: the whole compiled model comes from the cache ----------


def _reference(model, inputs):
    """onnx's own evaluator: a reference that shares no code with Ember's compile."""
    from onnx.reference import ReferenceEvaluator

    names = [i.name for i in model.graph.input]
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


def _saved(tmp_path, seed=3, name="m.onnx"):
    import onnx

    model, feeds = mlp(np.random.default_rng(seed), batch=3, sizes=(11, 9, 5))
    path = tmp_path / name
    onnx.save(model, str(path))
    return path, model, list(feeds.values())


def test_a_file_compiled_again_is_loaded_whole(cache, tmp_path):
    path, model, inputs = _saved(tmp_path)
    first = ember.compile(str(path))
    second = ember.compile(path)  # a Path names the same file
    assert model_cache.STATS == {"hit": 1, "miss": 1, "corrupt": 0, "stored": 1}
    want = _reference(model, inputs)
    for compiled in (first, second):
        np.testing.assert_allclose(compiled.run(inputs)[0], want, rtol=1e-5, atol=1e-5)


def test_an_edited_file_is_compiled_again(cache, tmp_path):
    path, _, inputs = _saved(tmp_path, seed=3)
    ember.compile(path)
    _, edited, _ = _saved(tmp_path, seed=4)  # other weights, same path and size
    got = ember.compile(path).run(inputs)[0]
    assert model_cache.STATS["hit"] == 0 and model_cache.STATS["miss"] == 2
    np.testing.assert_allclose(got, _reference(edited, inputs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "context",
    [
        {"disabled_pass": ["vectorize_loops"]},
        {"config": {"tir.disable_vectorize": True}},
        {"opt_level": 3},
    ],
)
def test_pass_options_are_part_of_the_key(cache, tmp_path, context):
    path, model, inputs = _saved(tmp_path)
    ember.compile(path)
    with ember.transform.PassContext(**context):
        got = ember.compile(path).run(inputs)[0]
        ember.compile(path)  # the same options again: now a hit
    assert model_cache.STATS == {"hit": 1, "miss": 2, "corrupt": 0, "stored": 2}
    np.testing.assert_allclose(got, _reference(model, inputs), rtol=1e-5, atol=1e-5)


class _Counting:
    def __init__(self) -> None:
        self.passes = 0

    def run_after_pass(self, ir, info) -> None:
        self.passes += 1


def test_what_the_cache_cannot_stand_for_is_compiled(cache, tmp_path, monkeypatch):
    path, _, _ = _saved(tmp_path)
    ember.compile(path)
    counting = _Counting()  # instruments see every pass: they get a compile, not a load
    with ember.transform.PassContext(instruments=[counting]):
        ember.compile(path)
    assert counting.passes > 0
    ember.compile(path, graph_passes=())  # passes given by the caller
    monkeypatch.setenv("EMBER_DUMP_DIR", str(tmp_path / "dump"))  # dumps are written
    ember.compile(path)
    assert any((tmp_path / "dump").iterdir())
    assert model_cache.STATS == {"hit": 0, "miss": 1, "corrupt": 0, "stored": 1}


def test_weights_in_another_file_are_not_cached_whole(cache, tmp_path):
    import onnx

    model, feeds = mlp(np.random.default_rng(5), batch=3, sizes=(11, 9, 5))
    inputs = list(feeds.values())
    want = _reference(model, inputs)  # before saving moves the weights out of the proto
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    for _ in range(2):
        got = ember.compile(path).run(inputs)[0]
    assert model_cache.STATS == dict.fromkeys(model_cache.STATS, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_records_in_force_are_part_of_the_key(cache, tmp_path, monkeypatch):
    from ember.graph import compile as driver

    path, _, _ = _saved(tmp_path)
    chosen = [("a",)]
    monkeypatch.setattr(driver, "active_fingerprint", lambda: tuple(chosen))
    ember.compile(path)
    chosen.append(("b",))  # other records choose other kernels: another entry
    ember.compile(path)
    ember.compile(path)
    assert model_cache.STATS == {"hit": 1, "miss": 2, "corrupt": 0, "stored": 2}


def test_threads_compiling_one_file_at_once_agree(cache, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    path, model, inputs = _saved(tmp_path)
    with ThreadPoolExecutor(4) as pool:
        models = list(pool.map(lambda _: ember.compile(path), range(4)))
    want = _reference(model, inputs)
    for compiled in models:
        np.testing.assert_allclose(compiled.run(inputs)[0], want, rtol=1e-5, atol=1e-5)
    assert len(list((cache / "models").glob("*/*/model.ember"))) == 1  # renamed in whole
