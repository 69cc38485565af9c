"""Parallel loops: outline the body and run it on libgomp's thread team.

Used by :mod:`ember.codegen_llvm.codegen` for the outermost ``For`` of kind
``PARALLEL`` (parallel loops nested inside it run serially). The loop becomes
three pieces:

* a *body* function ``i32 f.parK.body(ptr noalias A, ..., scalars, begin, end)``
  running iterations ``[begin, end)``; its buffer arguments are ``noalias``
  like the kernel's own, which LLVM keeps as alias scopes if it inlines it;
* a *worker* ``void f.parK(ptr closure)`` that each thread runs: it reads the
  captured values from the closure, takes its static share of the range from
  ``omp_get_thread_num`` / ``omp_get_num_threads`` and calls the body;
* at the loop's place, a closure struct ``{status*, min, extent, captured...}``
  on the stack and ``GOMP_parallel(worker, &closure, num_threads, 0)``, where
  ``num_threads`` is the module global ``__ember_num_threads`` the runtime sets
  (0: libgomp's default). A failing assert in any thread stores its code into
  the shared status, which the caller returns after the team joins.
"""

from __future__ import annotations

from llvmlite import ir

from ember.codegen_llvm.builder_utils import (
    I32,
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
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Visitor


class _Captures(Visitor):
    """Variables a statement reads from outside itself, in first-use order."""

    def __init__(self, bound: set[E.Var]) -> None:
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
    return ir.LiteralStructType([PTR, iv, iv] + [_arg_type(v) for v in captured])


def _field(b: ir.IRBuilder, ty: ir.Type, ptr: ir.Value, i: int) -> ir.Value:
    zero = ir.Constant(I32, 0)
    return b.gep(ptr, [zero, ir.Constant(I32, i)], inbounds=True, source_etype=ty)


def _emit_worker(
    cg: Emitter, loop: S.For, captured: list[E.Var], body: ir.Function, name: str
) -> ir.Function:
    ty = _closure_type(loop, captured)
    fn = ir.Function(cg.module, ir.FunctionType(VOID, [PTR]), name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    closure = fn.args[0]
    values = [
        b.load(_field(b, ty, closure, i), typ=ty.elements[i]) for i in range(len(ty.elements))
    ]
    status, lo, extent = values[:3]
    iv = lo.type
    tid = b.call(declare(cg.module, "omp_get_thread_num", I32, []), [])
    nt = b.call(declare(cg.module, "omp_get_num_threads", I32, []), [])
    if iv.width != 32:
        tid, nt = b.sext(tid, iv), b.sext(nt, iv)
    # balanced static schedule: the first (extent % nt) threads take one extra iteration
    q, r = b.sdiv(extent, nt), b.srem(extent, nt)
    smin = declare_intrinsic(cg.module, "llvm.smin", iv, 2)
    begin = b.add(b.add(lo, b.mul(tid, q)), b.call(smin, [tid, r]))
    end = b.add(begin, b.add(q, b.zext(b.icmp_signed("<", tid, r), iv)))
    rc = b.call(body, values[3:] + [begin, end])
    with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
        # any failing thread's code will do; atomic so concurrent writers do not race
        b.atomic_rmw("xchg", status, rc, "monotonic")
    b.ret_void()
    return fn


def emit_parallel_for(cg: Emitter, loop: S.For) -> None:
    """Replace ``loop`` by a ``GOMP_parallel`` launch of its outlined body."""
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
    with b.if_then(b.icmp_signed(">", extent, ir.Constant(extent.type, 0))):
        b.store(ir.Constant(I32, 0), status)
        fields = [status, lo, extent] + [cg.state.vars[v] for v in captured]
        for i, value in enumerate(fields):
            b.store(value, _field(b, ty, closure, i))
        threads = b.load(cg.module.get_global(NUM_THREADS_GLOBAL), typ=I32)
        gomp = declare(cg.module, "GOMP_parallel", VOID, [PTR, PTR, I32, I32])
        b.call(gomp, [worker, closure, threads, ir.Constant(I32, 0)])
        rc = b.load(status, typ=I32)
        with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
            cg.emit_error_return(rc)
