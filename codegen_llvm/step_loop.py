"""The native step loop: one function that calls a table of bound kernels in order.

:mod:`ember.runtime.step_loop` describes the tables and the contract; this module
writes the function in LLVM IR and JIT-compiles it, once per process (the CPU backend
hands it to the executor: :meth:`ember.codegen_llvm.backend.CPUBackend.step_loop`).
For each entry the loop stores the thread count of the entry's class into its module's
cell (only when it differs, so runs on several threads do not fight over the cache
line), then switches on the argument count to a call of ``i32 fn(i64, ..., i64)`` with
that many arguments loaded from the entry's array, and returns at the first nonzero
status. Kernels take at most :data:`MAX_ARGS` arguments here; a step with more stays
on the Python path. The IR is written as text: an indirect call through an opaque
pointer is one line there.

Where the job has a stamps array (a profile), the loop reads the monotonic clock
(``clock_gettime``, the clock ``time.perf_counter`` reads on Linux) before the first
call and after each one, so a kernel's time is taken between two kernels of a real run,
with the pool's threads as the run leaves them, and not around a Python call.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
import time

from ember.codegen_llvm import jit
from ember.runtime.step_loop import BAD_ARITY, LOOP_PROTOTYPE, StepLoop
from ember.target import Target

MAX_ARGS = 48
SYMBOL = "ember_run_steps"
_LOCK = threading.Lock()

# The clock: nanoseconds of ``clock_gettime(clock)`` (a 64-bit ``struct timespec``).
_CLOCK = """\
declare i32 @clock_gettime(i32, ptr)

define internal i64 @ember_now() nounwind {{
  %ts = alloca [2 x i64], align 8
  %rc = call i32 @clock_gettime(i32 {clock}, ptr %ts)
  %s = load i64, ptr %ts
  %ns.p = getelementptr inbounds i64, ptr %ts, i64 1
  %ns = load i64, ptr %ns.p
  %s.ns = mul i64 %s, 1000000000
  %t = add i64 %s.ns, %ns
  ret i64 %t
}}

"""

# Without a clock the stamps pointer is never read.
_NO_CLOCK = """\
define internal i64 @ember_now() nounwind {
  ret i64 0
}

"""

_HEAD = """\
%Entry = type {{ ptr, i64, ptr, ptr, i64 }}
%Job = type {{ ptr, i64, ptr, i64, ptr }}

define i64 @{symbol}(ptr %job) nounwind {{
entry:
  %table = load ptr, ptr %job
  %count.p = getelementptr inbounds %Job, ptr %job, i64 0, i32 1
  %count = load i64, ptr %count.p
  %threads.p = getelementptr inbounds %Job, ptr %job, i64 0, i32 2
  %threads = load ptr, ptr %threads.p
  %status.p = getelementptr inbounds %Job, ptr %job, i64 0, i32 3
  %stamps.p = getelementptr inbounds %Job, ptr %job, i64 0, i32 4
  %stamps = load ptr, ptr %stamps.p
  %timed = icmp ne ptr %stamps, null
  br i1 %timed, label %start, label %head
start:
  %t0 = call i64 @ember_now()
  store i64 %t0, ptr %stamps
  br label %head
head:
  %k = phi i64 [ 0, %entry ], [ 0, %start ], [ %k.next, %next ]
  %more = icmp slt i64 %k, %count
  br i1 %more, label %body, label %done
body:
  %fn.p = getelementptr inbounds %Entry, ptr %table, i64 %k, i32 0
  %fn = load ptr, ptr %fn.p
  %nargs.p = getelementptr inbounds %Entry, ptr %table, i64 %k, i32 1
  %nargs = load i64, ptr %nargs.p
  %args.p = getelementptr inbounds %Entry, ptr %table, i64 %k, i32 2
  %args = load ptr, ptr %args.p
  %cell.p = getelementptr inbounds %Entry, ptr %table, i64 %k, i32 3
  %cell = load ptr, ptr %cell.p
  %has.cell = icmp ne ptr %cell, null
  br i1 %has.cell, label %publish, label %dispatch
publish:
  %cls.p = getelementptr inbounds %Entry, ptr %table, i64 %k, i32 4
  %cls = load i64, ptr %cls.p
  %want.p = getelementptr inbounds i32, ptr %threads, i64 %cls
  %want = load i32, ptr %want.p
  %have = load i32, ptr %cell
  %differs = icmp ne i32 %want, %have
  br i1 %differs, label %store, label %dispatch
store:
  store i32 %want, ptr %cell
  br label %dispatch
dispatch:
  switch i64 %nargs, label %bad [ {cases} ]
"""

_TAIL = """\
joined:
  %rc = phi i32 {incoming}
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %stamp, label %failed
stamp:
  %k.next = add i64 %k, 1
  br i1 %timed, label %clock, label %next
clock:
  %t = call i64 @ember_now()
  %t.p = getelementptr inbounds i64, ptr %stamps, i64 %k.next
  store i64 %t, ptr %t.p
  br label %next
next:
  br label %head
failed:
  %rc.wide = sext i32 %rc to i64
  store i64 %rc.wide, ptr %status.p
  ret i64 %k
bad:
  store i64 {bad_arity}, ptr %status.p
  ret i64 %k
done:
  ret i64 %count
}}
"""


def _call_block(n: int) -> str:
    """The case of ``n`` arguments: load them, call, go to the join."""
    lines = [f"call{n}:"]
    for i in range(n):
        lines.append(f"  %a{n}.{i}.p = getelementptr inbounds i64, ptr %args, i64 {i}")
        lines.append(f"  %a{n}.{i} = load i64, ptr %a{n}.{i}.p")
    values = ", ".join(f"i64 %a{n}.{i}" for i in range(n))
    lines.append(f"  %rc{n} = call i32 %fn({values})")
    lines.append("  br label %joined")
    return "\n".join(lines) + "\n"


def step_loop_ir(max_args: int = MAX_ARGS, clock: int | None = None) -> str:
    """The loop's LLVM IR: ``i64 ember_run_steps(ptr job)`` (see the module notes);
    ``clock`` is the ``clock_gettime`` clock id its stamps read (None: no stamps)."""
    arities = range(max_args + 1)
    cases = " ".join(f"i64 {n}, label %call{n}" for n in arities)
    incoming = ", ".join(f"[ %rc{n}, %call{n} ]" for n in arities)
    return (
        (_NO_CLOCK if clock is None else _CLOCK.format(clock=clock))
        + _HEAD.format(symbol=SYMBOL, cases=cases)
        + "".join(_call_block(n) for n in arities)
        + _TAIL.format(incoming=incoming, bad_arity=BAD_ARITY)
    )


@functools.cache
def _compiled(target: str) -> StepLoop:
    spec = jit.MachineSpec.from_target(Target.parse(target))
    # perf_counter's clock where the platform names it (CLOCK_MONOTONIC on Linux)
    clock = getattr(time, "CLOCK_MONOTONIC", None) if sys.platform == "linux" else None
    _, engine, _ = jit.compile_ir(step_loop_ir(clock=clock), spec)
    address = engine.get_function_address(SYMBOL)
    return StepLoop(LOOP_PROTOTYPE(address), MAX_ARGS, engine, stamps=clock is not None)


def compiled_step_loop(target: Target) -> StepLoop | None:
    """The loop for code of ``target``, JIT-compiled on first use (tens of ms) and kept for
    the process; None where a pointer is not a 64-bit argument (the loop's calling
    convention) or the target is not this machine's."""
    if ctypes.sizeof(ctypes.c_void_p) != 8 or target.get("mtriple"):
        return None
    with _LOCK:  # one LLVM compile at a time from here
        # this host; -O1 compiles in a third of -O3's time and leaves nothing to gain here
        return _compiled(str(Target.parse("llvm -opt-level=1")))
