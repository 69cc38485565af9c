"""How far a model's candidates are flushed before each timed call: down to memory where
its weights do not fit in half the last-level cache, only the cores' own caches where they
do (they stay in it from one run of the model to the next)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from ember import tune_worker
from ember.cli.tune_model import _flush_for
from ember.errors import ArgumentError
from ember.frontend.testing import models
from ember.graph.model_tuning import weight_bytes
from ember.tuner import LocalMeasurer, MeasureOption, create_task
from ember.tuner.tune import fallback_entity

pytest.importorskip("onnx")


def _ns(model: object, flush: bool | None) -> argparse.Namespace:
    return argparse.Namespace(model=model, shape=[], flush_cache=flush)


def test_weight_bytes_counts_every_constant():
    model, _ = models.mlp(np.random.default_rng(0), 4, (8, 16, 5))
    expected = 4 * (8 * 16 + 16 + 16 * 5)  # float32: weights and bias, then weights alone
    assert weight_bytes(model) == expected


def test_a_model_that_fits_half_the_cache_keeps_it(monkeypatch, capsys):
    model, _ = models.mlp(np.random.default_rng(0), 4, (8, 16, 5))
    monkeypatch.setattr(tune_worker, "last_level_cache_bytes", lambda: 2 * weight_bytes(model))
    got = _flush_for(_ns(model, None), MeasureOption(flush_cache=True))
    assert got.flush_cache and got.flush_level == "l2"
    assert "fit in half" in capsys.readouterr().out
    # one byte less of cache and the weights no longer fit: flushed down to memory
    monkeypatch.setattr(tune_worker, "last_level_cache_bytes", lambda: 2 * weight_bytes(model) - 2)
    got = _flush_for(_ns(model, None), MeasureOption(flush_cache=True))
    assert got.flush_level == "llc" and "exceed half" in capsys.readouterr().out


def test_an_explicit_flush_choice_is_left_alone(capsys):
    model, _ = models.mlp(np.random.default_rng(0), 4, (8, 16, 5))
    on = MeasureOption(flush_cache=True)
    assert _flush_for(_ns(model, True), on) is on  # --flush-cache: always down to memory
    off = MeasureOption(flush_cache=False)
    assert _flush_for(_ns(model, False), off) is off  # --no-flush-cache: warm
    assert capsys.readouterr().out == ""


def test_an_unknown_flush_level_is_refused():
    with pytest.raises(ArgumentError, match="flush_level must be one of"):
        MeasureOption(flush_level="l3")


def test_the_private_flush_touches_each_cores_l2_twice(monkeypatch):
    monkeypatch.setattr(tune_worker, "private_cache_bytes", lambda: 1 << 16)
    monkeypatch.setattr(tune_worker, "last_level_cache_bytes", lambda: 1 << 20)
    monkeypatch.setattr(tune_worker.os, "cpu_count", lambda: 3)
    l2, llc = tune_worker.CacheFlusher("l2"), tune_worker.CacheFlusher("llc")
    assert [a.nbytes for a in l2.arrays] == [3 << 16] * 2  # read one, write the other
    assert [a.nbytes for a in llc.arrays] == [1 << 20] * 2


def test_cache_sizes_come_from_the_levels_sysfs_names(tmp_path, monkeypatch):
    """cpu0's data and unified caches by level, instruction caches left out."""
    for index, (level, kind, size) in enumerate(
        [
            (1, "Data", "48K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "1024K"),
            (3, "Unified", "32768K"),
        ]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    monkeypatch.setattr(tune_worker, "HOST_CACHE_DIR", tmp_path)
    assert tune_worker._cache_sizes() == {1: 48 << 10, 2: 1 << 20, 3: 32 << 20}
    assert tune_worker.private_cache_bytes() == 1 << 20
    assert tune_worker.last_level_cache_bytes() == 32 << 20


def test_candidates_are_measured_and_checked_with_either_flush():
    task = create_task("matmul.llvm", (16, 24, 8, "float32"))
    for level in ("l2", "llc"):
        option = MeasureOption(number=2, repeat=2, flush_cache=True, flush_level=level)
        with LocalMeasurer(option) as measurer:
            (result,) = measurer.measure(task, [fallback_entity(task)])
        assert result.ok and 0 < result.cost < 1, (level, result)


def test_the_flush_runs_on_the_pool_the_candidate_runs_on(monkeypatch):
    """Called through its bare native entry, the flush kernel ran on libgomp's team, whose
    idle thread then spun through the timed call and held parallel candidates to about
    one thread's speed. Through ``invoke`` it sets its thread count and runs on Ember's
    pool, as the candidate and a model's kernels do."""
    from ember.runtime.threads import parallel_launcher, set_num_threads

    monkeypatch.setattr(tune_worker, "private_cache_bytes", lambda: 1 << 16)
    set_num_threads(2)
    try:
        flush = tune_worker.CacheFlusher("l2")
        flush(None)
        module = flush.fn.module
        assert module.parallel and module._threads_cell.value == 2
        assert (module._launch_cell.value or 0) == parallel_launcher()
    finally:
        set_num_threads(None)
