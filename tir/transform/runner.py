"""The pass contract and the one runner every pass list goes through, TIR or graph.

A :class:`Pass` is a named pure function over one IR. What that IR is, and how the
runner checks and shows it, is the pass's :class:`IRKind`: :data:`TIR` here (a
``PrimFunc``, or a program of kernels), and the frontend's graph kind in
``frontend/passes/graph_pass.py``. This layer never imports the frontend, so a kind
brings its own verifier and printer, and the runner treats every kind alike.

A TIR *function* pass maps a ``PrimFunc`` to a ``PrimFunc``; a *module* pass maps the
whole program being built to a new one (``split_host_device`` turns one function into
a program of kernels). When the program holds several functions, a function pass runs
on each of them (the kind's *units*), so a target's per-kernel passes are plain
function passes. Passes that need options or target facts take the
:class:`PassContext` as a second argument; no pass takes anything else.

``run_passes`` applies a literal list in order: it skips the passes the context
disables (a required pass always runs), calls the context's instruments around each
pass, verifies the IR after each pass (``EMBER_VERIFY_IR=1``, on in tests; graph
passes always), dumps the text before and after each pass to ``EMBER_DUMP_DIR``
(``<unit>.<step>.<pass>.{before,after}.<kind>``), and times each pass. A crash inside a
pass becomes an ``InternalError`` naming the pass and the unit it ran on, with the
cause chained; an ``EmberError`` raised on purpose passes through with that context
added.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember import config
from ember.errors import ArgumentError, EmberError, InternalError
from ember.tir.stmt import PrimFunc
from ember.tir.transform.context import PassContext, PassInfo
from ember.tir.verify import verify_well_formed

PassFn = Callable[..., Any]


@dataclass(frozen=True)
class IRKind:
    """What a pass works on, and how the runner verifies, prints and splits it.

    ``name`` ends the dump files' names (``.tir``, ``.graph``); ``unit`` is what
    messages call one unit (``function``, ``graph``). ``verify(ir, after)`` raises when
    ``ir`` is ill-formed after the pass named ``after``; ``text(ir)`` is the readable
    form dumped; ``units(ir)`` are the pieces a function-scope pass maps one at a time
    (and that are dumped and verified one by one), and ``with_units(ir, units)`` puts
    mapped pieces back.
    """

    name: str
    unit: str
    verify: Callable[[Any, str], None]
    text: Callable[[Any], str]
    units: Callable[[Any], Sequence[Any]]
    with_units: Callable[[Any, Sequence[Any]], Any]


def functions_of(ir: Any) -> tuple[PrimFunc, ...]:
    """The functions a program holds: itself for a PrimFunc, else its ``kernels``."""
    return (ir,) if isinstance(ir, PrimFunc) else tuple(ir.kernels)


def with_functions(ir: Any, funcs: Sequence[PrimFunc]) -> Any:
    """``ir`` holding ``funcs`` in place of its functions (see :func:`functions_of`)."""
    if isinstance(ir, PrimFunc):
        (func,) = funcs
        return func
    return ir.with_kernels(tuple(funcs))


def _verify_tir(func: PrimFunc, after: str) -> None:
    verify_well_formed(func, after=after)


TIR = IRKind("tir", "function", _verify_tir, repr, functions_of, with_functions)

# Names of the passes over IRs other than TIR (the frontend's graph passes), filled as
# such passes are made: a PassContext may disable them, so a TIR build inside
# ``ember.compile`` must not refuse their names (this layer cannot import the frontend
# to list them).
_OTHER_IR_PASSES: set[str] = set()


@dataclass(frozen=True)
class Pass:
    """One step of a pipeline. ``scope`` is ``"function"`` or ``"module"``; ``ir`` is
    the kind of IR it works on (module doc)."""

    name: str
    fn: PassFn
    required: bool = False
    opt_level: int = 0
    scope: str = "function"
    uses_context: bool = False
    ir: IRKind = TIR

    def __post_init__(self) -> None:
        if self.ir is not TIR:
            _OTHER_IR_PASSES.add(self.name)

    @property
    def info(self) -> PassInfo:
        """What instruments and the context's enable rule see of this pass."""
        return PassInfo(self.name, self.opt_level, self.required)

    def apply(self, ir: Any, ctx: PassContext) -> Any:
        """The pass's function on ``ir`` (with ``ctx`` if it takes one); no instruments."""
        return self.fn(ir, ctx) if self.uses_context else self.fn(ir)

    def __call__(self, func: Any, ctx: PassContext | None = None) -> Any:
        """Run this pass alone (under ``ctx``, else the current context)."""
        return self.apply(func, ctx or PassContext.current())


def pass_names(passes: Sequence[Pass]) -> list[str]:
    """The distinct names of ``passes`` in order of first appearance."""
    return list(dict.fromkeys(p.name for p in passes))


def check_disabled(ctx: PassContext, passes: Sequence[Pass], target: str) -> None:
    """Raise if ``ctx`` disables a name that is not an optional pass of ``passes``.

    A name of a pass over another IR (a graph pass, ``fuse_ops``) is not this list's
    to refuse: that IR's runner skips it.
    """
    optional = [n for n in pass_names(passes) if not any(p.required for p in passes if p.name == n)]
    required = {p.name for p in passes if p.required}
    for name in ctx.disabled_pass:
        if name in optional or (name not in required and name in _OTHER_IR_PASSES):
            continue
        why = "is required" if name in required else "is not a pass"
        raise ArgumentError(
            f"cannot disable pass {name!r}: it {why} when building for {target}; "
            f"passes that may be disabled: {', '.join(optional)}"
        )


def run_passes(
    ir: Any,
    passes: Sequence[Pass],
    ctx: PassContext | None = None,
    verify: bool | None = None,
    timings: dict[str, float] | None = None,
    first_step: int = 0,
) -> Any:
    """Apply ``passes`` in order to ``ir`` (a PrimFunc, a program of kernels, a graph)."""
    ctx = ctx or PassContext.current()
    if verify is None:
        verify = config.verify_ir()
    dump_dir = config.dump_dir()
    checked: set[int] = set()  # ids of units verified as they are now (kept alive by ``ir``)
    for step, p in enumerate(passes, start=first_step):
        info = p.info
        if not ctx.pass_enabled(info):
            continue
        kind = p.ir
        before = ir
        start = time.perf_counter()
        if p.scope == "module":
            ir = _run_one(p, info, ir, ctx)
        else:
            ir = kind.with_units(ir, [_run_one(p, info, u, ctx) for u in kind.units(ir)])
        if timings is not None:
            timings[p.name] = timings.get(p.name, 0.0) + time.perf_counter() - start
        for old, new in zip(_aligned(kind, before, ir), kind.units(ir)):
            if dump_dir:
                _dump(dump_dir, step, p, old, new)
            # a unit the pass returned as the same object was verified after the pass
            # that made it: checking it again would only repeat that walk
            if verify and (new is not old or id(new) not in checked):
                kind.verify(new, p.name)
                checked.add(id(new))
    return ir


def _run_one(p: Pass, info: PassInfo, ir: Any, ctx: PassContext) -> Any:
    for inst in ctx.instruments:
        if hasattr(inst, "should_run") and not inst.should_run(ir, info):
            return ir
    for inst in ctx.instruments:
        if hasattr(inst, "run_before_pass"):
            inst.run_before_pass(ir, info)
    where = f"{p.ir.unit} '{getattr(ir, 'name', '?')}'"
    try:
        out = p.apply(ir, ctx)
    except EmberError as e:
        raise e.add_context(f"in pass '{p.name}' on {where}") from None
    except Exception as e:
        raise InternalError(f"pass '{p.name}' failed on {where}: {e}") from e
    for inst in ctx.instruments:
        if hasattr(inst, "run_after_pass"):
            inst.run_after_pass(out, info)
    return out


def _aligned(kind: IRKind, before: Any, after: Any) -> Sequence[Any]:
    """Each unit of ``after`` with its input (None where a module pass made it)."""
    old, new = kind.units(before), kind.units(after)
    return old if len(old) == len(new) else [None] * len(new)


def _dump(folder: Path, step: int, p: Pass, before: Any, after: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{getattr(after, 'name', p.ir.unit)}.{step:02d}.{p.name}"
    if before is not None and before is not after:
        (folder / f"{stem}.before.{p.ir.name}").write_text(p.ir.text(before) + "\n")
    (folder / f"{stem}.after.{p.ir.name}").write_text(p.ir.text(after) + "\n")


__all__ = [
    "TIR",
    "IRKind",
    "Pass",
    "check_disabled",
    "functions_of",
    "pass_names",
    "run_passes",
    "with_functions",
]
