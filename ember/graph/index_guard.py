"""Index checks around a compiled model's steps: no gather or scatter reads a clamped row.

The executor (``ember/graph/workspace.py``) calls :func:`guard_index_reads` once, when it
builds a model, with the bound call of each step. For every node that takes an index
tensor (the table in ``frontend/ops/index_bounds.py``):

- indices that are constants (params) are checked here, once, so a model whose
  constant indices are out of range is refused when it is built;
- indices computed at run time (a graph input, another step's output) are checked
  just before the first step that reads them, by wrapping that step's call.

Fusion keeps every index tensor a step input (``frontend/passes/fuse_ops.py``), so
the value checked is the array the kernel reads. Steps without indices keep their
call unchanged, so a model without gathers (ResNet-18) pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.frontend.graph import Graph
from ember.frontend.ops.index_bounds import index_input, make_check

Check = Callable[[np.ndarray], None]


def _index_checks(graph: Graph) -> dict[str, list[Check]]:
    """Per index value name, the checks of every node that reads it as indices."""
    checks: dict[str, list[Check]] = {}
    for node in graph.nodes:
        types = [graph.values[i].type for i in node.inputs]
        pos = index_input(node.op, types, node.attrs)
        if pos is None:
            continue
        value = node.inputs[pos]
        check = make_check(node.op, types, node.attrs, value, node.where())
        if check is not None:
            checks.setdefault(value, []).append(check)
    return checks


def guard_index_reads(
    graph: Graph, steps: Sequence[Any], env: dict[str, np.ndarray], calls: list[Callable[[], None]]
) -> list[Callable[[], None]]:
    """``calls`` with index checks before the steps that first read run-time indices;
    raises ArgumentError now for constant indices out of range."""
    checks = _index_checks(graph)
    for value in [v for v in checks if v in graph.params]:
        for check in checks.pop(value):
            check(np.asarray(graph.params[value]))
    if not checks:
        return calls
    guarded = list(calls)
    for k, st in enumerate(steps):
        here = [(env[v], c) for v in st.inputs if v in checks for c in checks.pop(v)]
        if here:
            guarded[k] = GuardedCall(calls[k], here)
    return guarded


class GuardedCall:
    """A step's call with the index checks that run before it (:meth:`check`); the native
    step loop (``ember/graph/step_program.py``) runs the checks from Python and the call
    in its table."""

    __slots__ = ("call", "checks")

    def __init__(self, call: Callable[[], None], checks: list[tuple[np.ndarray, Check]]) -> None:
        self.call = call
        self.checks = checks

    def check(self) -> None:
        """Raise ArgumentError if an index array holds an index out of range."""
        for array, check in self.checks:
            check(array)

    def __call__(self) -> None:
        self.check()
        self.call()
