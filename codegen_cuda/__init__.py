"""ember.codegen_cuda."""
