"""Generic Ember ops on string tensors, folded at import through the strings' numbers.

A string tensor is always a constant (``frontend/string_tensors.py``), so an op the
importer emits on one (a Reshape, Concat, Gather or Where of labels, the copy of a graph
output, an Equal of two labels) has constant inputs and folds, but the fold runs the op's
own compute (``frontend/fold.py``), whose kernels hold numbers. So each string is replaced
by its number in one sorted pool of every string the op reads, the op runs on those
``int64`` numbers, and its outputs are read back through the pool. That is exact for the
ops that only move elements (the outputs hold input numbers) and for ``equal`` (two
strings are equal exactly when their numbers are); any other op on strings is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import NeedsConstantError, UnsupportedOperatorError
from ember.frontend.fold import evaluate
from ember.frontend.graph import TensorType
from ember.frontend.narrow_dtypes import MOVES_ELEMENTS
from ember.frontend.ops.index_bounds import check_indices
from ember.frontend.ops.registry import get_op
from ember.frontend.string_tensors import STRING, STRING_NUMPY

# the ops whose outputs are some of their inputs' elements (control flow runs subgraphs)
MOVES_STRINGS = MOVES_ELEMENTS - {"if", "loop", "scan", "layout_transform"}
COMPARES_STRINGS = frozenset({"equal"})


def fold_on_strings(
    op: str,
    attrs: dict[str, Any],
    types: Sequence[TensorType],
    arrays: Sequence[np.ndarray | None],
    names: Sequence[str],
    where: str,
) -> list[np.ndarray]:
    """The outputs of ``op`` on inputs of which some are strings
    (``arrays`` None where an input is not a constant: then NeedsConstantError)."""
    if op not in MOVES_STRINGS and op not in COMPARES_STRINGS:
        raise UnsupportedOperatorError(
            f"{where}: op '{op}' on string tensors is not supported (Ember takes strings in "
            "the ops that move elements, such as Reshape, Concat, Gather and Where, in "
            "Equal, and in the string operators)"
        )
    for name, a in zip(names, arrays):
        if a is None:
            raise NeedsConstantError(
                f"{where} mixes string tensors with '{name}', which is computed at run time; "
                "Ember computes on strings at compile time, so it needs that value then",
                name,
            )
    known = [a for a in arrays if a is not None]
    strings = [a for a, t in zip(known, types) if t.dtype == STRING]
    pool = np.unique(np.concatenate([s.reshape(-1) for s in strings])).astype(STRING_NUMPY)
    coded = [
        np.searchsorted(pool, a).astype(np.int64) if t.dtype == STRING else a
        for a, t in zip(known, types)
    ]
    int_types = [TensorType(t.shape, "int64") if t.dtype == STRING else t for t in types]
    out_types = get_op(op).infer_types(int_types, attrs)
    check_indices(op, int_types, attrs, coded, names, where)
    results = evaluate(op, attrs, coded, out_types)
    if op in COMPARES_STRINGS:
        return results
    return [pool[r.reshape(-1)].reshape(r.shape) for r in results]
