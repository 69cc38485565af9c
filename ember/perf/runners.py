"""The two runtimes a benchmark compares, behind one small interface: load a model (Ember
compiles it, onnxruntime opens a session), then time a block of runs on a given number of
threads.

:mod:`ember.perf.timing` calls a runner directly (``mode="blocks"``) or through a worker
process that owns it (:mod:`ember.perf.workers`, ``mode="process"``), so the same code
times a runtime either way. A model arrives as serialized ONNX bytes and its inputs as
numpy arrays, which is what crosses a process boundary cheaply.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import ember
from ember.errors import ArgumentError, UserError
from ember.runtime import set_num_threads

MIN_BATCH_S = 0.05  # a batch of runs lasts at least this long when ``number`` is 0 (auto)
MAX_NUMBER = 100_000
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}

RUNTIMES = ("ember", "onnxruntime")


@dataclass(frozen=True)
class EmberSettings:
    """How Ember's side compiles each model.

    ``cold`` empties the in-process kernel cache and turns the disk cache off, so the
    compile time counts every kernel (``bench_models.py`` prints it); ``passes`` is a
    graph-pass spec (:func:`graph_passes`); ``records`` a tuning records file that the
    compile applies (``ember tune``'s log), to time a tuned model against onnxruntime."""

    cold: bool = False
    passes: str = ""
    records: str = ""


@dataclass(frozen=True)
class Loaded:
    """What loading a model gave: the seconds it took (Ember's compile) and the outputs of
    one run on the benchmark's inputs (checked against the other runtime before timing)."""

    seconds: float
    outputs: list[np.ndarray]


def best_of(fn: Callable[[], object], number: int, repeat: int, clock: str) -> tuple[float, int]:
    """Seconds per call of ``fn``: the best of ``repeat`` batches of ``number`` calls, after
    one call that wakes the thread pool. ``number`` 0 picks one so that a batch lasts at
    least ``MIN_BATCH_S``. Returns the seconds and the ``number`` used.

    The best batch, not the mean: on a shared machine the noise only ever adds time."""
    tick = CLOCKS[clock]
    start = tick()
    fn()
    once = tick() - start
    if number <= 0:
        number = min(MAX_NUMBER, max(1, math.ceil(MIN_BATCH_S / max(once, 1e-7))))
    times = []
    for _ in range(max(1, repeat)):
        start = tick()
        for _ in range(number):
            fn()
        times.append((tick() - start) / number)
    return min(times), number


def graph_passes(spec: str) -> tuple[Any, ...] | None:
    """The graph passes a spec names (``bench_models.py --graph-passes``): comma-separated
    names from ``ember.frontend.passes``; ``default`` stands for the target's own list and
    ``-name`` drops one (``default,-alter_conv_layout``). An empty spec: the defaults."""
    if not spec:
        return None
    # start-up cost: the compiler loads in Ember's process only, not onnxruntime's
    from ember import frontend

    chosen: list[Any] = []
    for name in spec.split(","):
        if name == "default":
            chosen += ember.get_backend("llvm").graph_passes(frontend.passes.DEFAULT_PASSES)
        elif name.startswith("-"):
            chosen = [p for p in chosen if getattr(p, "name", "") != name[1:]]
        elif hasattr(frontend.passes, name):
            chosen.append(getattr(frontend.passes, name))
        else:
            raise ArgumentError(f"--graph-passes: no graph pass named {name!r}")
    return tuple(chosen)


def onnxruntime() -> Any:
    """The ``onnxruntime`` module, or an error naming the extra that installs it."""
    try:
        # optional dependency: onnxruntime (the `bench` extra)
        import onnxruntime as ort
    except ImportError as e:
        raise UserError(
            "benchmarking against onnxruntime needs it: pip install ember[bench]"
        ) from e
    return ort


class EmberRunner:
    """Ember's side: ``ember.compile`` for the CPU, as ``settings`` say; threads through
    ``set_num_threads``."""

    name = "ember"

    def __init__(self, settings: EmberSettings | None = None) -> None:
        self.settings = settings or EmberSettings()
        self.models: dict[str, Any] = {}
        self.inputs: dict[str, dict[str, np.ndarray]] = {}

    def load(self, key: str, model: bytes, inputs: dict[str, np.ndarray]) -> Loaded:
        """Compile ``model`` under ``key``; one run's outputs come back."""
        # optional dependency: onnx
        import onnx

        proto = onnx.load_from_string(model)
        self.models.clear()  # one model at a time (see OrtRunner.load)
        self.inputs.clear()
        saved = os.environ.get("EMBER_DISK_CACHE")
        cold, records = self.settings.cold, self.settings.records or None
        if cold:
            # start-up cost: the compiler loads in Ember's process only, not onnxruntime's
            from ember.graph.kernels import clear_cache

            clear_cache()
            os.environ["EMBER_DISK_CACHE"] = "0"
        try:
            start = time.perf_counter()
            passes = graph_passes(self.settings.passes)
            lib = ember.compile(proto, target="llvm", records=records, graph_passes=passes)
            seconds = time.perf_counter() - start
        finally:
            if cold and saved is None:
                del os.environ["EMBER_DISK_CACHE"]
            elif cold:
                os.environ["EMBER_DISK_CACHE"] = saved  # type: ignore[assignment]
        self.models[key], self.inputs[key] = lib, inputs
        return Loaded(seconds, [np.asarray(o) for o in lib.run(inputs)])

    def time(
        self, key: str, threads: int, number: int, repeat: int, clock: str
    ) -> tuple[float, int]:
        """Seconds per run of model ``key`` on ``threads`` threads (see :func:`best_of`)."""
        lib, inputs = self.models[key], self.inputs[key]
        set_num_threads(threads)
        try:
            return best_of(lambda: lib.run(inputs), number, repeat, clock)
        finally:
            set_num_threads(None)


class OrtRunner:
    """onnxruntime's side: a CPU session with every graph optimization on (its default) and
    ``intra_op_num_threads`` set to the thread count, one session per count."""

    name = "onnxruntime"

    def __init__(self) -> None:
        self.models: dict[str, bytes] = {}
        self.inputs: dict[str, dict[str, np.ndarray]] = {}
        self.sessions: dict[tuple[str, int], Any] = {}

    def _session(self, key: str, threads: int) -> Any:
        if (key, threads) not in self.sessions:
            ort = onnxruntime()
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            self.sessions[key, threads] = ort.InferenceSession(
                self.models[key], opts, providers=["CPUExecutionProvider"]
            )
        return self.sessions[key, threads]

    def load(self, key: str, model: bytes, inputs: dict[str, np.ndarray]) -> Loaded:
        """Open a session for ``model`` under ``key``, closing the earlier models' (a runner
        holds one model at a time: with every session kept, timing the whole catalog at one
        thread grew this process to 12 GB and the OOM killer ended the run); one run's
        outputs come back."""
        self.models.clear()
        self.inputs.clear()
        self.sessions.clear()
        self.models[key], self.inputs[key] = model, inputs
        start = time.perf_counter()
        session = self._session(key, os.cpu_count() or 1)
        seconds = time.perf_counter() - start
        return Loaded(seconds, [np.asarray(o) for o in session.run(None, inputs)])

    def time(
        self, key: str, threads: int, number: int, repeat: int, clock: str
    ) -> tuple[float, int]:
        """Seconds per run of model ``key`` on ``threads`` threads (see :func:`best_of`)."""
        session, inputs = self._session(key, threads), self.inputs[key]
        return best_of(lambda: session.run(None, inputs), number, repeat, clock)


def make_runner(name: str, settings: EmberSettings | None = None) -> EmberRunner | OrtRunner:
    """The runner for runtime ``name`` (one of ``RUNTIMES``); ``settings`` are Ember's."""
    if name == "ember":
        return EmberRunner(settings)
    if name == "onnxruntime":
        return OrtRunner()
    raise ArgumentError(f"no runtime named {name!r}; choose one of {', '.join(RUNTIMES)}")
