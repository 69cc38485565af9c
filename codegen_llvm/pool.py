"""Ember's own thread pool for parallel loops: one per process, JIT-compiled from LLVM IR.

Why not libgomp's team: ``GOMP_parallel`` returns only after every thread of the team
has run the region, so one thread the OS does not schedule (another process holds its
core) stalls the caller for a scheduler time slice, and libgomp's idle threads spin
without yielding, taking the core from the very thread they wait for. On a two-core
machine with one busy process beside it a small CNN took 10-30 ms a run instead of 0.08.

:func:`launcher_address` gives the address of ``ember_pool_run(worker, closure, n)``, which
compiled modules call through their ``__ember_parallel_launch`` global (the runtime sets
it, :mod:`ember.runtime.threads`; a module used without Ember's runtime, where it stays
null, calls libgomp as before). The call:

* runs ``worker(closure)`` on the calling thread and offers the same call to up to
  ``n - 1`` pool threads (started on first use, parked when idle);
* *closes* the job once the caller's own call returns — the worker takes chunks of the
  loop from a shared counter, so by then no chunk is left — and waits only for the pool
  threads that had already joined (each is finishing its last chunk). A thread that
  wakes late finds the job closed and does not touch the closure: the caller never waits
  for a thread that has not started;
* an idle pool thread spins a while, calling ``sched_yield`` every few rounds so that a
  thread waiting for its core gets it, then sleeps on a futex; the caller waits for
  joined threads the same way;
* a second caller while the pool is busy (another Python thread, a pool thread) runs the
  worker alone, and a process forked from one with threads starts new ones. The pool
  knows its process by a pid written into its IR at build and stored again in a child
  after ``os.fork`` (:func:`_store_pid`), not by ``getpid``, a system call that cost
  every region 0.35 us of its 0.7 us on a two-core KVM guest (an empty loop on two threads
  1.19 -> 0.83 us a call). A child forked from C code without exec keeps its parent's pid
  here and runs its parallel loops on the calling thread alone (the parent's threads
  never join);
* after a *stall* the caller runs jobs alone for ``BACKOFF`` (10 ms): a stall is a wait for
  threads still inside the job that lasts longer than the caller's own call (and over
  ``STALL``, 50 us), so one of them was preempted holding a part while another process has
  its core. On a two-core machine shared with a busy process, such waits took a small
  CNN's runs from 0.29 ms (one thread's time) to a median 0.42-0.57 ms; a thread on a free
  core never waits that long, so a quiet machine keeps its threads.

Linux only (futex, ``pthread_create``); elsewhere :func:`launcher_address` returns 0 and
modules use libgomp. ``EMBER_THREAD_POOL=gomp`` selects libgomp everywhere;
``EMBER_POOL_SPIN`` and ``EMBER_POOL_JOIN_SPIN`` (rounds, read when this module loads)
change how long idle threads and a waiting caller spin before they sleep: 0 on a machine
shared with busier work, more where kernels are called with long gaps between them.
``EMBER_POOL_BACKOFF_US`` sets the time alone after a stall (0: never alone).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
from typing import Any

from ember.codegen_llvm import jit
from ember.runtime import threads
from ember.target import Target

FUTEX = {"x86_64": 202, "aarch64": 98}  # the futex syscall's number
PAUSE = {"x86_64": "pause", "aarch64": "yield"}  # a spin loop's CPU hint


def _rounds(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return min(int(value), 1 << 30) if value.isdigit() else default


# An idle thread's spin before it sleeps (about 100-300 us by default; 0: sleep at once),
# and the caller's spin waiting for threads still on their last chunk.
SPIN_ROUNDS = _rounds("EMBER_POOL_SPIN", 4096)
JOIN_SPIN_ROUNDS = _rounds("EMBER_POOL_JOIN_SPIN", 4096)
YIELD_EVERY = 16  # rounds between sched_yield calls while spinning
# A wait for threads still inside a job, longer than the caller's own call and than
# STALL_NS, is a stall; the caller then runs jobs alone for BACKOFF_NS.
STALL_NS = 50_000
BACKOFF_NS = _rounds("EMBER_POOL_BACKOFF_US", 10_000) * 1000
MAX_THREADS = 256

_IR = """
@gen = internal global i32 0
@entry = internal global i32 0
@wanted = internal global i32 0
@job_fn = internal global ptr null
@job_arg = internal global ptr null
@busy = internal global i32 0
@created = internal global i32 0
@sleepers = internal global i32 0
@waiting = internal global i32 0
@owner = internal global i32 0
@ember_pool_calm_until = global i64 0
@ember_pool_backoff_ns = global i64 {backoff_ns}
@ember_pool_pid = global i32 {pid}

declare i64 @syscall(i64, ...)
declare i32 @sched_yield()
declare i32 @clock_gettime(i32, ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @sigfillset(ptr)
declare i32 @pthread_sigmask(i32, ptr, ptr)

define internal i64 @now_ns() {
entry:
  %ts = alloca { i64, i64 }, align 8
  %0 = call i32 @clock_gettime(i32 1, ptr %ts)
  %s = load i64, ptr %ts, align 8
  %nsp = getelementptr inbounds { i64, i64 }, ptr %ts, i32 0, i32 1
  %ns = load i64, ptr %nsp, align 8
  %sns = mul i64 %s, 1000000000
  %t = add i64 %sns, %ns
  ret i64 %t
}

define internal void @relax(i32 %i) {
entry:
  %r = urem i32 %i, {yield_every}
  %y = icmp eq i32 %r, {yield_last}
  br i1 %y, label %yield, label %pause
yield:
  %0 = call i32 @sched_yield()
  ret void
pause:
  call void asm sideeffect "{pause}", ""()
  ret void
}

define internal void @futex(ptr %addr, i64 %op, i32 %val) {
entry:
  %v = zext i32 %val to i64
  %0 = call i64 (i64, ...) @syscall(i64 {futex}, ptr %addr, i64 %op, i64 %v, ptr null)
  ret void
}

; wait until *%addr != %val: spin (yielding now and then), then sleep on a futex
define internal i32 @wait_change(ptr %addr, i32 %val, ptr %count) {
entry:
  br label %spin
spin:
  %i = phi i32 [ 0, %entry ], [ %i1, %again ]
  %v = load atomic i32, ptr %addr seq_cst, align 4
  %changed = icmp ne i32 %v, %val
  br i1 %changed, label %done, label %again
again:
  call void @relax(i32 %i)
  %i1 = add i32 %i, 1
  %more = icmp ult i32 %i1, {spin}
  br i1 %more, label %spin, label %sleep
sleep:
  %0 = atomicrmw add ptr %count, i32 1 seq_cst
  br label %check
check:
  %w = load atomic i32, ptr %addr seq_cst, align 4
  %same = icmp eq i32 %w, %val
  br i1 %same, label %block, label %woke
block:
  call void @futex(ptr %addr, i64 128, i32 %val)
  br label %check
woke:
  %1 = atomicrmw sub ptr %count, i32 1 seq_cst
  br label %done
done:
  %r = phi i32 [ %v, %spin ], [ %w, %woke ]
  ret i32 %r
}

define internal ptr @pool_thread(ptr %start) {
entry:
  ; no signal is delivered to a pool thread: the process's handlers (Python's SIGINT,
  ; which only sets a flag the main thread reads) must run where they are expected
  %mask = alloca [128 x i8], align 8
  %filled = call i32 @sigfillset(ptr %mask)
  %masked = call i32 @pthread_sigmask(i32 0, ptr %mask, ptr null)
  %g0 = ptrtoint ptr %start to i32
  br label %idle
idle:
  %seen = phi i32 [ %g0, %entry ], [ %g, %try ], [ %g, %full ], [ %g, %ran ]
  %g = call i32 @wait_change(ptr @gen, i32 %seen, ptr @sleepers)
  %e = load atomic i32, ptr @entry seq_cst, align 4
  br label %try
try:
  %v = phi i32 [ %e, %idle ], [ %cur, %retry ]
  %open = and i32 %v, 1073741824
  %isopen = icmp ne i32 %open, 0
  br i1 %isopen, label %room, label %idle
room:
  %n = and i32 %v, 1073741823
  %want = load atomic i32, ptr @wanted seq_cst, align 4
  %has = icmp ult i32 %n, %want
  br i1 %has, label %join, label %full
full:
  br label %idle
join:
  %v1 = add i32 %v, 1
  %x = cmpxchg ptr @entry, i32 %v, i32 %v1 seq_cst seq_cst
  %cur = extractvalue { i32, i1 } %x, 0
  %ok = extractvalue { i32, i1 } %x, 1
  br i1 %ok, label %run, label %retry
retry:
  br label %try
run:
  %fn = load atomic ptr, ptr @job_fn seq_cst, align 8
  %arg = load atomic ptr, ptr @job_arg seq_cst, align 8
  call void %fn(ptr %arg)
  %old = atomicrmw sub ptr @entry, i32 1 seq_cst
  %last = icmp eq i32 %old, 1
  br i1 %last, label %tell, label %ran
tell:
  %wt = load atomic i32, ptr @waiting seq_cst, align 4
  %sleeping = icmp ne i32 %wt, 0
  br i1 %sleeping, label %wake, label %ran
wake:
  call void @futex(ptr @entry, i64 129, i32 1)
  br label %ran
ran:
  br label %idle
}

define void @ember_pool_run(ptr %fn, ptr %arg, i32 %n) {
entry:
  %many = icmp sgt i32 %n, 1
  br i1 %many, label %calm, label %alone
calm:
  ; after a stall (see %judge) the caller works alone for a while
  %tnow = call i64 @now_ns()
  %until = load atomic i64, ptr @ember_pool_calm_until monotonic, align 8
  %stalled = icmp slt i64 %tnow, %until
  br i1 %stalled, label %alone, label %owned
alone:
  call void %fn(ptr %arg)
  ret void
owned:
  %pid = load atomic i32, ptr @ember_pool_pid monotonic, align 4
  %owner = load atomic i32, ptr @owner seq_cst, align 4
  %mine = icmp eq i32 %pid, %owner
  br i1 %mine, label %lock, label %claim
claim:
  ; first use, or a child forked from a process with threads (it has none of them): one
  ; caller claims the pool (-1) and resets it; a caller meanwhile runs alone
  %claiming = icmp eq i32 %owner, -1
  br i1 %claiming, label %alone, label %tryclaim
tryclaim:
  %c = cmpxchg ptr @owner, i32 %owner, i32 -1 seq_cst seq_cst
  %claimed = extractvalue { i32, i1 } %c, 1
  br i1 %claimed, label %reset, label %alone
reset:
  store atomic i32 0, ptr @created seq_cst, align 4
  store atomic i32 0, ptr @busy seq_cst, align 4
  store atomic i32 0, ptr @entry seq_cst, align 4
  store atomic i32 0, ptr @sleepers seq_cst, align 4
  store atomic i32 0, ptr @waiting seq_cst, align 4
  store atomic i32 %pid, ptr @owner seq_cst, align 4
  br label %lock
lock:
  %x = cmpxchg ptr @busy, i32 0, i32 1 seq_cst seq_cst
  %got = extractvalue { i32, i1 } %x, 1
  br i1 %got, label %start, label %alone
start:
  %n1 = sub i32 %n, 1
  %capped = call i32 @llvm.umin.i32(i32 %n1, i32 {max_threads})
  %gnow = load atomic i32, ptr @gen seq_cst, align 4
  %gptr = inttoptr i32 %gnow to ptr
  %tid = alloca i64, align 8
  br label %grow
grow:
  %have = load atomic i32, ptr @created seq_cst, align 4
  %enough = icmp uge i32 %have, %capped
  br i1 %enough, label %publish, label %spawn
spawn:
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @pool_thread, ptr %gptr)
  %failed = icmp ne i32 %rc, 0
  br i1 %failed, label %publish, label %spawned
spawned:
  %t = load i64, ptr %tid, align 8
  %1 = call i32 @pthread_detach(i64 %t)
  %have1 = add i32 %have, 1
  store atomic i32 %have1, ptr @created seq_cst, align 4
  br label %grow
publish:
  %helpers = load atomic i32, ptr @created seq_cst, align 4
  %want = call i32 @llvm.umin.i32(i32 %helpers, i32 %capped)
  store atomic ptr %fn, ptr @job_fn seq_cst, align 8
  store atomic ptr %arg, ptr @job_arg seq_cst, align 8
  store atomic i32 %want, ptr @wanted seq_cst, align 4
  store atomic i32 1073741824, ptr @entry seq_cst, align 4
  %2 = atomicrmw add ptr @gen, i32 1 seq_cst
  %s = load atomic i32, ptr @sleepers seq_cst, align 4
  %anyasleep = icmp ne i32 %s, 0
  br i1 %anyasleep, label %wakeall, label %work
wakeall:
  call void @futex(ptr @gen, i64 129, i32 %want)
  br label %work
work:
  call void %fn(ptr %arg)
  %old = atomicrmw and ptr @entry, i32 1073741823 seq_cst
  %busyhelpers = and i32 %old, 1073741823
  %none = icmp eq i32 %busyhelpers, 0
  br i1 %none, label %unlock, label %join
join:
  %closed = call i64 @now_ns()
  br label %jspin
jspin:
  %i = phi i32 [ 0, %join ], [ %i1, %jagain ]
  %e = load atomic i32, ptr @entry seq_cst, align 4
  %zero = icmp eq i32 %e, 0
  br i1 %zero, label %judge, label %jagain
jagain:
  call void @relax(i32 %i)
  %i1 = add i32 %i, 1
  %jmore = icmp ult i32 %i1, {join_spin}
  br i1 %jmore, label %jspin, label %jsleep
jsleep:
  store atomic i32 1, ptr @waiting seq_cst, align 4
  br label %jcheck
jcheck:
  %e2 = load atomic i32, ptr @entry seq_cst, align 4
  %zero2 = icmp eq i32 %e2, 0
  br i1 %zero2, label %jdone, label %jblock
jblock:
  call void @futex(ptr @entry, i64 128, i32 %e2)
  br label %jcheck
jdone:
  store atomic i32 0, ptr @waiting seq_cst, align 4
  br label %judge
judge:
  ; a stall: the threads still inside took longer after the caller was done than the
  ; caller's whole call (and over {stall_ns} ns), so one was preempted holding a part;
  ; its core is taken, and for @ember_pool_backoff_ns the caller runs jobs alone
  %tdone = call i64 @now_ns()
  %waited = sub i64 %tdone, %closed
  %worked = sub i64 %closed, %tnow
  %long = icmp sgt i64 %waited, %worked
  %over = icmp sgt i64 %waited, {stall_ns}
  %stall = and i1 %long, %over
  %bo = load atomic i64, ptr @ember_pool_backoff_ns monotonic, align 8
  %backoff = icmp sgt i64 %bo, 0
  %calmdown = and i1 %stall, %backoff
  br i1 %calmdown, label %quiet, label %unlock
quiet:
  %later = add i64 %tdone, %bo
  store atomic i64 %later, ptr @ember_pool_calm_until monotonic, align 8
  br label %unlock
unlock:
  store atomic i32 0, ptr @busy seq_cst, align 4
  ret void
}

declare i32 @llvm.umin.i32(i32, i32)
"""


def pool_ir(machine: str) -> str:
    """The pool's LLVM IR for a CPU architecture (``platform.machine()`` spelling)."""
    values = {
        "futex": FUTEX[machine],
        "pause": PAUSE[machine],
        "spin": SPIN_ROUNDS,
        "join_spin": JOIN_SPIN_ROUNDS,
        "yield_every": YIELD_EVERY,
        "yield_last": YIELD_EVERY - 1,
        "max_threads": MAX_THREADS,
        "stall_ns": STALL_NS,
        "backoff_ns": BACKOFF_NS,
        "pid": os.getpid(),
    }
    ir = _IR
    for name, value in values.items():
        ir = ir.replace(f"{{{name}}}", str(value))  # the IR's own braces stay as they are
    return ir


_lock = threading.Lock()
_built: list[tuple[Any, int]] = []  # (engine, address): the engine owns the pool's code


def launcher_address() -> int:
    """Address of ``ember_pool_run``, compiled once, on first use (by whichever thread gets
    there first); 0 where the pool is unsupported."""
    machine = platform.machine()
    if not sys.platform.startswith("linux") or machine not in FUTEX:
        return 0
    with _lock:  # two pools would mean two sets of threads, and a freed one would crash
        if not _built:
            spec = jit.MachineSpec.from_target(Target.parse("llvm"))
            _, engine, _ = jit.compile_ir(pool_ir(machine), spec)
            _built.append((engine, int(engine.get_function_address("ember_pool_run"))))
        return _built[0][1]


def _store_pid() -> None:
    """Tell a built pool its process anew, in a child after ``os.fork`` (module notes)."""
    if _built:
        address = _built[0][0].get_global_value_address("ember_pool_pid")
        ctypes.c_int32.from_address(address).value = os.getpid()


def set_backoff(seconds: float) -> None:
    """How long a caller runs jobs alone after a stall (0: never; the default is
    ``EMBER_POOL_BACKOFF_US`` or 10 ms); also ends a backoff in progress. A no-op where
    the pool is unsupported."""
    if not launcher_address():
        return
    engine = _built[0][0]
    values = {"ember_pool_backoff_ns": int(seconds * 1e9), "ember_pool_calm_until": 0}
    for name, value in values.items():
        ctypes.c_int64.from_address(engine.get_global_value_address(name)).value = value


threads.register_pool(launcher_address)
os.register_at_fork(after_in_child=_store_pid)
