"""Is the host slowing this machine's CPUs right now? A fixed loop timed on each CPU.

Run: ``python benchmarks/host_noise.py`` (``--seconds 60 --interval 0.5``). Every
``--interval`` seconds the same pure-Python loop (no memory traffic, no threads, no
Ember) runs pinned to each CPU this process may use, and its time is printed as a
multiple of that CPU's fastest. On a quiet dedicated machine every figure stays near
1.0. On a virtual machine whose host runs other guests, a CPU can run slower for
seconds at a time while nothing of ours runs beside it; any runtime timed then looks
slower, so a benchmark's turns that fall in such a spell measure the host, not the
code. The summary counts the samples at least ``--slow`` times the fastest, per CPU,
and those where every CPU was slow at once.

Measured on the 2-core AMD EPYC (Zen 4) guest this project is benchmarked on
(2026-11-29, nothing else of ours running): ``--seconds 40`` gave CPU 0 at 7.6 ms with 5
of 78 samples 1.3x slower or more, CPU 1 at 7.8 ms with 19 of 78, and never both at
once. Unpinned, the loop took 7.8-8.1 ms on most samples and 12.2-15.4 ms on 6 of 40, in
spells of one to four samples. While one CPU is slowed, a 2-thread run goes at about
its 1-thread speed in either runtime (MobileNetV2: 3.6-4.0 ms in most processes, 6.4-6.8
ms in some, onnxruntime's and Ember's alike), which is the process-to-process spread
that ``ember bench`` reports as a model's ratio range.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ember.perf.host import allowed_cpus, probe_cpus

LOOP = 300_000  # about 8 ms a CPU: long enough to see a spell, short beside one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to watch")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    ap.add_argument("--slow", type=float, default=1.3, help="a slow sample's factor")
    args = ap.parse_args()
    cpus = allowed_cpus()
    rows: list[list[float]] = []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        rows.append(probe_cpus(cpus, LOOP))
        time.sleep(args.interval)
    best = [min(r[k] for r in rows) for k in range(len(cpus))]
    print(f"{len(rows)} samples, CPUs {cpus}; each figure: time / that CPU's fastest")
    for r in rows:
        print("  " + "  ".join(f"{t / b:4.2f}" for t, b in zip(r, best)))
    for k, cpu in enumerate(cpus):
        times = [r[k] for r in rows]
        slow = sum(t >= args.slow * best[k] for t in times)
        print(
            f"CPU {cpu}: fastest {best[k] * 1e3:.1f} ms, median "
            f"{statistics.median(times) * 1e3:.1f} ms, {slow} of {len(rows)} samples "
            f">= {args.slow}x"
        )
    both = sum(all(t >= args.slow * b for t, b in zip(r, best)) for r in rows)
    print(f"every CPU slow at once: {both} of {len(rows)} samples")


if __name__ == "__main__":
    main()
