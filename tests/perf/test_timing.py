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


def _watch(times_per_probe: list[list[float]]):
    from ember.perf.host import HostWatch

    probes = iter(times_per_probe)
    return HostWatch(probe=lambda: list(next(probes)))


def test_a_round_the_host_slowed_is_taken_again_and_reported():
    """Probes between rounds (two CPUs): the probe after attempt 2 finds the second CPU
    1.5x slow, so attempt 2 (which it ends) and attempt 3 (which it starts) are taken
    again; the three rounds kept are attempts 1, 4 and 5."""
    log: list[str] = []
    bench = _bench([np.arange(6, dtype="float32").reshape(2, 3)], log)
    bench.ort.seconds = [2e-3, 9e-3, 8e-3, 3e-3, 1e-3]
    bench.ember.seconds = [1e-3, 1e-3, 1e-3, 1e-3, 2e-3]
    bench.load("m", _Model(), {})
    watch = _watch([[1.0, 1.0]] * 3 + [[1.0, 1.5]] + [[1.0, 1.0]] * 3)
    watch.check()  # the calibration's probe
    t = bench.time("m", threads=2, rounds=3, pause=0.0, host=watch)
    assert log == ["onnxruntime", "ember"] * 5
    assert t.retaken == 2 and t.ratios == pytest.approx([2.0, 3.0, 0.5])
    entry = t.as_dict()
    assert entry["retaken"] == 2
    assert [r["host_slowdown"] for r in entry["rounds"]] == [1.0, 1.0, 1.0]


def test_retakes_stop_at_the_number_of_rounds():
    """A host slow the whole time: after ``rounds`` retakes the rounds are kept as they
    come, each with its slowdown in the report."""
    log: list[str] = []
    bench = _bench([np.arange(6, dtype="float32").reshape(2, 3)], log)
    bench.ort.seconds = [2e-3] * 4
    bench.ember.seconds = [1e-3] * 4
    bench.load("m", _Model(), {})
    watch = _watch([[1.0]] * 5 + [[2.0]] * 5)
    watch.calibrate(warmup=4, pause=0.0)
    t = bench.time("m", threads=1, rounds=2, pause=0.0, host=watch)
    assert log == ["onnxruntime", "ember"] * 4 and t.retaken == 2
    assert [r["host_slowdown"] for r in t.as_dict()["rounds"]] == [2.0, 2.0]


def test_the_watch_measures_against_each_cpu_s_usual_time():
    watch = _watch([[2.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.3], [1.2, 1.0]])
    assert watch.check() == 1.0  # the first probe only starts the history
    assert watch.check() == 1.0  # CPU 0 at 1.0: the median of 2.0 and 1.0 is 1.5
    assert watch.check() == 1.0  # CPU 0's usual time is now 1.0
    assert watch.check() == pytest.approx(1.3) and watch.is_slow(1.3)
    assert watch.check() == pytest.approx(1.2) and not watch.is_slow(1.2)


def test_a_host_slow_most_of_the_time_is_the_usual_and_a_fast_spell_is_not_flagged():
    """Measured against the fastest time, a host that is 1.6x slower most of the time
    would flag nearly every round (a catalog run retook 71, the cap of three on 23 of 24
    models); against the median,
    only a spell slower than the usual is."""
    watch = _watch([[1.0, 1.0]] + [[1.6, 1.6]] * 6 + [[1.0, 1.0], [2.4, 1.6]])
    watch.calibrate(warmup=7, pause=0.0)
    assert watch.check() < 1.0  # a fast spell: not a slowdown
    assert watch.check() == pytest.approx(1.5) and watch.is_slow(1.5)


def test_a_real_probe_pins_each_cpu_and_restores_the_affinity():
    import os

    from ember.perf.host import probe_cpus

    mask = os.sched_getaffinity(0)
    times = probe_cpus(sorted(mask), loop=1000)
    assert len(times) == len(mask) and all(t > 0 for t in times)
    assert os.sched_getaffinity(0) == mask
