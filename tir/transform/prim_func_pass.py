"""``prim_func_pass``: a user's function ``f(func, mod, ctx) -> func`` as a pass, as in TVM.

``@ember.tir.transform.prim_func_pass(opt_level=0)`` (also ``ember.transform``)
decorates a function of a PrimFunc, the module it belongs to and the current
:class:`PassContext`, or a class with such a ``transform_function`` method, and
returns a :class:`Pass`. It joins the lowering of every build inside
``PassContext(config={"tir.add_lower_pass": [(phase, pass), ...]})`` after the
built-in phase it names (see :mod:`.pipeline`), and is skipped when its
``opt_level`` is above the context's. ``mod`` is an
:class:`~ember.tir.ir_module.IRModule` holding the function alone: Ember's
passes see one function at a time, so the module gives a pass no other
function to read. A user pass that returns something other than a PrimFunc
raises :class:`ArgumentError` naming the pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.errors import ArgumentError
from ember.tir.ir_module import IRModule
from ember.tir.stmt import PrimFunc
from ember.tir.transform.context import PassContext
from ember.tir.transform.pass_def import Pass

UserPassFn = Callable[[PrimFunc, Any, PassContext], PrimFunc]


def prim_func_pass(
    pass_func: Any = None,
    opt_level: int = 0,
    name: str | None = None,
    required: bool = False,
) -> Any:
    """Make a pass of ``pass_func`` (directly, or as a decorator with options)."""
    if isinstance(opt_level, bool) or not isinstance(opt_level, int) or opt_level < 0:
        raise ArgumentError(f"prim_func_pass: opt_level must be an int >= 0, got {opt_level!r}")

    def create(fn: Any) -> Pass:
        if isinstance(fn, type):
            instance = fn()
            if not hasattr(instance, "transform_function"):
                raise ArgumentError(
                    f"prim_func_pass: class {fn.__name__} needs a method "
                    "transform_function(self, func, mod, ctx)"
                )
            call, default_name = instance.transform_function, fn.__name__
        elif callable(fn):
            call, default_name = fn, getattr(fn, "__name__", "user_pass")
        else:
            raise ArgumentError(f"prim_func_pass takes a function or a class, got {fn!r}")
        pass_name = name or default_name
        return Pass(pass_name, _adapt(call, pass_name), required, opt_level, uses_context=True)

    return create if pass_func is None else create(pass_func)


def as_pass(p: Any) -> Pass:
    """A :class:`Pass` as is; a bare function ``f(func, mod, ctx)`` as a level-0 pass."""
    return p if isinstance(p, Pass) else prim_func_pass(p)


def _adapt(call: UserPassFn, pass_name: str) -> Callable[[PrimFunc, PassContext], PrimFunc]:
    def run(func: PrimFunc, ctx: PassContext) -> PrimFunc:
        out = call(func, IRModule({func.name: func}), ctx)
        if not isinstance(out, PrimFunc):
            raise ArgumentError(
                f"user pass '{pass_name}' returned {type(out).__name__}; a prim_func_pass "
                "must return a PrimFunc"
            )
        return out

    return run


__all__ = ["prim_func_pass"]
