"""Dispatch of TIR's tensor-core calls (:mod:`ember.tir.tensor_core`) to their emulations.

The expression compiler (:mod:`.exprs`) compiles a call's non-string arguments to
closures and hands their values, in order, to the runner this module picks from the
call's operator and string options: ``mma.sync`` and ``ldmatrix`` in :mod:`.mma`,
the ``wmma`` fragment API in :mod:`.wmma`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.codegen_cuda.emulator.mma import run_ldmatrix, run_mma
from ember.codegen_cuda.emulator.wmma import run_fill, run_load, run_mma_sync, run_store
from ember.errors import InternalError
from ember.tir import expr as E
from ember.tir.interp.closures import Env
from ember.tir.tensor_core import mma_spec

I = E.Intrinsic  # noqa: E741
Runner = Callable[[Env, list[Any]], None]


def _strings(e: E.Call) -> list[str]:
    return [a.value for a in e.args if isinstance(a, E.StringImm)]


def tensor_core_runner(e: E.Call, site: int, text: str) -> Runner:
    """What runs ``e`` given the values of its non-string arguments."""
    if e.op is I.PTX_MMA:
        shape, _, _, a_dtype, _, c_dtype = _strings(e)
        spec = mma_spec(shape, a_dtype, c_dtype)
        return lambda env, v: run_mma(env, spec, v, site, text)
    if e.op is I.PTX_LDMATRIX:
        trans, num = (E.const_value(a) for a in e.args[:2])
        if trans is None or num is None:
            raise InternalError(f"ptx_ldmatrix with non-constant trans/num: {text}")
        return lambda env, v: run_ldmatrix(env, bool(trans), int(num), v[2:], site, text)
    if e.op is I.TVM_FILL_FRAGMENT:  # (frag, m, n, k, index, value)
        return lambda env, v: run_fill(env, v[0], v[4], v[5], text)
    if e.op in (I.TVM_LOAD_MATRIX_SYNC, I.TVM_STORE_MATRIX_SYNC):
        (layout,) = _strings(e)  # (frag, m, n, k, index, ptr, offset, stride, layout)
        run = run_load if e.op is I.TVM_LOAD_MATRIX_SYNC else run_store
        return lambda env, v: run(env, [v[0], *v[4:8], layout], site, text)
    if e.op is I.TVM_MMA_SYNC:
        return lambda env, v: run_mma_sync(env, v, text)
    raise InternalError(f"no emulation of {e.op.value}")


__all__ = ["tensor_core_runner"]
