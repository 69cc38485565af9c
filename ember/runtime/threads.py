"""The number of threads parallel CPU loops run on.

Compiled CPU modules read :func:`effective_num_threads` before each call and
hand it to libgomp. The value is, in order: what :func:`set_num_threads` set,
the ``EMBER_NUM_THREADS`` environment variable, or :func:`available_cpus`: the CPUs
this process may run on (``os.sched_getaffinity``, so ``taskset`` and container
cpusets count), no more than its cgroup's CPU quota allows (``cpu.max``; a container
given 1.5 CPUs on a 64-core host gets 2 threads, not 64). A module built for a target
with ``-num-threads=N`` uses ``N``.

libgomp's thread pool does not survive ``fork()``: a child forked after the
parent ran a parallel loop on several threads hangs in its first parallel
loop. So in such a child parallel loops run on one thread (use the ``spawn``
or ``forkserver`` start method of multiprocessing to get threads there).

libgomp's threads spin after a parallel loop, waiting for the next one, for
300,000 rounds by default (milliseconds). On a machine busier than its cores, a
spinning thread takes the core a working thread needs: ResNet-18 at two threads ran
6 to 20 times slower than at one on a loaded two-core machine. Too short a spin
costs as much the other way: a thread that went to sleep takes 60-80 us to wake on
this two-core KVM guest. With 2,000 rounds the spin ended within 20 us, so a
parallel loop called 20-200 us after the last one took 85 us instead of 17, and
small models ran 2-4x slower at two threads than at one. Before Ember first loads
libgomp, :func:`prepare_openmp` sets the spin to ``OPENMP_SPINCOUNT`` rounds,
which spin here for 200-500 us: past the gaps between an executor's kernels, well
short of libgomp's own. It trades as onnxruntime's spinning pool does: with another
process busy on one of the two cores, ResNet-18 at two threads took 47 ms against
35 ms with 2,000 rounds (onnxruntime 28 ms), the small CNN 3.5 ms against 0.8. On a
shared machine set ``GOMP_SPINCOUNT=2000`` or ``OMP_WAIT_POLICY=passive``: a user's
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` wins. It cannot change a libgomp another
library loaded first.

A tuner's measuring worker times one kernel at a time, and a thread that sleeps
between its runs pays a wake-up that, on a busy machine, waits for the scheduler
(a 96^3 matmul measured 7 us or 350 us from run to run); so workers call
:func:`keep_openmp_spin` first and time with libgomp's own spin.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from pathlib import Path

from ember import config
from ember.errors import ArgumentError

OPENMP_SPINCOUNT = 20_000
_OURS = "EMBER_SET_GOMP_SPINCOUNT"  # marks a GOMP_SPINCOUNT Ember set, not the user
_keep_spin = False
_explicit: int | None = None
_pool_started = False  # this process ran a parallel loop on more than one thread
_forked_after_pool = False  # we are a child forked after that: the pool is unusable
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max ..."


def _cgroup_cpu_limit(path: Path) -> int | None:
    """CPUs a cgroup v2 quota allows (rounded up), or None without a quota."""
    try:
        quota, period = path.read_text().split()[:2]
        limit = int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None  # no cgroup v2 file, "max" (no quota), or something unreadable
    return max(1, math.ceil(limit)) if limit > 0 else None


def available_cpus(cpu_max: Path | None = None) -> int:
    """CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota
    (read from ``cpu_max``, default :data:`CGROUP_CPU_MAX`)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no sched_getaffinity on this platform
        n = os.cpu_count() or 1
    limit = _cgroup_cpu_limit(cpu_max or CGROUP_CPU_MAX)
    return max(1, min(n, limit) if limit else n)


@functools.cache
def _default_threads() -> int:
    return available_cpus()  # read once: a syscall and a file read are too slow per call


def set_num_threads(n: int | None) -> None:
    """Run parallel loops on ``n`` threads from now on (``None``: back to the default)."""
    global _explicit
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ArgumentError(f"set_num_threads expects a positive integer or None, got {n!r}")
    _explicit = n


def get_num_threads() -> int:
    """Threads parallel loops use now."""
    if _forked_after_pool:
        return 1
    if _explicit is not None:
        return _explicit
    return config.num_threads() or _default_threads()


def effective_num_threads(fixed: int | None = None) -> int:
    """The count for a module call: ``fixed`` (from the target) wins, except after a fork."""
    if _forked_after_pool:
        return 1
    return fixed or get_num_threads()


_pool_factory: Callable[[], int] | None = None
_launcher: int | None = None


def register_pool(address: Callable[[], int]) -> None:
    """Name the function that gives the address of Ember's thread pool (the CPU backend's
    ``ember_pool_run``; 0 where it has none); called once, when that backend loads."""
    global _pool_factory, _launcher
    _pool_factory, _launcher = address, None


def parallel_launcher() -> int:
    """Address compiled modules launch parallel loops through (0: libgomp).

    ``EMBER_THREAD_POOL=gomp`` chooses libgomp; by default Ember's own pool, built on first
    use, where the CPU backend has loaded.
    """
    global _launcher
    if _launcher is None:
        if _pool_factory is None:
            return 0  # not built yet: ask again next call
        use_gomp = os.environ.get("EMBER_THREAD_POOL", "").strip().lower() == "gomp"
        _launcher = 0 if use_gomp else _pool_factory()
    return _launcher


def note_parallel_launch(n: int) -> None:
    """Record that parallel code is about to run on ``n`` threads (see the fork note above)."""
    global _pool_started
    if n > 1:
        _pool_started = True


def prepare_openmp() -> None:
    """Set libgomp's spin count for Ember (see the module notes); call before loading it."""
    if _keep_spin:
        return
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = str(OPENMP_SPINCOUNT)
        os.environ[_OURS] = "1"  # inherited by child processes, which may undo it


def keep_openmp_spin() -> None:
    """Leave libgomp's own spin in this process (undoing a spin count Ember set in a
    parent); for processes that time kernels. Call before libgomp is loaded."""
    global _keep_spin
    _keep_spin = True
    if os.environ.pop(_OURS, None) is not None:
        os.environ.pop("GOMP_SPINCOUNT", None)


def _after_fork_in_child() -> None:
    global _forked_after_pool
    if _pool_started:
        _forked_after_pool = True


os.register_at_fork(after_in_child=_after_fork_in_child)
