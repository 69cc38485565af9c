"""TVM's ``tvm.contrib.cc``: ``create_shared(output, objects, options=None, cc=None)`` links
object files into a shared library with the system C compiler; pass it as
``mod.export_library(path, fcompile=cc.create_shared)``."""

from __future__ import annotations

from ember.runtime.export import create_shared

__all__ = ["create_shared"]
