"""CPU schedule templates; importing this package registers every ``<op>.llvm`` template."""

from ember.codegen_llvm.schedules import elementwise, matmul

__all__ = ["elementwise", "matmul"]
