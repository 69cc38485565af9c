"""ember.codegen_llvm."""
