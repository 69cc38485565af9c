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
    """Lower a schedule to optimised TIR (a ``PrimFunc``)."""
    from ember.tir.schedule.lower import schedule_to_primfunc
    from ember.tir.transform.pipeline import default_passes, run_passes

    sch, args = _schedule_and_args(sch, args)
    _check_name(name)
    try:
        func = schedule_to_primfunc(sch, args, name)
        if simple_mode:
            return func
        return run_passes(func, default_passes(), disabled_passes)
    except EmberError as e:
        raise e.add_context(f"while lowering '{name}'") from None


def build(
    sch: Any,
    args: Sequence[Any],
    target: str | Target = "llvm",
    name: str = "main",
    disabled_passes: Sequence[str] = (),
) -> Any:
    """Compile a schedule for ``target``; returns a callable module."""
    tgt = Target.parse(target)
    func = lower(sch, args, name, disabled_passes)
    try:
        if tgt.kind == "llvm":
            from ember.codegen_llvm.build import build_llvm

            return build_llvm([func], tgt, disabled_passes=disabled_passes)
        from ember.codegen_cuda.build import build_cuda

        return build_cuda(func, tgt, disabled_passes=disabled_passes)
    except EmberError as e:
        raise e.add_context(f"while building '{name}' for {tgt}") from None


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"function name must be a C identifier, got {name!r}")
