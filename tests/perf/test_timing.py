"""The timing loop with stand-in runtimes: outputs are checked before anything is timed,
and the runtimes take turns (onnxruntime's block, then Ember's) for every round."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import ArgumentError
from ember.perf.runners import Loaded
from ember.perf.timing import Bench, MismatchError


class _Fake:
    def __init__(self, name: str, outputs: list, seconds: list[float], log: list) -> None:
        self.name, self.outputs, self.seconds, self.log = name, outputs, list(seconds), log

    def load(self, key: str, model: bytes, inputs: dict) -> Loaded:
        return Loaded(0.25, self.outputs)

    def time(self, key: str, threads: int, number: int, repeat: int, clock: str) -> tuple:
        self.log.append(self.name)
        return self.seconds.pop(0), 7


class _Model:
    def SerializeToString(self) -> bytes:  # noqa: N802 (onnx's name)
        return b""


def _bench(ember_out: list, log: list) -> Bench:
    bench = Bench("blocks")
    ref = [np.arange(6, dtype="float32").reshape(2, 3)]
    bench.ort = _Fake("onnxruntime", ref, [2e-3, 3e-3, 1e-3], log)
    bench.ember = _Fake("ember", ember_out, [1e-3, 1e-3, 2e-3], log)
    return bench


def test_runtimes_take_turns_and_the_ratio_is_the_median_of_the_rounds():
    log: list[str] = []
    bench = _bench([np.arange(6, dtype="float32").reshape(2, 3) + 1e-5], log)
    assert bench.load("m", _Model(), {}) == 0.25
    t = bench.time("m", threads=2, rounds=3, pause=0.0)
    assert log == ["onnxruntime", "ember"] * 3
    assert t.ratios == pytest.approx([2.0, 3.0, 0.5]) and t.ratio == pytest.approx(2.0)
    assert t.numbers == (7, 7) and t.compile_s == 0.25


def test_outputs_that_differ_stop_the_benchmark_before_timing():
    log: list[str] = []
    bench = _bench([np.arange(6, dtype="float32").reshape(2, 3) * 1.1], log)
    with pytest.raises(MismatchError, match="model 'm': Ember's output 0 differs"):
        bench.load("m", _Model(), {})
    with pytest.raises(ArgumentError, match="model .m. was not loaded"):
        bench.time("m", threads=1, pause=0.0)
    assert log == []
