"""``call_packed`` in the reference interpreter: a direct call into the global registry.

Each buffer argument (``pack_array(data, dtype, *shape)``) is handed over as a view of
the buffer's flat storage in its shape, so the function's in-place writes land in the
interpreter's memory; scalars are passed as numpy scalars. The call's value is 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.errors import InternalError
from ember.runtime.registry import call_packed_func
from ember.tir import expr as E

Fn = Callable[[Any], Any]


def compile_call_packed(
    e: E.Call, compile_expr: Callable[[E.PrimExpr], Fn], data_slot: Callable[[E.Var], int]
) -> Fn:
    """A closure for ``call_packed``: looks up the registered function and passes it buffers."""
    name = e.args[0]
    assert isinstance(name, E.StringImm)
    getters: list[Fn] = []
    for a in e.args[1:]:
        if isinstance(a, E.Call) and a.op is E.Intrinsic.PACK_ARRAY:
            getters.append(_array_getter(a, compile_expr, data_slot))
        else:
            getters.append(compile_expr(a))

    def call(env: Any) -> Any:
        call_packed_func(name.value, [g(env) for g in getters])
        return np.int32(0)

    return call


def _array_getter(
    a: E.Call, compile_expr: Callable[[E.PrimExpr], Fn], data_slot: Callable[[E.Var], int]
) -> Fn:
    data, _dtype, *shape = a.args
    if not isinstance(data, E.Var):
        raise InternalError(f"pack_array of {data!r}: expected a buffer's data variable")
    slot = data_slot(data)
    dims = [compile_expr(d) for d in shape]

    def get(env: Any) -> Any:
        storage = env[slot]
        extents = tuple(int(d(env)) for d in dims)
        count = int(np.prod(extents)) if extents else 1
        return storage[:count].reshape(extents)

    return get
