"""What an ONNX file declares about itself: opsets, subgraphs, value dtypes and dims.

Read by the importer and by its file checks (:mod:`.file_checks`), which compare these
declarations with the graph the importer builds; kept apart so both use one reading.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.errors import UnsupportedOperatorError
from ember.frontend.graph import SUPPORTED_DTYPES
from ember.frontend.string_tensors import STRING


def opsets(model: Any) -> dict[str, int]:
    """The model's opset per domain ("" for the default domain, ``ai.onnx`` included)."""
    out = {}
    for imp in model.opset_import:
        out["" if imp.domain == "ai.onnx" else imp.domain] = int(imp.version)
    return out


def subgraphs_of(node: Any) -> list[Any]:
    """The GraphProtos in a node's attributes (If's branches, Loop's and Scan's bodies)."""
    out = []
    for a in node.attribute:
        if a.HasField("g"):
            out.append(a.g)
        out.extend(a.graphs)
    return out


def elem_dtype(vi: Any) -> str:
    """The Ember dtype of value ``vi``; a non-tensor or a dtype Ember does not take is an
    ``UnsupportedOperatorError``."""
    # optional dependency: onnx
    from onnx import helper

    if not vi.type.HasField("tensor_type"):
        raise UnsupportedOperatorError(
            f"input '{vi.name}' is not a tensor (sequences, maps and optionals are unsupported)"
        )
    elem = vi.type.tensor_type.elem_type
    if elem == 8:  # TensorProto.STRING: a compile-time constant (frontend/string_tensors.py)
        return STRING
    try:
        dtype = str(np.dtype(helper.tensor_dtype_to_np_dtype(elem)))
    except (KeyError, TypeError, ValueError):
        dtype = f"ONNX type {elem}"
    if dtype not in SUPPORTED_DTYPES:
        raise UnsupportedOperatorError(
            f"input '{vi.name}' has dtype {dtype}, which Ember does not support"
        )
    return dtype


UNNAMED = ("", "?")  # dim_params exporters write for "unknown" (PaddlePaddle writes '?')


def declared_dim(name: str, k: int, d: Any) -> Any:
    """One declared dim: its size, its symbol, or a symbol of its own (``{name}_d{k}``)
    for a dim that is unnamed, '?' or -1 (exporters mean "unknown" by each; two '?' dims
    are not the same size, so they may not share the symbol '?')."""
    if d.HasField("dim_value") and d.dim_value >= 0:
        return int(d.dim_value)
    if d.HasField("dim_param") and d.dim_param not in UNNAMED:
        return d.dim_param
    return f"{name}_d{k}"
