"""The pass contract, the one runner, and the target-independent pass list.

A :class:`Pass` is a named pure function. A *function* pass maps a ``PrimFunc``
to a ``PrimFunc``; a *module* pass maps the whole program being built to a new
one (``split_host_device`` turns one function into a program of kernels). When
the program holds several functions, a function pass runs on each of them, so a
target's per-kernel passes are plain function passes. Passes that need options
or target facts take the :class:`PassContext` as a second argument; no pass
takes anything else.

``run_passes`` applies a literal list in order for every target (this list, and
``codegen_cuda/pipeline.py``): it skips the passes the context disables (a
required pass always runs), calls the context's instruments around each pass,
verifies the IR after each pass (``EMBER_VERIFY_IR=1``, on in tests), dumps the
text before and after each pass to ``EMBER_DUMP_DIR``, and times each pass. A
crash inside a pass becomes an ``InternalError`` naming the pass and the
function, with the cause chained; an ``EmberError`` raised on purpose passes
through with that context added.

User passes (``tir.add_lower_pass``) run after the built-in pass *phase* they
name, as in TVM: phase 0 before any built-in pass (multi-dimensional buffers),
1 after flattening, 2 after the loop transformations (partition, vectorize,
unroll), 3 at the end of the list (a phase above 3 counts as 3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError, EmberError, InternalError
from ember.tir.stmt import PrimFunc
from ember.tir.transform.context import PassContext, PassInfo

PassFn = Callable[..., Any]


@dataclass(frozen=True)
class Pass:
    """One step of a pipeline. ``scope`` is ``"function"`` or ``"module"`` (see above)."""

    name: str
    fn: PassFn
    required: bool = False
    opt_level: int = 0
    scope: str = "function"
    uses_context: bool = False

    @property
    def info(self) -> PassInfo:
        return PassInfo(self.name, self.opt_level, self.required)

    def apply(self, ir: Any, ctx: PassContext) -> Any:
        return self.fn(ir, ctx) if self.uses_context else self.fn(ir)

    def __call__(self, func: Any, ctx: PassContext | None = None) -> Any:
        """Run this pass alone (under ``ctx``, else the current context)."""
        return self.apply(func, ctx or PassContext.current())


def default_passes(ctx: PassContext | None = None) -> list[Pass]:
    """Target-independent optimisation after lowering, in order, with the user's passes."""
    from ember.tir.transform.flatten_buffers import flatten_buffers
    from ember.tir.transform.instrument_bound_checkers import instrument_bound_checkers
    from ember.tir.transform.loop_partition import loop_partition
    from ember.tir.transform.simplify import simplify
    from ember.tir.transform.unroll_loops import unroll_loops
    from ember.tir.transform.vectorize_loops import vectorize_loops
    from ember.tir.transform.widen_index_dtypes import widen_index_dtypes

    user = user_passes_by_phase(ctx or PassContext.current())
    return [
        *user[0],
        # phase 1: one index per access. Index types widen before the simplifier folds
        # constants: (io * 4 + ii) * 1000000007 must not become ii * 1000000007 +
        # io * 4000000028 wrapped to int32
        Pass("widen_index_dtypes", widen_index_dtypes, required=True),
        Pass("simplify", simplify),
        Pass("flatten_buffers", flatten_buffers, required=True),
        Pass("widen_index_dtypes", widen_index_dtypes, required=True),  # flat index products
        Pass("simplify", simplify),
        *user[1],
        # phase 2: loop transformations
        Pass("loop_partition", loop_partition),
        Pass("simplify", simplify),
        Pass("vectorize_loops", vectorize_loops, uses_context=True),
        Pass("unroll_loops", unroll_loops, uses_context=True),
        *user[2],
        # phase 3: clean-up and instrumentation
        Pass("simplify", simplify),
        Pass("instrument_bound_checkers", instrument_bound_checkers, uses_context=True),
        *user[3],
    ]


def user_passes_by_phase(ctx: PassContext) -> list[list[Pass]]:
    """The ``tir.add_lower_pass`` passes of ``ctx`` for phases 0..3, in the order given."""
    from ember.tir.transform.prim_func_pass import as_pass

    phases: list[list[Pass]] = [[], [], [], []]
    for phase, p in ctx.get("tir.add_lower_pass"):
        phases[min(phase, 3)].append(as_pass(p))
    return phases


def pass_names(passes: Sequence[Pass]) -> list[str]:
    """The distinct names of ``passes`` in order of first appearance."""
    return list(dict.fromkeys(p.name for p in passes))


def check_disabled(ctx: PassContext, passes: Sequence[Pass], target: str) -> None:
    """Raise if ``ctx`` disables a name that is not an optional pass of ``passes``."""
    optional = [n for n in pass_names(passes) if not any(p.required for p in passes if p.name == n)]
    required = {p.name for p in passes if p.required}
    for name in ctx.disabled_pass:
        if name not in optional:
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
    """Apply ``passes`` in order to ``ir`` (a PrimFunc, or a program of kernels)."""
    from ember import config

    ctx = ctx or PassContext.current()
    if verify is None:
        verify = config.verify_ir()
    dump_dir = config.dump_dir()
    for step, p in enumerate(passes, start=first_step):
        info = p.info
        if not ctx.pass_enabled(info):
            continue
        before = ir
        start = time.perf_counter()
        if p.scope == "module":
            ir = _run_one(p, info, ir, ctx)
        else:
            funcs = functions_of(ir)
            ir = with_functions(ir, [_run_one(p, info, f, ctx) for f in funcs])
        if timings is not None:
            timings[p.name] = timings.get(p.name, 0.0) + time.perf_counter() - start
        for old, new in zip(_aligned(before, ir), functions_of(ir)):
            if dump_dir:
                _dump(dump_dir, step, p.name, old, new)
            if verify:
                from ember.tir.verify import verify_well_formed

                verify_well_formed(new, after=p.name)
    return ir


def _run_one(p: Pass, info: PassInfo, ir: Any, ctx: PassContext) -> Any:
    for inst in ctx.instruments:
        if hasattr(inst, "should_run") and not inst.should_run(ir, info):
            return ir
    for inst in ctx.instruments:
        if hasattr(inst, "run_before_pass"):
            inst.run_before_pass(ir, info)
    name = getattr(ir, "name", "?")
    try:
        out = p.apply(ir, ctx)
    except EmberError as e:
        raise e.add_context(f"in pass '{p.name}' on function '{name}'") from None
    except Exception as e:
        raise InternalError(f"pass '{p.name}' failed on function '{name}': {e}") from e
    for inst in ctx.instruments:
        if hasattr(inst, "run_after_pass"):
            inst.run_after_pass(out, info)
    return out


def functions_of(ir: Any) -> tuple[PrimFunc, ...]:
    """The functions a program holds: itself for a PrimFunc, else its ``kernels``."""
    return (ir,) if isinstance(ir, PrimFunc) else tuple(ir.kernels)


def with_functions(ir: Any, funcs: Sequence[PrimFunc]) -> Any:
    """``ir`` with its functions replaced, so one pass runner serves a PrimFunc and a device
    program."""
    if isinstance(ir, PrimFunc):
        (func,) = funcs
        return func
    return ir.with_kernels(tuple(funcs))


def _aligned(before: Any, after: Any) -> Sequence[PrimFunc | None]:
    """Each function of ``after`` with its input (None where a module pass made it)."""
    old, new = functions_of(before), functions_of(after)
    return old if len(old) == len(new) else [None] * len(new)


def _dump(folder: Path, step: int, name: str, before: PrimFunc | None, after: PrimFunc) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{after.name}.{step:02d}.{name}"
    if before is not None and before is not after:
        (folder / f"{stem}.before.tir").write_text(repr(before) + "\n")
    (folder / f"{stem}.after.tir").write_text(repr(after) + "\n")


__all__ = [
    "Pass",
    "check_disabled",
    "default_passes",
    "functions_of",
    "pass_names",
    "run_passes",
    "user_passes_by_phase",
]
