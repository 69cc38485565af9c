"""Features of one candidate's TIR: the fixed-length vector the learned cost model reads.

Sits between a candidate (a task and a config, or any schedule) and the cost model
(:mod:`ember.tuner.auto.cost_model`). It takes a ``PrimFunc`` — by default the loop nests
of ``schedule_to_primfunc``, before the optimising passes, whose loops still say how
they run (serial, parallel, vectorized, unrolled, thread-bound) and which costs a few
milliseconds where the whole ``ember.lower`` costs tens; fully lowered TIR (unrolled
bodies, ``Ramp`` vectors) is read as well. It gives a ``numpy`` vector of
:data:`FEATURE_NAMES`, the same length for every function, in the manner of Ansor's
per-store features (``feature.cc``), aggregated so that candidates of any shape compare.

Per buffer access (a store, or a load in a stored value), under its loop nest:

- ``serial``/``parallel``/``vectorized``/``unrolled``/``thread``: product of the extents of
  the enclosing loops of that kind;
- ``stride_inner``: elements the access moves when the innermost loop steps (0: it does
  not move); ``stride_min``: the stride of the innermost loop that moves it;
- ``vec_width``: lanes per access (a vectorized innermost loop times the dtype's lanes);
- ``bytes``: bytes touched (distinct elements, taken as the product of the extents of the
  loops the index uses, capped by the buffer's size);
- ``reuse``: iterations that reuse one element (product of the extents of the loops the
  index does not use); ``reuse_iter``/``reuse_bytes``: iterations and bytes touched (by
  every access) between two uses, inside the innermost such loop;
- ``count``: executions; ``is_write``/``is_read``/``is_global``/``is_local``/``is_shared``.

Per store (a stage's statement): ``flops`` (float operations times executions and
lanes), ``intensity`` (flops per byte its accesses touch), ``parallel``, ``unrolled``,
``vec_width``, ``depth``, ``guarded``, ``count``. Per function (``g.*``): totals, the
largest parallel and unrolled extents, allocation bytes by scope, loop, store and guard
counts, threads per block and blocks (CUDA), and the registers of a resource report
when one is given. Accesses are kept as the :data:`TOP_ACCESSES` largest by bytes,
stores as the :data:`TOP_STORES` largest by flops (ties in program order), zero-padded.
Every count is ``log2(1 + x)``, so one tree split serves shapes of any size. The result
is deterministic: it depends on the TIR alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith.fold import truncdiv, truncmod
from ember.tir.functor import children

TOP_ACCESSES = 8
TOP_STORES = 3
KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread")
_KIND_OF = dict(zip(S.ForKind, ("serial", "parallel", "vectorized", "unrolled", "thread")))
ACCESS_FIELDS = (
    *KINDS,
    *"stride_inner stride_min vec_width bytes reuse reuse_iter reuse_bytes count".split(),
    *"is_write is_read is_global is_local is_shared".split(),
)
STORE_FIELDS = tuple("flops intensity parallel unrolled vec_width depth guarded count".split())
GLOBAL_FIELDS = tuple(
    """flops bytes intensity parallel_max unrolled_max vec_width_max vector_flop_share
    parallel_flop_share stores accesses loops guards alloc_global alloc_local alloc_shared
    threads_per_block blocks registers""".split()
)
# fractions and flags, kept as they are; the other fields are counts, read as log2(1 + x)
_RAW = set("intensity vector_flop_share parallel_flop_share guarded".split()) | set(
    ACCESS_FIELDS[-5:]
)
FEATURE_NAMES: tuple[str, ...] = (
    *(f"g.{f}" for f in GLOBAL_FIELDS),
    *(f"st{k}.{f}" for k in range(TOP_STORES) for f in STORE_FIELDS),
    *(f"acc{k}.{f}" for k in range(TOP_ACCESSES) for f in ACCESS_FIELDS),
)
N_FEATURES = len(FEATURE_NAMES)
_B = E.BinaryOp
_FLOAT_OPS = {_B.ADD, _B.SUB, _B.MUL, _B.DIV, _B.MIN, _B.MAX}
_INT_OPS: dict[E.BinaryOp, Callable[[int, int], int]] = {
    _B.ADD: lambda a, b: a + b,
    _B.SUB: lambda a, b: a - b,
    _B.MUL: lambda a, b: a * b,
    _B.MIN: min,
    _B.MAX: max,
    _B.FLOORDIV: lambda a, b: a // b if b else 0,
    _B.FLOORMOD: lambda a, b: a % b if b else 0,
    _B.TRUNCDIV: lambda a, b: truncdiv(a, b) if b else 0,
    _B.TRUNCMOD: lambda a, b: truncmod(a, b) if b else 0,
}


class _Unknown(Exception):
    """An index this reader cannot evaluate (an indirect load, a call)."""


class _Loop(NamedTuple):
    var: E.Var
    start: int
    extent: int
    kind: str


@dataclass
class _Access:
    buffer: Any
    indices: tuple[E.PrimExpr, ...]
    dtype: str
    loops: tuple[_Loop, ...]
    write: bool
    read: bool
    used: tuple[bool, ...] = ()
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class _Walk:
    lets: dict[E.Var, E.PrimExpr] = field(default_factory=dict)
    accesses: list[_Access] = field(default_factory=list)
    stores: list[tuple[dict[str, float], list[_Access]]] = field(default_factory=list)
    alloc: dict[str, float] = field(default_factory=lambda: {"global": 0, "local": 0, "shared": 0})
    loops: int = 0
    guards: int = 0
    threads: dict[str, int] = field(default_factory=dict)


def _int(e: E.PrimExpr, default: int = 1) -> int:
    v = E.const_value(e)
    return int(v) if isinstance(v, (int, float)) else default


def _eval(e: E.PrimExpr, env: Mapping[E.Var, int], lets: Mapping[E.Var, E.PrimExpr]) -> int:
    """An integer index expression at one point (variables not in ``env`` are 0)."""
    t = type(e)
    if t is E.IntImm:
        return int(e.value)  # type: ignore[attr-defined]
    if isinstance(e, E.Var):
        if e in env:
            return env[e]
        bound = lets.get(e)
        return 0 if bound is None else _eval(bound, env, lets)
    if t is E.BinOp:
        a, b = _eval(e.a, env, lets), _eval(e.b, env, lets)  # type: ignore[attr-defined]
        fn = _INT_OPS.get(e.op)  # type: ignore[attr-defined]
        if fn is None:
            raise _Unknown(e.op.value)  # type: ignore[attr-defined]
        return int(fn(a, b))
    if t is E.Cast or t is E.Broadcast:
        return _eval(e.value, env, lets)  # type: ignore[attr-defined]
    if t is E.Ramp:
        return _eval(e.base, env, lets)  # type: ignore[attr-defined]
    if t is E.Select:
        return _eval(e.true_value, env, lets)  # type: ignore[attr-defined]
    if t is E.Let:
        inner = {**lets, e.var: e.value}  # type: ignore[attr-defined]
        return _eval(e.body, env, inner)  # type: ignore[attr-defined]
    raise _Unknown(t.__name__)


def _vars_in(e: Any, lets: Mapping[E.Var, E.PrimExpr], out: set[E.Var]) -> None:
    """Every variable ``e`` depends on, through let bindings."""
    if isinstance(e, E.Var):
        out.add(e)
        if e in lets:
            _vars_in(lets[e], lets, out)
        return
    for child in children(e):
        _vars_in(child, lets, out)


def _strides(buffer: Any) -> list[int]:
    if buffer.strides:
        return [_int(s) for s in buffer.strides]
    out, step = [], 1
    for extent in reversed(buffer.shape):
        out.append(step)
        step *= max(_int(extent), 1)
    return out[::-1]


def _numel(buffer: Any) -> int:
    return math.prod(max(_int(s), 1) for s in buffer.shape)


class _Reader:
    """One walk over a function's statements, collecting accesses, stores and sizes."""

    def __init__(self) -> None:
        self.w = _Walk()

    def stmt(self, s: Any, loops: tuple[_Loop, ...], guarded: bool) -> None:
        t = type(s)
        if t is S.For:
            self.w.loops += 1
            kind = _KIND_OF.get(s.kind, "serial")
            loop = _Loop(s.loop_var, _int(s.min, 0), max(_int(s.extent), 1), kind)
            if s.thread_tag:
                self.w.threads[s.thread_tag] = max(self.w.threads.get(s.thread_tag, 1), loop.extent)
            self.stmt(s.body, (*loops, loop), guarded)
        elif t is S.SeqStmt:
            for child in s.stmts:
                self.stmt(child, loops, guarded)
        elif t is S.IfThenElse:
            self.w.guards += 1
            self.stmt(s.then_case, loops, True)
            if s.else_case is not None:
                self.stmt(s.else_case, loops, True)
        elif t is S.LetStmt:
            self.w.lets[s.var] = s.value
            self.stmt(s.body, loops, guarded)
        elif t is S.Allocate:
            scope = s.buffer.scope if s.buffer.scope in self.w.alloc else "global"
            self.w.alloc[scope] += _numel(s.buffer) * dt.bytes_of(s.buffer.dtype)
            self.stmt(s.body, loops, guarded)
        elif t is S.AttrStmt or t is S.AssertStmt:
            self.stmt(s.body, loops, guarded)
        elif t is S.BufferStore:
            self.store(s, loops, guarded)
        elif t is S.AsyncCopy:
            self.store(s.store, loops, guarded)

    def store(self, s: S.BufferStore, loops: tuple[_Loop, ...], guarded: bool) -> None:
        loads: list[E.BufferLoad] = []
        flops = self._flops(s.value, loads)
        for idx in s.indices:
            self._flops(idx, loads)
        lanes = dt.lanes_of(s.value.dtype)
        own = [ld for ld in loads if ld.buffer.data is s.buffer.data]
        mine = _Access(s.buffer, s.indices, s.value.dtype, loops, True, bool(own))
        accs = [mine] + [
            _Access(ld.buffer, ld.indices, ld.dtype, loops, False, True)
            for ld in loads
            if ld.buffer.data is not s.buffer.data
        ]
        self.w.accesses.extend(accs)
        count = math.prod(lp.extent for lp in loops)
        prod = {k: math.prod(lp.extent for lp in loops if lp.kind == k) for k in KINDS}
        inner_vec = loops[-1].extent if loops and loops[-1].kind == "vectorized" else 1
        values = {
            "flops": flops * count * lanes,
            "parallel": prod["parallel"],
            "unrolled": prod["unrolled"],
            "vec_width": inner_vec * lanes,
            "depth": len(loops),
            "guarded": float(guarded),
            "count": count,
        }
        self.w.stores.append((values, accs))

    def _flops(self, e: Any, loads: list[E.BufferLoad]) -> int:
        """Float operations in one evaluation of ``e``; its buffer loads go to ``loads``."""
        t = type(e)
        if t is E.BufferLoad:
            loads.append(e)
            return sum(self._flops(i, loads) for i in e.indices)
        if not isinstance(e, E.PrimExpr):
            return 0
        n = 0
        if (t is E.BinOp and e.op in _FLOAT_OPS) or t is E.Call or t is E.Compare:  # type: ignore[attr-defined]
            operand = e.a.dtype if t is not E.Call else e.dtype  # type: ignore[attr-defined]
            n = int(dt.is_float(dt.element_of(operand)))
        return n + sum(self._flops(child, loads) for child in children(e))


def _describe(acc: _Access, lets: Mapping[E.Var, E.PrimExpr]) -> None:
    """Fill ``acc.values`` but the reuse distance in bytes (which needs every access)."""
    loops = acc.loops
    names: set[E.Var] = set()
    for idx in acc.indices:
        _vars_in(idx, lets, names)
    acc.used = tuple(lp.var in names for lp in loops)
    strides = _strides(acc.buffer)
    base = {lp.var: lp.start for lp in loops}

    def offset(env: Mapping[E.Var, int]) -> int:
        return sum(st * _eval(i, env, lets) for st, i in zip(strides, acc.indices))

    steps: list[int] = []
    try:
        origin = offset(base)
        for lp in loops:
            steps.append(
                abs(offset({**base, lp.var: lp.start + 1}) - origin) if lp.extent > 1 else 0
            )
    except _Unknown:  # an indirect index: say it jumps
        steps = [0 if not u else _numel(acc.buffer) for u in acc.used]
    elem_bytes = dt.bytes_of(dt.element_of(acc.dtype)) * dt.lanes_of(acc.dtype)
    distinct = min(
        math.prod(lp.extent for lp, u in zip(loops, acc.used) if u), max(_numel(acc.buffer), 1)
    )
    count = math.prod(lp.extent for lp in loops)
    moving = [s for s in steps if s]
    reuse_at = next(
        (i for i in reversed(range(len(loops))) if not acc.used[i] and loops[i].extent > 1), None
    )
    inner_vec = loops[-1].extent if loops and loops[-1].kind == "vectorized" and acc.used[-1] else 1
    acc.values = {
        **{k: math.prod(lp.extent for lp in loops if lp.kind == k) for k in KINDS},
        "stride_inner": steps[-1] if steps else 0,
        "stride_min": moving[-1] if moving else 0,
        "vec_width": inner_vec * dt.lanes_of(acc.dtype),
        "bytes": distinct * elem_bytes,
        "reuse": count / max(distinct, 1),
        "reuse_iter": 0
        if reuse_at is None
        else math.prod(lp.extent for lp in loops[reuse_at + 1 :]),
        "reuse_bytes": 0,
        "count": count,
        "is_write": float(acc.write),
        "is_read": float(acc.read),
        **{f"is_{sc}": float(acc.buffer.scope == sc) for sc in ("global", "local", "shared")},
    }
    acc.values["_reuse_at"] = -1 if reuse_at is None else reuse_at


def _reuse_bytes(accesses: Sequence[_Access]) -> None:
    """Bytes touched between two uses: every access's footprint inside one iteration of
    the reuse loop (the loop is identified by its variable)."""
    footprint: dict[E.Var, float] = {}
    for acc in accesses:
        elem = acc.values["bytes"] / max(
            math.prod(lp.extent for lp, u in zip(acc.loops, acc.used) if u), 1
        )
        inner = 1
        for lp, u in zip(reversed(acc.loops), reversed(acc.used)):
            footprint[lp.var] = footprint.get(lp.var, 0.0) + inner * elem
            inner *= lp.extent if u else 1
    for acc in accesses:
        at = int(acc.values.pop("_reuse_at"))
        acc.values["reuse_bytes"] = 0 if at < 0 else footprint.get(acc.loops[at].var, 0.0)


def _log(name: str, value: float) -> float:
    return float(value) if name in _RAW else math.log2(1.0 + max(float(value), 0.0))


def extract_features(func: S.PrimFunc, resources: Mapping[str, Any] | None = None) -> np.ndarray:
    """The feature vector (:data:`FEATURE_NAMES`) of ``func``; ``resources``: a CUDA
    resource report (``registers``) when one is at hand."""
    reader = _Reader()
    reader.stmt(func.body, (), False)
    w = reader.w
    for acc in w.accesses:
        _describe(acc, w.lets)
    _reuse_bytes(w.accesses)
    stores = []
    for values, accs in w.stores:
        moved = sum(a.values["bytes"] for a in accs)
        stores.append({**values, "intensity": values["flops"] / max(moved, 1.0)})
    flops = sum(s["flops"] for s in stores)
    moved = sum(a.values["bytes"] for a in w.accesses)
    share = max(flops, 1.0)
    threads = math.prod(v for k, v in w.threads.items() if k.startswith("threadIdx"))
    blocks = math.prod(v for k, v in w.threads.items() if k.startswith("blockIdx"))
    glob = {
        "flops": flops,
        "bytes": moved,
        "intensity": flops / max(moved, 1.0),
        "parallel_max": max((s["parallel"] for s in stores), default=0),
        "unrolled_max": max((s["unrolled"] for s in stores), default=0),
        "vec_width_max": max((s["vec_width"] for s in stores), default=0),
        "vector_flop_share": sum(s["flops"] for s in stores if s["vec_width"] > 1) / share,
        "parallel_flop_share": sum(s["flops"] for s in stores if s["parallel"] > 1) / share,
        "stores": len(stores),
        "accesses": len(w.accesses),
        "loops": w.loops,
        "guards": w.guards,
        "alloc_global": w.alloc["global"],
        "alloc_local": w.alloc["local"],
        "alloc_shared": w.alloc["shared"],
        "threads_per_block": threads if w.threads else 0,
        "blocks": blocks if w.threads else 0,
        "registers": float((resources or {}).get("registers", 0) or 0),
    }
    row = [_log(f, glob[f]) for f in GLOBAL_FIELDS]
    top_st = sorted(range(len(stores)), key=lambda i: -stores[i]["flops"])[:TOP_STORES]
    for k in range(TOP_STORES):
        s = stores[top_st[k]] if k < len(top_st) else None
        row += [0.0 if s is None else _log(f, s[f]) for f in STORE_FIELDS]
    accs = w.accesses
    top_acc = sorted(range(len(accs)), key=lambda i: -accs[i].values["bytes"])[:TOP_ACCESSES]
    for k in range(TOP_ACCESSES):
        a = accs[top_acc[k]].values if k < len(top_acc) else None
        row += [0.0 if a is None else _log(f, a[f]) for f in ACCESS_FIELDS]
    return np.asarray(row, dtype=np.float64)


def features_of_schedule(sch: Any, tensors: Sequence[Any], name: str = "main") -> np.ndarray:
    """The features of a schedule's loop nests (``schedule_to_primfunc``, no passes)."""
    # start-up cost: the schedule lowering loads only when a model ranks (not for `ember --help`)
    from ember.tir.schedule.lower import schedule_to_primfunc

    return extract_features(schedule_to_primfunc(sch, list(tensors), name))


def features_of_config(task: Any, config: Any) -> np.ndarray:
    """The features of ``task`` instantiated with ``config`` (a ConfigEntity or index)."""
    sch, tensors = task.instantiate(config)
    return features_of_schedule(sch, tensors)


__all__ = ["FEATURE_NAMES", "N_FEATURES", "extract_features", "features_of_config"]
