"""The whole flow in one place: schedule -> TIR -> passes -> code -> callable module.

``lower`` stops at optimised, target-independent TIR (what ``print(ember.lower(...))``
shows); ``build`` continues through the target's own passes and code generator.
Reading this file top to bottom is reading Ember's compiler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError, EmberError
from ember.target import Target


def _schedule_and_args(sch: Any, args: Sequence[Any]) -> tuple[Any, list[Any]]:
    from ember.tir.schedule.schedule import Schedule

    if not isinstance(sch, Schedule):
        raise ArgumentError(
            f"expected a schedule from te.create_schedule, got {type(sch).__name__}"
        )
    if not isinstance(args, (list, tuple)) or not args:
        raise ArgumentError("args must be a non-empty list of the tensors the function takes")
    return sch, list(args)


def lower(
    sch: Any,
    args: Sequence[Any],
    name: str = "main",
    disabled_passes: Sequence[str] = (),
    simple_mode: bool = False,
) -> Any:
    """Lower a schedule to optimised TIR (a ``PrimFunc``).

    The passes run under the current ``ember.transform.PassContext``; names in
    ``disabled_passes`` (or the context's ``disabled_pass``) must be passes some
    target may skip.
    """
    ctx = _context(disabled_passes, None)
    return _lower(sch, args, name, ctx, simple_mode)


def _lower(sch: Any, args: Sequence[Any], name: str, ctx: Any, simple_mode: bool = False) -> Any:
    from ember.tir.schedule.lower import schedule_to_primfunc
    from ember.tir.transform.pipeline import default_passes, run_passes

    sch, args = _schedule_and_args(sch, args)
    _check_name(name)
    try:
        func = schedule_to_primfunc(sch, args, name)
        if simple_mode:
            return func
        return run_passes(func, default_passes(ctx), ctx)
    except EmberError as e:
        raise e.add_context(f"while lowering '{name}'") from None


def build(
    sch: Any,
    args: Sequence[Any],
    target: str | Target = "llvm",
    name: str = "main",
    disabled_passes: Sequence[str] = (),
) -> Any:
    """Compile a schedule for ``target``; returns a callable module.

    The passes run under the current ``ember.transform.PassContext`` (options,
    user passes, instruments); ``disabled_passes`` adds to its ``disabled_pass``.
    """
    tgt = Target.parse(target)
    ctx = _context(disabled_passes, tgt)
    func = _lower(sch, args, name, ctx)
    try:
        if tgt.kind == "llvm":
            from ember.codegen_llvm.build import build_llvm

            return build_llvm([func], tgt, ctx=ctx)
        from ember.codegen_cuda.build import build_cuda

        return build_cuda(func, tgt, ctx=ctx)
    except EmberError as e:
        raise e.add_context(f"while building '{name}' for {tgt}") from None


def target_passes(target: Target | None) -> list[Any]:
    """Every pass a build for ``target`` runs, in order (all targets' for None)."""
    from ember.codegen_cuda.pipeline import cuda_passes
    from ember.tir.transform.pipeline import default_passes

    common = default_passes()
    if target is None:
        return [*common, *cuda_passes()]
    return [*common, *(cuda_passes() if target.kind == "cuda" else [])]


def _context(disabled_passes: Sequence[str], target: Target | None) -> Any:
    """The current PassContext with ``disabled_passes`` added, its names checked."""
    from ember.tir.transform.context import PassContext
    from ember.tir.transform.pipeline import check_disabled

    ctx = PassContext.current().with_disabled(disabled_passes)
    where = str(target) if target is not None else "any target"
    check_disabled(ctx, target_passes(target), where)
    return ctx


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"function name must be a C identifier, got {name!r}")
