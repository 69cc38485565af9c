"""GPU schedule templates; importing this package registers every ``<op>.cuda`` template."""

from ember.codegen_cuda.schedules import elementwise, matmul, reduce

__all__ = ["elementwise", "matmul", "reduce"]
