"""One closure compiler for the reference interpreter and the SIMT emulator (issue 8's
pass contract): the emulator's compilers subclass the interpreter's bases and override
only what differs on a GPU (masks, lanes of threads, memory scopes, barriers). A
handler copied into the emulator, or a shared one overridden, shows up here; the
intrinsic table, casts, lets and sequencing are the interpreter's own.
"""

from __future__ import annotations

from ember.codegen_cuda.emulator import exprs as emu_exprs
from ember.codegen_cuda.emulator import stmts as emu_stmts
from ember.tir.interp import closures
from ember.tir.interp import exprs as interp_exprs
from ember.tir.interp import stmts as interp_stmts

# what a SIMT emulator must do differently: masked per-thread values and memory
EXPR_OVERRIDES = {
    "__init__", "_binop", "_not", "_select", "_if_then_else",
    "_warp_shuffle", "_tensor_core_call", "_ramp", "_broadcast", "_load",
}  # fmt: skip
STMT_OVERRIDES = {
    "__init__", "enter_site", "_for", "_dynamic_loop", "_store", "_allocate", "_if", "_holds",
}  # fmt: skip


def _own_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if callable(value)}


def test_both_subclass_the_shared_bases():
    assert issubclass(interp_exprs.ExprCompiler, closures.ExprCompilerBase)
    assert issubclass(emu_exprs.ExprCompiler, closures.ExprCompilerBase)
    assert issubclass(interp_stmts.StmtCompiler, closures.StmtCompilerBase)
    assert issubclass(emu_stmts.StmtCompiler, closures.StmtCompilerBase)
    assert not issubclass(emu_exprs.ExprCompiler, interp_exprs.ExprCompiler)


def test_the_emulator_overrides_only_what_differs():
    base_expr = _own_methods(closures.ExprCompilerBase)
    base_stmt = _own_methods(closures.StmtCompilerBase)
    assert _own_methods(emu_exprs.ExprCompiler) & base_expr == EXPR_OVERRIDES
    assert _own_methods(emu_stmts.StmtCompiler) & base_stmt == STMT_OVERRIDES


def test_shared_handlers_come_from_the_base():
    for name in ("_var", "_const", "_binary", "_cast", "_call", "_let", "compile", "operand"):
        assert getattr(emu_exprs.ExprCompiler, name) is getattr(closures.ExprCompilerBase, name)
    for name in ("_seq", "_let", "_assert", "_evaluate", "_serial_loop", "_scoped"):
        assert getattr(emu_stmts.StmtCompiler, name) is getattr(closures.StmtCompilerBase, name)
