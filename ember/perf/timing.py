"""Ember beside onnxruntime on one model, each runtime timed alone: the measurement behind
``ember bench`` and ``benchmarks/bench_models.py``.

How a model is timed (:meth:`Bench.time`): for ``rounds`` rounds, onnxruntime runs a
block (the best of ``repeat`` batches of ``number`` runs), the benchmark sleeps ``pause``
seconds so onnxruntime's threads stop spinning, Ember runs its block, and it sleeps
again. A round gives one latency per runtime and their ratio, onnxruntime's time over
Ember's (above 1, Ember is faster). The result is the median ratio over the rounds, and
their range (min-max), which is the noise the measurement itself saw: a gate must not
call a change within it a regression.

Two modes (``mode``):

- ``"process"`` (the default): each runtime lives in its own spawned process
  (:mod:`ember.perf.workers`). This is what a user who runs one runtime sees, and it
  measures the kernels: no two thread pools, allocators or caches share a process.
- ``"blocks"``: both runtimes in this process, taking the same turns with the same
  pauses. Cheaper to start (no second interpreter, the in-process kernel cache is
  shared with the caller), and close to ``"process"`` when the pauses are long enough
  for the idle pool to sleep; it still shares one address space and one libgomp.

What no mode does is alternate single runs in one process: that times the two pools
fighting for the cores, not the kernels (issue 25).

With a :class:`~ember.perf.host.HostWatch` (``ember bench`` passes one unless told
``--no-host-check``), the host is probed before and after each round, and a round during
which it was slowing a CPU is taken again, up to ``rounds`` retakes for a model; each
kept round's probe and the number of retakes go into the report.

Before anything is timed, both runtimes run the model once on the same inputs and
their outputs must agree (:class:`MismatchError` otherwise): a fast wrong answer is no
result.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np

from ember.errors import ArgumentError, SystemError_
from ember.perf.host import HostWatch
from ember.perf.runners import CLOCKS, EmberRunner, EmberSettings, OrtRunner, make_runner
from ember.perf.workers import WorkerRunner

MODES = ("process", "blocks")
PAUSE_S = 0.2  # onnxruntime's and libgomp's threads stop spinning well within this
RTOL = ATOL = 1e-3  # float32 models: a different summation order moves results this much


class MismatchError(SystemError_):
    """Ember's output differs from onnxruntime's on the benchmark's inputs."""


@dataclass
class ModelTiming:
    """One model at one thread count: per-round latencies (seconds) of both runtimes."""

    name: str
    threads: int
    compile_s: float
    ember_s: list[float] = field(default_factory=list)
    ort_s: list[float] = field(default_factory=list)
    numbers: tuple[int, int] = (0, 0)  # runs per batch: Ember's, onnxruntime's
    host_slowdown: list[float] = field(default_factory=list)  # per kept round, if probed
    retaken: int = 0  # rounds taken again because the host was slowing a CPU

    @property
    def ratios(self) -> list[float]:
        """Per round, onnxruntime's time over Ember's."""
        return [o / e for o, e in zip(self.ort_s, self.ember_s)]

    @property
    def ratio(self) -> float:
        """The median ratio over the rounds."""
        return statistics.median(self.ratios)

    @property
    def ember_ms(self) -> float:
        """Ember's median latency in milliseconds."""
        return statistics.median(self.ember_s) * 1e3

    @property
    def ort_ms(self) -> float:
        """onnxruntime's median latency in milliseconds."""
        return statistics.median(self.ort_s) * 1e3

    def as_dict(self) -> dict[str, Any]:
        """The report's entry for this model (:mod:`ember.perf.report`)."""
        return {
            "threads": self.threads,
            "ember_ms": self.ember_ms,
            "ort_ms": self.ort_ms,
            "ratio": self.ratio,
            "ratio_min": min(self.ratios),
            "ratio_max": max(self.ratios),
            "compile_s": self.compile_s,
            "rounds": [
                {"ember_ms": e * 1e3, "ort_ms": o * 1e3, "ratio": o / e}
                | ({"host_slowdown": self.host_slowdown[k]} if self.host_slowdown else {})
                for k, (e, o) in enumerate(zip(self.ember_s, self.ort_s))
            ],
            "number": {"ember": self.numbers[0], "onnxruntime": self.numbers[1]},
            "retaken": self.retaken,
        }


class Bench:
    """The two runtimes, ready to load and time models; close it (or use ``with``) to
    stop the worker processes of ``mode="process"``.

    ``settings`` say how Ember compiles (:class:`~ember.perf.runners.EmberSettings`: a
    cold compile, the graph passes, tuning records).
    """

    def __init__(self, mode: str = "process", settings: EmberSettings | None = None) -> None:
        if mode not in MODES:
            raise ArgumentError(f"no timing mode {mode!r}; choose one of {', '.join(MODES)}")
        self.mode = mode
        self.runners: list[EmberRunner | OrtRunner | WorkerRunner] = []
        for name in ("onnxruntime", "ember"):  # onnxruntime first: it checks the install
            if mode == "process":
                self.runners.append(WorkerRunner(name, settings))
            else:
                self.runners.append(make_runner(name, settings))
        self.ort, self.ember = self.runners
        self.compile_s: dict[str, float] = {}

    def __enter__(self) -> Bench:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes, if any."""
        for runner in self.runners:
            if isinstance(runner, WorkerRunner):
                runner.close()

    def load(self, name: str, model: Any, inputs: dict[str, np.ndarray]) -> float:
        """Load ``model`` (an ONNX ModelProto) in both runtimes under ``name`` and check
        Ember's outputs against onnxruntime's; returns Ember's compile seconds."""
        data = model.SerializeToString()
        want = self.ort.load(name, data, inputs).outputs
        loaded = self.ember.load(name, data, inputs)
        if len(loaded.outputs) != len(want):
            raise MismatchError(
                f"model {name!r}: Ember gave {len(loaded.outputs)} outputs, onnxruntime {len(want)}"
            )
        for k, (got, ref) in enumerate(zip(loaded.outputs, want)):
            try:
                np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
            except AssertionError as e:
                detail = "\n".join(str(e).strip().splitlines()[:6])
                raise MismatchError(
                    f"model {name!r}: Ember's output {k} differs from onnxruntime's "
                    f"(rtol={RTOL}, atol={ATOL}); nothing was timed\n{detail}"
                ) from e
        self.compile_s[name] = loaded.seconds
        return loaded.seconds

    def time(
        self,
        name: str,
        threads: int,
        rounds: int = 3,
        number: int = 0,
        repeat: int = 3,
        clock: str = "wall",
        pause: float = PAUSE_S,
        host: HostWatch | None = None,
    ) -> ModelTiming:
        """Time model ``name`` (loaded first) on ``threads`` threads in both runtimes, by
        turns over ``rounds`` rounds (see the module's docstring); ``number`` 0 picks the
        runs per batch so that a batch lasts about 50 ms. With ``host``, a round the host
        slowed is taken again (up to ``rounds`` times)."""
        for flag, value, least in (("threads", threads, 1), ("rounds", rounds, 1)):
            if value < least:
                raise ArgumentError(f"{flag} must be at least {least}, got {value}")
        if repeat < 1 or number < 0:
            raise ArgumentError(f"repeat must be >= 1 and number >= 0, got {repeat}, {number}")
        if clock not in CLOCKS:
            raise ArgumentError(f"no clock {clock!r}; choose one of {', '.join(CLOCKS)}")
        if name not in self.compile_s:
            raise ArgumentError(f"model {name!r} was not loaded")
        out = ModelTiming(name, threads, self.compile_s[name])
        numbers = [0, 0]
        # probed between rounds, after the pauses: a runtime's threads still spinning
        # after its turn would make a probe beside them look slow
        before = host.check() if host else 1.0
        while len(out.ember_s) < rounds:
            ort_s, numbers[1] = self.ort.time(name, threads, number, repeat, clock)
            time.sleep(pause)
            ember_s, numbers[0] = self.ember.time(name, threads, number, repeat, clock)
            time.sleep(pause)
            after = host.check() if host else 1.0
            slowdown, before = max(before, after), after
            if host is not None and host.is_slow(slowdown) and out.retaken < rounds:
                out.retaken += 1
                continue
            out.ort_s.append(ort_s)
            out.ember_s.append(ember_s)
            if host is not None:
                out.host_slowdown.append(slowdown)
        out.numbers = (numbers[0], numbers[1])
        return out
