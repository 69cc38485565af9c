"""Passes over TIR PrimFuncs: one pure function per file, run in order by ``runner``.

``PassContext`` and ``prim_func_pass`` are here as in ``tvm.tir.transform``
(and in ``ember.transform``, as ``tvm.transform``).
"""

from ember.tir.transform.context import PassContext, PassInfo
from ember.tir.transform.prim_func_pass import prim_func_pass
from ember.tir.transform.runner import IRKind, Pass

__all__ = ["IRKind", "Pass", "PassContext", "PassInfo", "prim_func_pass"]
