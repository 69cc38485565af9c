"""The whole flow in one place: schedule -> TIR -> passes -> code -> callable module.

``lower`` stops at optimised, target-independent TIR (what ``print(ember.lower(...))``
shows); ``build`` continues through the target's own passes and code generator.
Reading this file top to bottom is reading Ember's compiler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.backend import backend_kinds, get_backend
from ember.errors import ArgumentError, EmberError
from ember.runtime.module import Module
from ember.target import Target
from ember.tir.ir_module import IRModule
from ember.tir.schedule.lower import schedule_to_primfunc
from ember.tir.schedule.schedule import Schedule
from ember.tir.stmt import PrimFunc
from ember.tir.te.tensor import Tensor
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import Pass, check_disabled, default_passes, run_passes


def _schedule_and_args(sch: Any, args: Sequence[Tensor]) -> tuple[Schedule, list[Tensor]]:
    if not isinstance(sch, Schedule):
        raise ArgumentError(
            f"expected a schedule from te.create_schedule, got {type(sch).__name__}"
        )
    if not isinstance(args, (list, tuple)) or not args:
        raise ArgumentError("args must be a non-empty list of the tensors the function takes")
    return sch, list(args)


def lower(
    sch: Schedule,
    args: Sequence[Tensor],
    name: str = "main",
    disabled_passes: Sequence[str] = (),
    simple_mode: bool = False,
) -> PrimFunc:
    """Lower a schedule to optimised TIR (a ``PrimFunc``).

    TVM's ``lower`` returns an IRModule holding one function; Ember deliberately returns
    the PrimFunc itself (what tests and passes work on). It still reads as TVM code
    does: ``lower(s, args, name="f")["f"]`` is the function, ``IRModule.update`` and
    ``IRModule({...})`` take it, and ``build`` accepts it.

    The passes run under the current ``ember.transform.PassContext``; names in
    ``disabled_passes`` (or the context's ``disabled_pass``) must be passes some
    target may skip.
    """
    ctx = _context(disabled_passes, None)
    return _lower(sch, args, name, ctx, simple_mode)


def _lower(
    sch: Schedule, args: Sequence[Tensor], name: str, ctx: PassContext, simple_mode: bool = False
) -> PrimFunc:
    sch, args = _schedule_and_args(sch, args)
    _check_name(name)
    try:
        func = schedule_to_primfunc(sch, args, name)
        if simple_mode:
            return func
        out: PrimFunc = run_passes(func, default_passes(ctx), ctx)
        return out
    except EmberError as e:
        raise e.add_context(f"while lowering '{name}'") from None


def build(
    inputs: Schedule | PrimFunc | IRModule | dict[str | Target, IRModule],
    args: Sequence[Tensor] | None = None,
    target: str | Target | None = None,
    name: str = "main",
    disabled_passes: Sequence[str] = (),
    *,
    target_host: str | Target | None = None,
) -> Module:
    """Compile for ``target`` into one callable module; ``mod[name]`` fetches a function.

    ``inputs`` is what TVM's ``tvm.build`` takes: a schedule (with ``args``), a
    lowered PrimFunc, an :class:`~ember.tir.ir_module.IRModule` of several functions
    (one module with several entry points; ``args`` and ``name`` are then unused),
    or a ``{target: IRModule}`` dict. PrimFuncs and IRModules are taken as
    ``ember.lower`` returns them: already through the target-independent passes.

    The passes run under the current ``ember.transform.PassContext`` (options,
    user passes, instruments); ``disabled_passes`` adds to its ``disabled_pass``.
    ``target_host`` is accepted as TVM scripts pass it; the host is always this CPU.
    """
    _check_target_host(target_host)
    tgt, inputs = _target_of(inputs, target)
    ctx = _context(disabled_passes, tgt)
    funcs = _functions_to_build(inputs, args, name, ctx)
    names = ", ".join(f"'{f.name}'" for f in funcs)
    try:
        return get_backend(tgt).build(funcs, ctx)
    except EmberError as e:
        raise e.add_context(f"while building {names} for {tgt}") from None


def _check_target_host(target_host: str | Target | None) -> None:
    """TVM's ``target_host``: Ember's host code runs in this process, so only llvm fits."""
    if target_host is None:
        return
    host = Target.parse(target_host)
    if not host.info.is_host:
        raise ArgumentError(
            f"build: target_host must be an llvm target (the host code runs on this CPU), "
            f"got '{host}'"
        )


def _target_of(inputs: Any, target: str | Target | None) -> tuple[Target, Any]:
    """The target to build for, and the inputs without a ``{target: IRModule}`` wrapping."""
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
    return Target.parse("llvm" if target is None else target), inputs


def _functions_to_build(
    inputs: Any, args: Sequence[Tensor] | None, name: str, ctx: PassContext
) -> list[PrimFunc]:
    """The lowered functions ``build``'s inputs stand for."""
    if isinstance(inputs, PrimFunc):
        return [inputs]
    if isinstance(inputs, IRModule):
        if not len(inputs):
            raise ArgumentError("build: the IRModule holds no functions")
        return list(inputs.functions.values())
    if not isinstance(inputs, Schedule):
        raise ArgumentError(
            "build takes a schedule (with args), a PrimFunc, an IRModule or a "
            f"{{target: IRModule}} dict, got {type(inputs).__name__}"
        )
    if args is None:
        raise ArgumentError("build: a schedule needs args, the tensors the function takes")
    return [_lower(inputs, args, name, ctx)]


def target_passes(target: Target | None, ctx: PassContext | None = None) -> list[Pass]:
    """Every pass a build for ``target`` runs, in order, with the user passes of ``ctx``
    (the current context when None); for None, every registered target's passes."""
    ctx = ctx or PassContext.current()
    common = default_passes(ctx)
    kinds = backend_kinds() if target is None else (target,)
    own = [p for k in kinds for p in get_backend(k).passes(ctx)]
    return [*common, *dict((p.name, p) for p in own).values()]


def _context(disabled_passes: Sequence[str], target: Target | None) -> PassContext:
    """The current PassContext with ``disabled_passes`` added, its names checked."""
    ctx = PassContext.current().with_disabled(disabled_passes)
    where = str(target) if target is not None else "any target"
    check_disabled(ctx, target_passes(target, ctx), where)
    return ctx


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"function name must be a C identifier, got {name!r}")
