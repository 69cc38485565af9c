"""From a graph op to tensor expressions: placeholders for its inputs, its compute's outputs.

The compiler (``ember.graph.compile``) schedules and builds what this returns; the
importer's constant folding (``frontend/fold.py``) runs it on the interpreter. A
fused group will chain several ops' computes here, feeding one op's output tensors
to the next instead of placeholders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError, EmberError, InternalError
from ember.frontend.graph import SHAPES_HINT, TensorType
from ember.frontend.narrow_dtypes import kernel_dtype
from ember.frontend.ops.registry import get_op
from ember.tir.te import operation as te


def op_to_te(
    op: str, attrs: dict[str, Any], in_types: Sequence[TensorType]
) -> tuple[list[Any], list[Any]]:
    """``(placeholders, outputs)`` of ``op`` applied to inputs of ``in_types`` (static); a
    placeholder has its type's kernel dtype (a float8 input is a ``uint8`` one:
    ``narrow_dtypes.py``)."""
    for t in in_types:
        if not t.is_static:
            raise ArgumentError(
                f"op '{op}' has an input of symbolic shape {t}; "
                "give concrete input shapes " + SHAPES_HINT
            )
    placeholders = [
        te.placeholder(t.shape, dtype=kernel_dtype(t.dtype), name=f"in{i}")
        for i, t in enumerate(in_types)
    ]
    definition = get_op(op)
    try:
        outs = definition.compute(placeholders, attrs)
    except EmberError:
        raise
    except Exception as e:  # a compute that crashed on inputs its shape rule accepted
        raise InternalError(f"compute of op '{op}' failed: {type(e).__name__}: {e}") from e
    if len(outs) != definition.num_outputs:
        raise InternalError(
            f"op '{op}' computed {len(outs)} outputs, declares {definition.num_outputs}"
        )
    return placeholders, list(outs)
