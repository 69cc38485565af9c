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
pinned to each CPU the process may use, keeps each CPU's fastest time, and reports a
probe's *slowdown*: its slowest CPU's time over that CPU's fastest. ``ember bench``
probes before and after each round and takes a round again when either probe found a
slowdown of :data:`SLOW` or more, up to as many retakes as rounds; what it kept is in the
report (each round's slowdown, the retakes), so a reader sees which figures the host may
have touched.

What it does not catch: periods in which a 2-thread run of either runtime drops to about
its 1-thread speed while each CPU, probed alone, runs at its best (MobileNetV2 at 6.3-6.8
ms in every runtime for four rounds in a row, the probes at 1.03-1.04x; 2026-11-29). A
probe of both CPUs at once (two threads hashing, which releases the GIL) read 0.96-1.15x
of one CPU alone in a fast period; whether it sees those slow periods is not measured yet.
"""

from __future__ import annotations

import os
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
    """The fastest probe time of each CPU so far, and each new probe's slowdown against it.

    ``probe`` (for tests) returns one time per CPU, as :func:`probe_cpus` does; the first
    ``warmup`` probes of :meth:`calibrate` only set the fastest times."""

    def __init__(
        self,
        slow: float = SLOW,
        probe: Callable[[], list[float]] | None = None,
    ) -> None:
        cpus = allowed_cpus()
        self.slow = slow
        self._probe = probe or (lambda: probe_cpus(cpus))
        self._best: list[float] | None = None

    def calibrate(self, warmup: int = 5, pause: float = 0.02) -> None:
        """Probe ``warmup`` times, ``pause`` seconds apart, to learn the fastest times."""
        for _ in range(warmup):
            self.check()
            time.sleep(pause)

    def check(self) -> float:
        """Probe now: the slowest CPU's time over its fastest so far (1.0 at best)."""
        times = self._probe()
        if self._best is None or len(self._best) != len(times):
            self._best = list(times)
            return 1.0
        self._best = [min(b, t) for b, t in zip(self._best, times)]
        return max((t / b for t, b in zip(times, self._best) if b > 0), default=1.0)

    def is_slow(self, slowdown: float) -> bool:
        """Whether a probe's slowdown says the host was taking a CPU."""
        return slowdown >= self.slow


def calibrated_watch(enabled: bool) -> HostWatch | None:
    """A :class:`HostWatch` that has learned each CPU's fastest time, or None when the
    benchmark was told not to probe (``--no-host-check``)."""
    if not enabled:
        return None
    watch = HostWatch()
    watch.calibrate()
    return watch
