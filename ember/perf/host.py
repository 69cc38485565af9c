"""Whether the host is slowing one of this machine's CPUs: the probe ``ember bench``
takes around each round.

A virtual machine's CPU can run slower for a second or more while its host serves other
guests. On the 2-core guest this project benchmarks on, a fixed loop pinned to one CPU
ran 1.3x slower or more in 5 and 19 of 78 samples on its two CPUs, never on both at
once, with nothing of ours running (``benchmarks/host_noise.py``). While one CPU is
slowed, a 2-thread run of either runtime goes at about its 1-thread speed (MobileNetV2:
3.6-4.0 ms in most processes, 6.4-6.8 ms in such a spell, onnxruntime's and Ember's
alike), so a round whose two turns straddle the start or end of a spell compares the
host's moods, not the runtimes: its ratio lands far from the others and widens the range
that the gate takes for noise.

:class:`HostWatch` times the same pure-Python loop (:data:`LOOP` rounds, about 2.5 ms)
pinned to each CPU the process may use, keeps every probe's times, and reports a probe's
*slowdown*: the largest, over the CPUs, of its time over that CPU's usual time, the
median of all its probes so far. ``ember bench`` probes before and after each round and
takes a round again when either probe found a slowdown of :data:`SLOW` or more, up to as
many retakes as rounds; what it kept is in the report (each round's slowdown, the
retakes), so a reader sees which figures the host may have touched.

Why the usual time and not the fastest: the host's mood lasts. On 2026-11-29, in the
evening, both CPUs ran the loop 1.5-1.6x slower than their fastest in 26 of 38 samples
of ``host_noise.py``; measured against the fastest, the probe had a catalog run retake
71 rounds, the cap of three on 23 of its 24 models, which only tripled its time.
Against the median, the rounds are compared in whatever state the host is mostly in,
and a spell out of it is what gets retaken. A spell *faster* than usual is not flagged.

What it does not catch: periods in which a 2-thread run of either runtime drops to about
its 1-thread speed while each CPU, probed alone, runs as usual (MobileNetV2 at 6.3-6.8
ms in every runtime for four rounds in a row, the probes at 1.03-1.04x; 2026-11-29). A
probe of both CPUs at once (two threads hashing, which releases the GIL) read 0.96-1.15x
of one CPU alone in a fast period; whether it sees those slow periods is not measured yet.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence

LOOP = 100_000
SLOW = 1.3  # a CPU this much slower than its best: the host is taking it


def spin(n: int) -> int:
    """A fixed amount of interpreter work, with no memory traffic to speak of."""
    total = 0
    for i in range(n):
        total += i
    return total


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on (one, unnamed, where affinity is not available)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return []


def probe_cpus(cpus: Sequence[int], loop: int = LOOP) -> list[float]:
    """Seconds of ``spin(loop)`` pinned to each of ``cpus`` in turn (unpinned, once, where
    there are none); the calling thread's affinity is restored after."""
    if not cpus:
        start = time.perf_counter()
        spin(loop)
        return [time.perf_counter() - start]
    mask = os.sched_getaffinity(0)
    out = []
    try:
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            start = time.perf_counter()
            spin(loop)
            out.append(time.perf_counter() - start)
    finally:
        os.sched_setaffinity(0, mask)
    return out


class HostWatch:
    """Every probe's time on each CPU so far, and each new probe's slowdown against the
    CPU's usual (median) time.

    ``probe`` (for tests) returns one time per CPU, as :func:`probe_cpus` does; the
    probes of :meth:`calibrate` only learn the usual times."""

    def __init__(
        self,
        slow: float = SLOW,
        probe: Callable[[], list[float]] | None = None,
    ) -> None:
        cpus = allowed_cpus()
        self.slow = slow
        self._probe = probe or (lambda: probe_cpus(cpus))
        self._seen: list[list[float]] = []  # per CPU, every probe's time

    def calibrate(self, warmup: int = 9, pause: float = 0.05) -> None:
        """Probe ``warmup`` times, ``pause`` seconds apart, to learn the usual times."""
        for _ in range(warmup):
            self.check()
            time.sleep(pause)

    def check(self) -> float:
        """Probe now: the slowest CPU's time over its usual time (1.0 or less: as usual)."""
        times = self._probe()
        if len(self._seen) != len(times):
            self._seen = [[t] for t in times]
            return 1.0
        for seen, t in zip(self._seen, times):
            seen.append(t)
        usual = [statistics.median(seen) for seen in self._seen]
        return max((t / u for t, u in zip(times, usual) if u > 0), default=1.0)

    def is_slow(self, slowdown: float) -> bool:
        """Whether a probe's slowdown says the host was taking a CPU."""
        return slowdown >= self.slow


def calibrated_watch(enabled: bool) -> HostWatch | None:
    """A :class:`HostWatch` that has learned each CPU's usual time, or None when the
    benchmark was told not to probe (``--no-host-check``)."""
    if not enabled:
        return None
    watch = HostWatch()
    watch.calibrate()
    return watch
