"""Entry of the CPU backend: lowered PrimFuncs in, a callable :class:`LLVMModule` out.

``build_llvm`` is what :func:`ember.build` calls for ``target="llvm"``. It takes
PrimFuncs after the target-independent passes (flattened buffers, vectorised
loops), records each one's signature for the runtime's argument checks
(parameter names, static shapes, dtypes, which parameters are written), emits
LLVM IR (:mod:`.codegen`), and compiles it in-process (:mod:`.jit`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from ember.codegen_llvm import jit
from ember.codegen_llvm.codegen import codegen_module, function_symbol
from ember.codegen_llvm.cpu_intrinsics import cpu_facts
from ember.codegen_llvm.intrinsics import INTRINSICS
from ember.codegen_llvm.module import LLVMModule, metadata_ir, module_metadata
from ember.errors import ArgumentError, EmberError, InternalError
from ember.runtime.signature import FunctionSignature
from ember.target import Target
from ember.tir import stmt as S
from ember.tir.signature import signature_for
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import Pass, run_passes

# Symbols generated code calls; a kernel of the same name would capture those calls.
_RESERVED = frozenset(
    {"free", "aligned_alloc", "GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads"}
    | {n for r in INTRINSICS.values() if r.libm for n in (r.libm, r.libm + "f")}
    | {n for r in INTRINSICS.values() if r.llvm for n in (r.llvm, r.llvm + "f")}
    | {"exp", "expf", "log", "logf", "sqrt", "sqrtf", "pow", "powf", "sin", "sinf", "cos", "cosf"}
    | {"erf", "erff", "tanh", "tanhf"}  # formulas for float32 vectors, libm for the rest
)


def _check_name(name: str) -> None:
    if not name.isidentifier():
        raise ArgumentError(f"'{name}' cannot name a compiled function: it must be a C identifier")


def native_symbol(name: str) -> str:
    """The symbol for function ``name``; renamed where generated code calls that symbol."""
    if name in _RESERVED or name.startswith(("__ember", "llvm")):
        return f"ember_fn_{name}"
    return name


def signature_of(func: S.PrimFunc) -> FunctionSignature:
    """Parameter names, static shapes and dtypes, and which parameters are written."""
    name = function_symbol(func)
    _check_name(name)
    symbol = native_symbol(name)
    return signature_for(func, name, symbol="" if symbol == name else symbol)


def _num_threads(target: Target) -> int | None:
    value = target.get("num-threads")
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ArgumentError(f"-num-threads must be a positive integer, got {value!r} in '{target}'")
    return int(value)


def build_llvm(
    funcs: Sequence[S.PrimFunc] | S.PrimFunc,
    target: Target | str = "llvm",
    disabled_passes: Sequence[str] = (),
    ctx: PassContext | None = None,
    passes: Sequence[Pass] = (),
) -> LLVMModule:
    """Compile PrimFuncs for the CPU; the first one is what calling the module runs.

    ``passes`` are the CPU's own TIR passes (``CPUBackend.passes``), run by the common
    runner before code generation; ``disabled_passes`` is refused here (disable passes
    through ``ember.build`` or a ``PassContext``). From the pass context it reads
    ``tir.noalias`` (buffer arguments are ``noalias`` unless it is False, as in TVM).
    """
    ctx = ctx or PassContext.current()
    if disabled_passes:
        raise ArgumentError(
            f"the llvm target has no passes of its own to disable, got {list(disabled_passes)}; "
            "disable lowering passes through ember.build or ember.lower"
        )
    tgt = Target.parse(target)
    if tgt.kind != "llvm":
        raise ArgumentError(f"build_llvm compiles for target 'llvm', got '{tgt}'")
    func_list = [funcs] if isinstance(funcs, S.PrimFunc) else list(funcs)
    if not func_list:
        raise ArgumentError("build_llvm needs at least one PrimFunc")
    signatures = [signature_of(f) for f in func_list]
    names = [s.name for s in signatures]
    symbols = [s.native_symbol for s in signatures]
    if len(set(names)) != len(names) or len(set(symbols)) != len(symbols):
        raise ArgumentError(f"function names in one module must differ, got {names}")
    fast = tgt.flag("fast-math")
    func_list = [run_passes(f, passes, ctx, first_step=50) for f in func_list]
    try:
        module, infos = codegen_module(
            func_list,
            fast_math=fast,
            name="_".join(names)[:64],
            symbols=symbols,
            noalias=ctx.get("tir.noalias"),
            cpu=cpu_facts(str(tgt)),
        )
    except EmberError as e:
        e.add_context(f"while generating LLVM IR for {', '.join(names)}")
        raise
    except Exception as e:  # a bug in the code generator, not in the user's program
        raise InternalError(f"LLVM code generation crashed on {', '.join(names)}: {e}") from e
    spec = jit.MachineSpec.from_target(tgt)
    module.triple = spec.triple
    ll_unopt = str(module)
    signatures = [dataclasses.replace(s, errors=i.errors) for s, i in zip(signatures, infos)]
    threads = _num_threads(tgt)

    def metadata(ll: str) -> str:
        return metadata_ir(json.dumps(module_metadata(signatures, tgt, threads, ll)))

    ll, engine, obj = jit.compile_ir(ll_unopt, spec, metadata)
    return LLVMModule(signatures, ll_unopt, ll, engine, spec, tgt, threads, obj)
