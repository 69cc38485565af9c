"""Pass ``split_host_device``: cut a lowered GPU function into kernels and a launch list.

Expects: a flattened PrimFunc whose root statements are stage nests with their
loops bound to ``blockIdx``/``threadIdx``, possibly inside ``global``
allocations of intermediate tensors.
Guarantees: one kernel per root stage nest (a kernel boundary is the only
grid-wide synchronisation), each a PrimFunc with attrs ``kernel`` and
``launch`` = ((grid), (block)) and as parameters exactly the buffers it touches;
the intermediates become device workspaces the host allocates. A root statement
with no thread binding is an error: it would run on one GPU thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ember.codegen_cuda.transform.thread_info import launch_dims, launch_extents, thread_loops
from ember.errors import LoweringError
from ember.runtime.sizes import eval_size
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import free_vars, post_order_visit
from ember.tir.signature import size_text
from ember.tir.tensor_core import tensor_core_pointers

HostLoop = tuple[E.Var, E.PrimExpr, E.PrimExpr]  # (variable, min, extent) of a host loop


@dataclass(frozen=True)
class Launch:
    """One kernel launch of the host program: which kernel, with which buffers and sizes."""

    kernel: str
    args: tuple[Buffer, ...]  # parameters or workspaces, in the kernel's parameter order
    sizes: tuple[E.Var, ...] = ()  # then the sizes it takes by value, in order
    # host loops around the launch, outermost first (a scan's time loop): the launch runs
    # once per iteration, the loop variable passed by value like a size
    loops: tuple[HostLoop, ...] = ()


def expand_launches(
    launches: Sequence[Launch], sizes: dict[str, int], depth: int = 0
) -> Iterator[tuple[Launch, dict[str, int]]]:
    """Every launch in the order the host makes them, with the sizes (and host loop
    variables) of that launch; consecutive launches in one host loop run per iteration."""

    def value(e: E.PrimExpr, env: dict[str, int]) -> int:
        text = size_text(e)
        return text if isinstance(text, int) else eval_size(text, env)

    i = 0
    while i < len(launches):
        if len(launches[i].loops) <= depth:
            yield launches[i], sizes
            i += 1
            continue
        var, lo, extent = launches[i].loops[depth]
        j = i
        while (
            j < len(launches)
            and len(launches[j].loops) > depth
            and (launches[j].loops[depth][0] is var)
        ):
            j += 1
        start = value(lo, sizes)
        for t in range(start, start + value(extent, sizes)):
            yield from expand_launches(launches[i:j], {**sizes, var.name: t}, depth + 1)
        i = j


@dataclass(frozen=True)
class DeviceProgram:
    """What the host runs: allocate ``workspaces``, then launch kernels in order."""

    name: str
    params: tuple[Buffer | E.Var, ...]  # as the host function takes them
    workspaces: tuple[Buffer, ...]
    kernels: tuple[S.PrimFunc, ...]
    launches: tuple[Launch, ...]
    attrs: tuple[tuple[str, object], ...] = ()  # the host function's (``positive_vars``)

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        return tuple(p for p in self.params if isinstance(p, Buffer))

    def host_func(self) -> S.PrimFunc:
        """The host function as one PrimFunc (for its signature)."""
        body = S.seq(*[k.body for k in self.kernels])
        return S.PrimFunc(self.name, self.params, body, self.attrs)

    def with_kernels(self, kernels: tuple[S.PrimFunc, ...]) -> DeviceProgram:
        """The same program with its kernels replaced (a per-kernel pass keeps names and
        parameters)."""
        return dataclasses.replace(self, kernels=kernels)


def _root_statements(body: S.Stmt) -> tuple[list[Buffer], list[S.Stmt]]:
    workspaces: list[Buffer] = []
    while isinstance(body, S.Allocate) and body.buffer.scope == "global":
        workspaces.append(body.buffer)
        body = body.body
    stmts = list(body.stmts) if isinstance(body, S.SeqStmt) else [body]
    return workspaces, stmts


def _touched(stmt: S.Stmt) -> set[object]:
    datas: set[object] = set()

    def visit(node: object) -> None:
        buf = getattr(node, "buffer", None)
        if isinstance(buf, Buffer):
            datas.add(buf.data)
        elif isinstance(node, E.Call) and node.op in E.TENSOR_CORE_CALLS:
            datas.update(tensor_core_pointers(node))  # memory reached through pointers
        elif isinstance(node, E.Call) and node.op is E.Intrinsic.ACCESS_PTR:
            datas.add(node.args[0])  # an address handed to a device function

    post_order_visit(stmt, visit, once=True)
    return datas


def _host_steps(
    stmts: Sequence[S.Stmt], loops: tuple[HostLoop, ...] = ()
) -> Iterator[tuple[S.Stmt, tuple[HostLoop, ...]]]:
    """Root statements with the host loops around them: a loop marked ``host_loop`` (a
    scan's time loop) around thread-bound nests stays on the host, as in TVM, so each
    iteration is a launch and sees everything the previous one wrote."""
    for stmt in stmts:
        if isinstance(stmt, S.For) and stmt.annotation("host_loop") and thread_loops(stmt.body):
            inner = list(stmt.body.stmts) if isinstance(stmt.body, S.SeqStmt) else [stmt.body]
            loop = (stmt.loop_var, stmt.min, stmt.extent)
            yield from _host_steps(inner, (*loops, loop))
        else:
            yield stmt, loops


def _refuse_packed_calls(name: str, stmt: S.Stmt) -> None:
    """A packed call runs Python on the host (TVM runs it in host code); a GPU program has
    no host code between its launches that could call it."""
    called: list[str] = []

    def visit(node: object) -> None:
        if isinstance(node, E.Call) and node.op is E.Intrinsic.CALL_PACKED:
            called.append(str(getattr(node.args[0], "value", node.args[0])))

    post_order_visit(stmt, visit, once=True)
    if called:
        raise LoweringError(
            f"'{name}': call_packed('{called[0]}') (an extern stage) runs on the host, and a "
            "CUDA program here is only kernel launches; build that stage for 'llvm' (a "
            "separate function) or express it as a compute bound to GPU threads"
        )


def split_host_device(func: S.PrimFunc) -> DeviceProgram:
    """Splits a lowered function into its device kernels and the host steps that launch them."""
    workspaces, roots = _root_statements(func.body)
    candidates = list(func.buffers) + workspaces
    steps = list(_host_steps(roots))
    stmts = [stmt for stmt, _ in steps]
    kernels: list[S.PrimFunc] = []
    launches: list[Launch] = []
    for n, (stmt, loops) in enumerate(steps):
        _refuse_packed_calls(func.name, stmt)
        sizes = func.size_vars() + tuple(var for var, _, _ in loops)
        if not thread_loops(stmt):
            raise LoweringError(
                f"'{func.name}': a stage runs outside any GPU thread binding (root statement "
                f"{n}); bind its outer loops to blockIdx/threadIdx"
            )
        name = f"{func.name}_kernel{n}" if len(stmts) > 1 else f"{func.name}_kernel"
        extents = launch_extents(stmt, f"kernel '{name}'")
        used = _touched(stmt)
        args = tuple(b for b in candidates if b.data in used)
        # the sizes the kernel needs (in its body, its buffers' shapes, its grid) by value
        launch = launch_dims(extents)
        mentioned = free_vars(stmt)
        for b in args:
            for extent in b.shape:
                mentioned |= free_vars(extent)
        for g in launch[0]:
            if isinstance(g, E.PrimExpr):
                mentioned |= free_vars(g)
        scalars = tuple(v for v in sizes if v in mentioned)
        attrs = (("kernel", True), ("launch", launch), ("global_symbol", name))
        attrs += tuple((k, v) for k, v in func.attrs if k in ("fast_math", "target"))
        kernels.append(S.PrimFunc(name, args + scalars, stmt, attrs))
        launches.append(Launch(name, args, scalars, loops))
    host_attrs = tuple((k, v) for k, v in func.attrs if k == "positive_vars")
    return DeviceProgram(
        func.name, func.params, tuple(workspaces), tuple(kernels), tuple(launches), host_attrs
    )
