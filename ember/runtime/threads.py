"""The number of threads parallel CPU loops run on, and the pool they run on.

Compiled CPU modules read :func:`effective_num_threads` before each call and hand it to
the pool. The value is, in order: what :func:`set_num_threads` set, the
``EMBER_NUM_THREADS`` environment variable, or :func:`available_cpus`: the CPUs this
process may run on (``os.sched_getaffinity``, so ``taskset`` and container cpusets
count), no more than its cgroup's CPU quota allows (``cpu.max``; a container given 1.5
CPUs on a 64-core host gets 2 threads, not 64). A module built for a target with
``-num-threads=N`` uses ``N``.

The pool is Ember's own (:mod:`ember.codegen_llvm.pool`, registered here by
:func:`register_pool` and handed to modules by :func:`parallel_launcher`): the calling
thread works, threads that have not started are not waited for, idle threads yield
while they spin and then sleep. ``EMBER_THREAD_POOL=gomp`` (read once, at the first
parallel call) runs parallel loops on libgomp's team instead, as a module used from C
without Ember's runtime does.

libgomp's thread pool does not survive ``fork()``: a child forked after the
parent ran a parallel loop on several threads hangs in its first parallel
loop. So in such a child parallel loops run on one thread (use the ``spawn``
or ``forkserver`` start method of multiprocessing to get threads there).

For libgomp: its threads spin after a parallel loop, waiting for the next one, for
300,000 rounds by default (milliseconds), and a spinning thread takes the core a working
thread needs. Before Ember first loads libgomp, :func:`prepare_openmp` sets the spin to
``OPENMP_SPINCOUNT`` rounds (200-500 us on a two-core KVM guest); a user's
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` wins (``OMP_WAIT_POLICY=passive`` on a shared
machine). It cannot change a libgomp another library loaded first. A tuner's measuring
worker calls :func:`keep_openmp_spin` first and times with libgomp's own spin.

Why Ember has its own pool: ``GOMP_parallel`` returns only when every thread of its team
has run the region, and idle libgomp threads spin without yielding. With one busy
process beside Ember on a two-core machine (and other users' load), a small CNN took
7-30 ms a run on libgomp instead of 0.04 ms, MobileNetV2 at 96x96 21-82 ms
(``benchmarks/bench_contention.py``); on the pool both stay within noise of their quiet
times.
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
