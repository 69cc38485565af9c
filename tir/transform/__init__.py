"""Passes over TIR PrimFuncs: one pure function per file, run in order by ``pipeline``.

``PassContext`` and ``prim_func_pass`` are here as in ``tvm.tir.transform``
(and in ``ember.transform``, as ``tvm.transform``).
"""

from ember.tir.transform.context import PassContext, PassInfo
from ember.tir.transform.pass_def import Pass
from ember.tir.transform.prim_func_pass import prim_func_pass

__all__ = ["Pass", "PassContext", "PassInfo", "prim_func_pass"]
