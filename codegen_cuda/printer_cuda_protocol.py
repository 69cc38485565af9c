"""What the CUDA printer's helper modules see of it: the :class:`CUDAPrinting` protocol.

:class:`ember.codegen_cuda.printer_cuda.CUDAPrinter` hands calls and tensor-core
intrinsics to :mod:`.printer_cuda_calls` and :mod:`.printer_cuda_mma`, which print
through it. Typing them against this protocol rather than the printer class keeps
them below the printer, which imports them, never the reverse.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from ember.codegen_cuda.printer_c import NameTable, Text
from ember.tir import expr as E


class CUDAPrinting(Protocol):
    """The members of :class:`~ember.codegen_cuda.printer_cuda.CUDAPrinter` the helpers use."""

    names: NameTable
    headers: set[str]  # headers the translation unit must include
    fragment_layouts: dict[E.Var, str]  # wmma matrix_a/b fragment -> layout
    fragment_scopes: dict[E.Var, str]  # wmma fragment -> its storage scope

    def type_name(self, dtype: str) -> str: ...

    def line(self, text: str) -> None: ...

    def block(self, head: str, tail: str = "}") -> AbstractContextManager[None]: ...

    @staticmethod
    def wrap(text: Text, prec: int) -> str: ...

    def expr(self, e: E.PrimExpr, lane: int | None = None) -> str: ...

    def print(self, e: E.PrimExpr, lane: int | None = None) -> Text: ...

    def binary(
        self, op: str, prec: int, a: E.PrimExpr, b: E.PrimExpr, lane: int | None
    ) -> Text: ...

    def to_float(self, e: E.PrimExpr, lane: int | None) -> str: ...

    def print_guarded_vector(self, e: E.Call, lane: int) -> Text: ...
