"""ember.codegen_llvm: the CPU backend (TIR -> LLVM IR -> machine code) and CPU schedules.

Read in this order: ``build.py`` (entry: ``build_llvm``), ``codegen.py`` (the IR
visitor, with ``arith``, ``casts``, ``intrinsics``, ``vecmath``, ``memory`` and
``parallel`` for its parts), ``jit.py`` (verify, optimise, JIT, object code),
``module.py`` (the callable ``LLVMModule``). Importing this package loads none
of them, so templates under ``schedules/`` stay cheap to import.
"""
