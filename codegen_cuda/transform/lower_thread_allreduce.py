"""Pass ``lower_thread_allreduce``: a block's threads combine their values (cross-thread reduction).

Expects: a kernel from ``split_host_device`` whose cross-thread reductions are
``thread_allreduce`` attributes (made by :mod:`ember.tir.schedule.cross_thread`):
the node names the reducer and the ``threadIdx`` tags to reduce over, the body
assigns each value of the tuple (``red_k[0] = value_k``), and every thread of the
block reaches it.
Guarantees: after the attribute every thread whose reduction threads form one
*group* (the threads that differ only in the reduced tags) holds the group's
combination in ``red_k`` (the writer, the group's thread 0, included). Made of:

- *warp shuffles* when a group is whole warps or an aligned part of one (the
  reduced tags are the fastest-varying ones, the block is whole warps, and the
  group size ``n`` divides 32 or is a multiple of it): an xor butterfly
  (offsets ``min(n, 32)/2`` down to 1) leaves every lane with its warp's (or
  sub-warp group's) result; for several warps, lane 0 of each stores it in
  shared memory and after a barrier every warp reads the group's partials and
  runs a shorter butterfly over them;
- a *shared-memory tree* otherwise (partial warps, groups not contiguous in the
  thread order): each thread stores its value (the slots up to the next power of
  two get the identity), then ``log2`` halving steps combine pairs, and everyone
  reads element 0. The padding makes every step read what another thread wrote
  in the step before, so each barrier ``inject_sync`` puts between them is needed.

Barriers between the shared-memory steps (and before the next use of the buffer
in a loop) are left to ``inject_sync``, which runs after this pass. Works on a
tuple of values: every shuffle and shared buffer is per value, and the combiner
sees the whole tuple. A thread tag outside the reduction that varies in the
block but is not bound around the reduction would have several groups share
one shared-memory slot: that is a :class:`ScheduleError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.errors import ScheduleError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.functor import Mutator
from ember.tir.schedule.cross_thread import ATTR_KEY, ThreadAllreduce

WARP = E.WARP_SIZE
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
ZERO = (E.const(0, "int32"),)


def _pow2_ceil(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _linear(tags: list[str], thread: dict[str, E.Var], block: dict[str, int]) -> E.PrimExpr:
    """The mixed-radix index of the threads over ``tags`` (first tag fastest)."""
    out: E.PrimExpr | None = None
    stride = 1
    for tag in tags:
        term = thread[tag] * stride if stride > 1 else thread[tag]
        out = term if out is None else out + term
        stride *= block[tag]
    return E.const(0, "int32") if out is None else out


class _Values:
    """The tuple being reduced: one ``local`` register per value, and the reducer."""

    def __init__(self, node: ThreadAllreduce, dtypes: list[str]) -> None:
        self.node = node
        self.regs = [
            decl_buffer((1,), d, name=f"red_buf{k}", scope="local") for k, d in enumerate(dtypes)
        ]

    def loads(self) -> list[E.PrimExpr]:
        return [E.BufferLoad(r.dtype, r, ZERO) for r in self.regs]

    def store_all(self, values: list[E.PrimExpr]) -> S.Stmt:
        return S.seq(*[S.BufferStore(r, v, ZERO) for r, v in zip(self.regs, values)])

    def combine_into(
        self,
        stores: Callable[[list[E.PrimExpr]], S.Stmt],
        first: Sequence[E.PrimExpr],
        second: Sequence[E.PrimExpr],
    ) -> S.Stmt:
        """``stores(combine(first, second))``, every operand bound once: a ``max``-like
        combiner uses each twice."""
        a = [E.Var(f"a{k}", x.dtype) for k, x in enumerate(first)]
        b = [E.Var(f"b{k}", x.dtype) for k, x in enumerate(second)]
        return _let(a + b, [*first, *second], stores(list(self.node.combine(a, b))))

    def butterfly(self, top: int) -> list[S.Stmt]:
        """xor-shuffle steps ``top, top/2, ..., 1``: the lanes of each aligned block of
        ``2 * top`` all end with its combination."""
        steps = []
        offset = top
        while offset >= 1:
            mine = [E.Var(f"a{k}", r.dtype) for k, r in enumerate(self.regs)]
            theirs = [E.Var(f"b{k}", r.dtype) for k, r in enumerate(self.regs)]
            step = self.store_all(list(self.node.combine(mine, theirs)))
            shuffled = [E.warp_shuffle(E.Intrinsic.WARP_SHUFFLE_XOR, v, offset) for v in mine]
            step = _let(theirs, shuffled, step)
            steps.append(_let(mine, self.loads(), step))
            offset //= 2
        return steps


def _let(vars_: list[E.Var], values: list[E.PrimExpr], body: S.Stmt) -> S.Stmt:
    for var, value in reversed(list(zip(vars_, values))):
        body = S.LetStmt(var, value, body)
    return body


class _Lower(Mutator):
    def __init__(self, block: tuple[int, int, int], kernel: str) -> None:
        self.block = dict(zip(THREAD_TAGS, block))
        self.kernel = kernel
        self.thread: dict[str, E.Var] = {}

    def visit_For(self, s: S.For) -> S.Stmt:
        tag = s.thread_tag
        if s.kind is not S.ForKind.THREAD_BINDING or tag not in self.block:
            return self.generic_visit(s)
        outer = self.thread.get(tag)
        self.thread[tag] = s.loop_var
        try:
            return self.generic_visit(s)
        finally:
            if outer is None:
                del self.thread[tag]
            else:
                self.thread[tag] = outer

    def visit_AttrStmt(self, s: S.AttrStmt) -> S.Stmt:
        if s.key != ATTR_KEY or not isinstance(s.node, ThreadAllreduce):
            return self.generic_visit(s)
        stores = _assignments(s.body)
        return self.allreduce(s.node, stores)

    def allreduce(self, node: ThreadAllreduce, stores: list[S.BufferStore]) -> S.Stmt:
        block = self.block
        varying = [t for t in THREAD_TAGS if block[t] > 1]
        reduced = [t for t in varying if t in node.tags]
        groups = [t for t in varying if t not in node.tags]
        for tag in reduced + groups:
            if tag not in self.thread:
                raise ScheduleError(
                    f"kernel '{self.kernel}': the cross-thread reduction ({node!r}) runs in "
                    f"threads whose {tag} is not bound around it, so threads of different "
                    f"{tag} would share its shared-memory slots; bind an axis of the stage (or "
                    f"of the stage it is computed at) to {tag}"
                )
        n = 1
        for t in reduced:
            n *= block[t]
        ngroups = 1
        for t in groups:
            ngroups *= block[t]
        values = _Values(node, [st.value.dtype for st in stores])
        sources = [st.value for st in stores]
        if n == 1:
            return S.seq(*stores)
        r = _linear(reduced, self.thread, block)
        g = _linear(groups, self.thread, block)
        contiguous = varying == reduced + groups  # thread id = r + n * g
        whole_warps = (n * ngroups) % WARP == 0
        if contiguous and whole_warps and (WARP % n == 0 or (n % WARP == 0 and n <= WARP * WARP)):
            body = self.warp_path(values, sources, n, ngroups, r, g)
        else:
            body = self.shared_path(values, sources, n, ngroups, r, g)
        result = [S.BufferStore(st.buffer, v, st.indices) for st, v in zip(stores, values.loads())]
        out = S.seq(*body, *result)
        for reg in reversed(values.regs):
            out = S.Allocate(reg, out)
        return out

    def warp_path(
        self,
        values: _Values,
        sources: list[E.PrimExpr],
        n: int,
        ngroups: int,
        r: E.PrimExpr,
        g: E.PrimExpr,
    ) -> list[S.Stmt]:
        body = [values.store_all(sources), *values.butterfly(min(n, WARP) // 2)]
        if n <= WARP:
            return body
        warps = n // WARP
        lane, warp = E.floormod(r, WARP), E.floordiv(r, WARP)
        partials = self.shared(values, ngroups * warps, "red_warp")
        base = _scaled(g, warps)
        body.append(
            S.IfThenElse(
                E.eq(lane, 0),
                S.seq(
                    *[
                        S.BufferStore(p, v, (_plus(base, warp),))
                        for p, v in zip(partials, values.loads())
                    ]
                ),
            )
        )
        mine = _plus(base, E.min_(lane, warps - 1))
        loads = [
            E.select(lane < warps, E.BufferLoad(p.dtype, p, (mine,)), ident)
            for p, ident in zip(partials, values.node.identities)
        ]
        body.append(values.store_all(loads))
        body += values.butterfly(_pow2_ceil(warps) // 2)
        return [_allocated(partials, S.seq(*body))]

    def shared_path(
        self,
        values: _Values,
        sources: list[E.PrimExpr],
        n: int,
        ngroups: int,
        r: E.PrimExpr,
        g: E.PrimExpr,
    ) -> list[S.Stmt]:
        width = _pow2_ceil(n)  # a group's slots, the ones past n holding the identity
        bufs = self.shared(values, ngroups * width, "red_tree")
        base = _scaled(g, width)
        mine = (_plus(base, r),)
        body = [S.seq(*[S.BufferStore(b, v, mine) for b, v in zip(bufs, sources)])]
        if width > n:
            pad = (_plus(base, r + n),)
            identities = values.node.identities
            pads = [S.BufferStore(b, i, pad) for b, i in zip(bufs, identities)]
            body.append(S.IfThenElse(r < width - n, S.seq(*pads)))
        half = width // 2
        while half >= 1:
            own = [E.BufferLoad(b.dtype, b, mine) for b in bufs]
            other = [E.BufferLoad(b.dtype, b, (_plus(base, r + half),)) for b in bufs]

            def store(vs: list[E.PrimExpr]) -> S.Stmt:
                return S.seq(*[S.BufferStore(b, v, mine) for b, v in zip(bufs, vs)])

            body.append(S.IfThenElse(r < half, values.combine_into(store, own, other)))
            half //= 2
        body.append(values.store_all([E.BufferLoad(b.dtype, b, (base,)) for b in bufs]))
        return [_allocated(bufs, S.seq(*body))]

    def shared(self, values: _Values, size: int, name: str) -> list[Buffer]:
        return [
            decl_buffer((size,), reg.dtype, name=f"{name}{k}", scope="shared")
            for k, reg in enumerate(values.regs)
        ]


def _scaled(g: E.PrimExpr, stride: int) -> E.PrimExpr:
    """A group's first slot; 0 stays a constant."""
    return g if E.is_const_int(g, 0) else g * stride


def _plus(base: E.PrimExpr, x: E.PrimExpr) -> E.PrimExpr:
    return x if E.is_const_int(base, 0) else base + x


def _allocated(bufs: list[Buffer], body: S.Stmt) -> S.Stmt:
    for buf in reversed(bufs):
        body = S.Allocate(buf, body)
    return body


def _assignments(body: S.Stmt) -> list[S.BufferStore]:
    stmts = body.stmts if isinstance(body, S.SeqStmt) else (body,)
    if not all(isinstance(s, S.BufferStore) for s in stmts):
        raise ScheduleError(
            "a thread_allreduce attribute must hold one assignment per reduced value; "
            f"got {[type(s).__name__ for s in stmts]}"
        )
    return list(stmts)  # type: ignore[arg-type]


def lower_thread_allreduce(func: S.PrimFunc) -> S.PrimFunc:
    """Replace each ``thread_allreduce`` attribute of the kernel ``func`` by its combination."""
    _, block = func.attr("launch")
    return _Lower(tuple(block), func.name).visit_func(func)  # type: ignore[arg-type]


__all__ = ["lower_thread_allreduce"]
