"""Parallel loops: outline the body and run it on Ember's thread pool (or libgomp's team).

Used by :mod:`ember.codegen_llvm.codegen` for the outermost ``For`` of kind
``PARALLEL`` (parallel loops nested inside it run serially). The loop becomes
three pieces:

* a *body* function ``i32 f.parK.body(ptr noalias A, ..., scalars, begin, end)``
  running iterations ``[begin, end)``; its buffer arguments are ``noalias``
  like the kernel's own, which LLVM keeps as alias scopes if it inlines it;
* a *worker* ``void f.parK(ptr closure)`` that each thread runs: it reads the
  captured values from the closure and takes parts of the range from a shared counter in
  the closure (an ``atomicrmw add``) until none is left, calling the body on each. A
  thread the OS preempts holds up the others by one part at most: its siblings take over
  the rest, where a static share per thread made the whole team wait for the slowest.
  Parts are taken from both ends (:func:`_take_part`): a thread on an even-numbered CPU
  takes them from the front, one on an odd CPU from the back. On two cores each core then
  runs about the same half of every loop, so a kernel finds most of what the kernel
  before it wrote in its own core's cache; with a counter that both threads took from in
  turn, which thread ran which part changed from call to call, and half of every
  kernel's input crossed between the cores (MobileNetV2's depthwise convolutions at
  7x7-14x14 ran 0.8-1.2x faster on two threads than on one; with the two ends,
  1.2-1.8x);
  :func:`ember.codegen_llvm.parallel_work.partition` sizes them: up to
  ``CHUNKS_PER_THREAD`` parts a thread, each at least ``MIN_CHUNK_WORK`` operations,
  their number a multiple of the team and their sizes within one iteration of each
  other, so two threads get the same work;
* at the loop's place, a closure struct ``{status*, min, extent, counter, parts,
  captured...}`` on the stack and a call ``launch(worker, &closure, team)`` through the
  module global ``__ember_parallel_launch``, which the runtime points at Ember's pool
  (:mod:`ember.codegen_llvm.pool`); where it is null (a library called from C without
  Ember's runtime, or ``EMBER_THREAD_POOL=gomp``) the call is
  ``GOMP_parallel(worker, &closure, team, 0)``. ``team`` is the module global
  ``__ember_num_threads`` the runtime sets (0: libgomp's default), less where the loop
  has too few iterations to give every thread a part. A failing assert in any thread
  stores its code into the shared status (and stops the others taking parts), which the
  caller returns after the threads are done. The calling thread works too.

No region is opened, and the caller runs the body over the whole range itself, when the
runtime asks for one thread, when the partition leaves one thread, or when the loop's
work (extent times the operations of one iteration) is below ``MIN_PARALLEL_WORK``. Where
the extent is a constant and that holds for any thread count, the loop is not outlined at
all (:func:`runs_serially`): the code generator emits it as a serial loop, and a parallel
loop nested in it may take the threads instead.
"""

from __future__ import annotations

import sys

from llvmlite import ir

from ember.codegen_llvm import parallel_work
from ember.codegen_llvm.builder_utils import (
    I32,
    I64,
    PTR,
    VOID,
    declare,
    declare_intrinsic,
    entry_alloca,
    for_range,
    reg_type,
)
from ember.codegen_llvm.casts import emit_cast
from ember.codegen_llvm.emitter import NUM_THREADS_GLOBAL, Emitter, FunctionState
from ember.codegen_llvm.loop_hints import loop_hints
from ember.errors import InternalError
from ember.runtime.cpu import LAUNCH_SYMBOL
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import OnceVisitor


class _Captures(OnceVisitor):
    """Variables a statement reads from outside itself, in first-use order. ``bound`` only
    grows, so a node met again can add nothing: each distinct node is walked once."""

    def __init__(self, bound: set[E.Var]) -> None:
        super().__init__()
        self.bound = set(bound)
        self.found: dict[E.Var, None] = {}

    def use(self, v: E.Var) -> None:
        if v not in self.bound:
            self.found.setdefault(v, None)

    def visit_Var(self, v: E.Var) -> None:
        self.use(v)

    def visit_BufferLoad(self, e: E.BufferLoad) -> None:
        self.use(e.buffer.data)
        self.generic_visit(e)

    def visit_BufferStore(self, s: S.BufferStore) -> None:
        self.use(s.buffer.data)
        self.generic_visit(s)

    def _binder(self, var: E.Var, value: E.PrimExpr, body: object) -> None:
        self.visit(value)
        self.bound.add(var)
        self.visit(body)

    def visit_Let(self, e: E.Let) -> None:
        self._binder(e.var, e.value, e.body)

    def visit_LetStmt(self, s: S.LetStmt) -> None:
        self._binder(s.var, s.value, s.body)

    def visit_For(self, s: S.For) -> None:
        self.visit(s.min)
        self.visit(s.extent)
        self.bound.add(s.loop_var)
        self.visit(s.body)

    def visit_Allocate(self, s: S.Allocate) -> None:
        for extent in s.buffer.shape:
            self.visit(extent)
        self.bound.add(s.buffer.data)
        self.visit(s.body)


def captured_vars(loop: S.For) -> list[E.Var]:
    """Free variables of the loop body (buffer pointers and scalars), loop variable excluded."""
    finder = _Captures({loop.loop_var})
    finder.visit(loop.body)
    return list(finder.found)


def _arg_type(v: E.Var) -> ir.Type:
    return PTR if v.dtype == "handle" else reg_type(v.dtype)


def _emit_body(cg: Emitter, loop: S.For, captured: list[E.Var], name: str) -> ir.Function:
    iv = reg_type(loop.loop_var.dtype)
    fnty = ir.FunctionType(I32, [_arg_type(v) for v in captured] + [iv, iv])
    fn = ir.Function(cg.module, fnty, name=f"{name}.body")
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    state = FunctionState(fn, ir.IRBuilder(fn.append_basic_block("entry")), in_parallel=True)
    for v, arg in zip(captured, fn.args):
        arg.name = v.name
        if v.dtype == "handle":
            if cg.noalias:
                arg.add_attribute("noalias")
            arg.add_attribute("nonnull")
        state.vars[v] = arg
        if v in cg.state.align:
            state.align[v] = cg.state.align[v]
    begin, end = fn.args[-2], fn.args[-1]
    with cg.function_state(state):
        hints = loop_hints(loop, cg.serial_reductions)
        with for_range(state.builder, begin, end, name=loop.loop_var.name, hints=hints) as index:
            with cg.bind(loop.loop_var, index):
                cg.visit(loop.body)
        if not state.builder.block.is_terminated:
            state.builder.ret(ir.Constant(I32, 0))
    return fn


def _closure_type(loop: S.For, captured: list[E.Var]) -> ir.LiteralStructType:
    iv = reg_type(loop.loop_var.dtype)
    return ir.LiteralStructType([PTR, iv, iv, I64, I64] + [_arg_type(v) for v in captured])


_N_FIXED = 5  # closure fields before the captured values: status, min, extent, counter, parts
LAUNCH_GLOBAL = LAUNCH_SYMBOL  # ptr the runtime sets to Ember's pool; null: libgomp


def _field(b: ir.IRBuilder, ty: ir.Type, ptr: ir.Value, i: int) -> ir.Value:
    zero = ir.Constant(I32, 0)
    return b.gep(ptr, [zero, ir.Constant(I32, i)], inbounds=True, source_etype=ty)


def _from_the_back(module: ir.Module, b: ir.IRBuilder) -> ir.Value:
    """Whether this thread takes parts from the back of the range: it runs on an odd CPU
    (``sched_getcpu``, Linux only; elsewhere every thread takes from the front)."""
    if not sys.platform.startswith("linux"):
        return ir.Constant(ir.IntType(1), 0)
    cpu = b.call(declare(module, "sched_getcpu", I32, []), [], name="cpu")
    return b.trunc(b.and_(cpu, ir.Constant(I32, 1)), ir.IntType(1), name="back")


def _take_part(
    b: ir.IRBuilder, counter: ir.Value, parts: ir.Value, back: ir.Value
) -> tuple[ir.Value, ir.Value]:
    """Take the next part from the front or the ``back`` of the range: ``(part, taken)``.

    The i64 ``counter`` holds the parts taken from the front in its low 32 bits and those
    from the back in its high 32; one ``atomicrmw add`` of 1 or 2^32 takes a part. A take
    succeeds when the two counts it read sum to less than ``parts``: the successful takes
    are the first ``parts`` adds, those at the front get parts 0, 1, ... and those at the
    back ``parts - 1``, ``parts - 2``, ..., so each part runs once. Once the sum reaches
    ``parts`` every later take fails, so a thread's extra add is harmless; storing
    ``parts`` in the counter stops every thread (a failed assert does)."""
    step = b.select(back, ir.Constant(I64, 1 << 32), ir.Constant(I64, 1))
    seen = b.atomic_rmw("add", counter, step, "monotonic", name="taken")
    front = b.and_(seen, ir.Constant(I64, 0xFFFFFFFF), name="front")
    behind = b.lshr(seen, ir.Constant(I64, 32), name="behind")
    taken = b.icmp_signed("<", b.add(front, behind), parts, name="more")
    last = b.sub(parts, ir.Constant(I64, 1))
    return b.select(back, b.sub(last, behind), front, name="part"), taken


def _emit_worker(
    cg: Emitter, loop: S.For, captured: list[E.Var], body: ir.Function, name: str
) -> ir.Function:
    ty = _closure_type(loop, captured)
    fn = ir.Function(cg.module, ir.FunctionType(VOID, [PTR]), name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    closure = fn.args[0]
    values = [b.load(_field(b, ty, closure, i), typ=ty.elements[i]) for i in (0, 1, 2)]
    values += [
        b.load(_field(b, ty, closure, i), typ=ty.elements[i])
        for i in range(_N_FIXED, len(ty.elements))
    ]
    status, lo, extent = values[:3]
    counter = _field(b, ty, closure, 3)
    parts = b.load(_field(b, ty, closure, 4), typ=I64, name="parts")
    iv = lo.type
    n = b.sext(extent, I64) if iv.width < 64 else extent
    head = b.append_basic_block("take")
    run = b.append_basic_block("run")
    done = b.append_basic_block("done")
    back = _from_the_back(cg.module, b)
    b.branch(head)
    b.position_at_end(head)
    part, more = _take_part(b, counter, parts, back)
    b.cbranch(more, run, done)
    b.position_at_end(run)
    # part p is [p * n / parts, (p + 1) * n / parts): sizes within one iteration
    start = b.udiv(b.mul(part, n), parts, name="begin")
    end = b.udiv(b.mul(b.add(part, ir.Constant(I64, 1)), n), parts, name="end")
    if iv.width < 64:
        start, end = b.trunc(start, iv), b.trunc(end, iv)
    rc = b.call(body, values[3:] + [b.add(lo, start), b.add(lo, end)])
    with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
        # any failing thread's code will do; atomic so concurrent writers do not race
        b.atomic_rmw("xchg", status, rc, "monotonic")
        b.atomic_rmw("xchg", counter, parts, "monotonic")  # the others take no more parts
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()
    return fn


def runs_serially(loop: S.For) -> bool:
    """Whether parallel ``loop`` runs on the calling thread at any thread count: its extent
    is a constant too small to give two threads a part each
    (:func:`ember.codegen_llvm.parallel_work.partition`) or below the small-work cut-off.
    Such a loop is emitted as a serial one, not outlined."""
    if not isinstance(loop.extent, E.IntImm):
        return False
    work = parallel_work.iteration_work(loop)
    least = parallel_work.min_chunk(work)
    return loop.extent.value < max(2 * least, parallel_work.serial_below(work))


def emit_partition(
    module: ir.Module, b: ir.IRBuilder, n: ir.Value, threads: ir.Value, least: int
) -> tuple[ir.Value, ir.Value]:
    """``parallel_work.partition(n, threads, least)`` in IR: ``(team, parts)`` as i64 from
    an i64 extent ``n`` > 0 and the i32 thread count ``threads`` (0: libgomp's default)."""
    smin = declare_intrinsic(module, "llvm.smin", I64, 2)
    smax = declare_intrinsic(module, "llvm.smax", I64, 2)
    asked = b.sext(threads, I64)
    default = ir.Constant(I64, parallel_work.DEFAULT_TEAM)
    asked = b.select(b.icmp_signed(">", asked, ir.Constant(I64, 0)), asked, default)
    least = max(1, least)
    team = b.call(smin, [asked, b.sdiv(n, ir.Constant(I64, least))], name="team")
    share = b.sdiv(n, b.mul(b.call(smax, [team, ir.Constant(I64, 1)]), ir.Constant(I64, least)))
    per = b.call(smin, [share, ir.Constant(I64, parallel_work.CHUNKS_PER_THREAD)])
    per = b.call(smax, [per, ir.Constant(I64, 1)])
    alone = b.icmp_signed("<=", team, ir.Constant(I64, 1))
    one = ir.Constant(I64, 1)
    team = b.select(alone, one, team)
    return team, b.select(alone, one, b.mul(team, per), name="parts")


def emit_parallel_for(cg: Emitter, loop: S.For) -> None:
    """Replace ``loop`` by a launch of its outlined body on the runtime's pool (libgomp's
    team where none is set), or a call of the body on the whole range where one thread is
    asked for, the partition leaves one, or the work is small."""
    captured = captured_vars(loop)
    missing = [v.name for v in captured if v not in cg.state.vars]
    if missing:
        raise InternalError(
            f"parallel loop '{loop.loop_var.name}' in '{cg.func_name}' uses unbound "
            f"variables {missing}"
        )
    name = f"{cg.func_name}.par{cg.n_outlined}"
    cg.n_outlined += 1
    body = _emit_body(cg, loop, captured, name)
    worker = _emit_worker(cg, loop, captured, body, name)
    b = cg.builder
    dtype = loop.loop_var.dtype
    lo = emit_cast(b, cg.visit(loop.min), loop.min.dtype, dtype)
    extent = emit_cast(b, cg.visit(loop.extent), loop.extent.dtype, dtype)
    ty = _closure_type(loop, captured)
    closure = entry_alloca(b, ty, name=f"{name}.closure")
    status = entry_alloca(b, I32, name=f"{name}.status")
    values = [cg.state.vars[v] for v in captured]
    with b.if_then(b.icmp_signed(">", extent, ir.Constant(extent.type, 0))):
        threads = b.load(cg.module.get_global(NUM_THREADS_GLOBAL), typ=I32)
        work = parallel_work.iteration_work(loop)
        n = b.sext(extent, I64) if extent.type.width < 64 else extent
        team, parts = emit_partition(cg.module, b, n, threads, parallel_work.min_chunk(work))
        serial = b.icmp_signed("==", team, ir.Constant(I64, 1), name="serial")
        below = parallel_work.serial_below(work)
        if below > 0:
            small = b.icmp_signed("<", extent, ir.Constant(extent.type, below))
            serial = b.or_(serial, small, name="serial")
        with b.if_else(serial) as (alone, together):
            with alone:
                rc = b.call(body, values + [lo, b.add(lo, extent)])
                with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
                    cg.emit_error_return(rc)
            with together:
                # libgomp's default count stays its own (0); else the partition's team
                default = b.icmp_signed("==", threads, ir.Constant(I32, 0))
                team = b.select(default, threads, b.trunc(team, I32), name="team")
                _launch(cg, worker, (ty, closure, status), [lo, extent, *values], team, parts)


class _FunctionPointer(ir.LoadInstr):
    """A function's address loaded from memory: llvmlite calls through a value only when
    it knows the function type, which an opaque ``ptr`` does not carry."""

    def __init__(self, block: ir.Block, ptr: ir.Value, fnty: ir.FunctionType, name: str):
        super().__init__(block, ptr, name, typ=PTR)
        self._fnty = fnty

    @property
    def function_type(self) -> ir.FunctionType:
        return self._fnty


def _launch_global(module: ir.Module) -> ir.GlobalVariable:
    existing = module.globals.get(LAUNCH_GLOBAL)
    if isinstance(existing, ir.GlobalVariable):
        return existing
    launch = ir.GlobalVariable(module, PTR, LAUNCH_GLOBAL)
    launch.initializer = ir.Constant(PTR, None)
    return launch


def _launch(
    cg: Emitter,
    worker: ir.Function,
    closure: tuple[ir.LiteralStructType, ir.Value, ir.Value],
    values: list[ir.Value],
    team: ir.Value,
    parts: ir.Value,
) -> None:
    """Fill the closure (type, pointer, status cell) with ``values`` (min, extent, the
    captured values) and the number of ``parts``, and run ``worker`` on ``team`` threads
    of the pool the runtime set, else of libgomp."""
    b = cg.builder
    ty, ptr, status = closure
    b.store(ir.Constant(I32, 0), status)
    fields = [status, *values[:2], ir.Constant(I64, 0), parts, *values[2:]]
    for i, value in enumerate(fields):
        b.store(value, _field(b, ty, ptr, i))
    pool_run = ir.FunctionType(VOID, [PTR, PTR, I32])
    launch = _FunctionPointer(b.block, _launch_global(cg.module), pool_run, "launch")
    b._insert(launch)  # what IRBuilder.load does, with the subclass
    with b.if_else(b.icmp_unsigned("!=", launch, ir.Constant(PTR, None))) as (pool, gomp):
        with pool:
            b.call(launch, [worker, ptr, team])
        with gomp:
            fn = declare(cg.module, "GOMP_parallel", VOID, [PTR, PTR, I32, I32])
            b.call(fn, [worker, ptr, team, ir.Constant(I32, 0)])
    rc = b.load(status, typ=I32)
    with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
        cg.emit_error_return(rc)
