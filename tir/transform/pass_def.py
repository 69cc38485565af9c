"""The pass contract: a :class:`Pass` is a named pure function the runner applies.

A *function* pass maps a ``PrimFunc`` to a ``PrimFunc``; a *module* pass maps the
whole program being built to a new one (``split_host_device`` turns one function into
a program of kernels). Passes that need options or target facts take the
:class:`PassContext` as a second argument. The runner and the pass lists are in
:mod:`.pipeline`; user passes are made by :mod:`.prim_func_pass`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
