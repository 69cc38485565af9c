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

    TVM's ``lower`` returns an IRModule holding one function; Ember deliberately returns
    the PrimFunc itself (what tests and passes work on). It still reads as TVM code
    does: ``lower(s, args, name="f")["f"]`` is the function, ``IRModule.update`` and
    ``IRModule({...})`` take it, and ``build`` accepts it."""
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
    inputs: Any,
    args: Sequence[Any] | None = None,
    target: str | Target | None = None,
    name: str = "main",
    disabled_passes: Sequence[str] = (),
) -> Any:
    """Compile for ``target`` into one callable module; ``mod[name]`` fetches a function.

    ``inputs`` is what TVM's ``tvm.build`` takes: a schedule (with ``args``), a
    lowered PrimFunc, an :class:`~ember.tir.ir_module.IRModule` of several functions
    (one module with several entry points; ``args`` and ``name`` are then unused),
    or a ``{target: IRModule}`` dict. PrimFuncs and IRModules are taken as
    ``ember.lower`` returns them: already through the target-independent passes.
    """
    tgt, funcs = _functions_to_build(inputs, args, target, name, disabled_passes)
    names = ", ".join(f"'{f.name}'" for f in funcs)
    try:
        if tgt.kind == "llvm":
            from ember.codegen_llvm.build import build_llvm

            return build_llvm(funcs, tgt, disabled_passes=disabled_passes)
        from ember.codegen_cuda.build import build_cuda

        return build_cuda(funcs, tgt, disabled_passes=disabled_passes)
    except EmberError as e:
        raise e.add_context(f"while building {names} for {tgt}") from None


def _functions_to_build(
    inputs: Any,
    args: Sequence[Any] | None,
    target: str | Target | None,
    name: str,
    disabled_passes: Sequence[str],
) -> tuple[Target, list[Any]]:
    """The target and the lowered functions ``build``'s inputs stand for."""
    from ember.tir.ir_module import IRModule
    from ember.tir.stmt import PrimFunc

    if isinstance(inputs, dict):
        if len(inputs) != 1:
            raise ArgumentError(
                "build: a {target: IRModule} dict must hold one target; Ember builds one "
                f"module per target, got targets {[str(t) for t in inputs]}"
            )
        ((target_key, inputs),) = inputs.items()
        if target is not None and str(Target.parse(target)) != str(Target.parse(target_key)):
            raise ArgumentError(f"build: target '{target}' differs from the dict's '{target_key}'")
        target = target_key
    tgt = Target.parse("llvm" if target is None else target)
    if isinstance(inputs, PrimFunc):
        return tgt, [inputs]
    if isinstance(inputs, IRModule):
        if not len(inputs):
            raise ArgumentError("build: the IRModule holds no functions")
        return tgt, list(inputs.functions.values())
    from ember.tir.schedule.schedule import Schedule

    if not isinstance(inputs, Schedule):
        raise ArgumentError(
            "build takes a schedule (with args), a PrimFunc, an IRModule or a "
            f"{{target: IRModule}} dict, got {type(inputs).__name__}"
        )
    if args is None:
        raise ArgumentError("build: a schedule needs args, the tensors the function takes")
    return tgt, [lower(inputs, args, name, disabled_passes)]


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"function name must be a C identifier, got {name!r}")
