"""Host steps for control-flow nodes: ``if``, ``loop`` and ``scan`` over compiled subgraphs.

``ember.graph.compile`` hands a node with ``subgraphs`` (made by
``frontend/onnx_import/ops_control_flow.py``) to :func:`control_step` with the function
that compiles a subgraph: the same steps, target and graph passes as the model around
it. Each subgraph becomes its own CompiledModel (or DynamicModel); the step is a Python
callable with a kernel's calling convention (inputs, then preallocated outputs), so
the executor runs it like any kernel: an ``if`` reads its condition on the host and
runs one branch, a ``loop`` runs its body until the trip count or the condition
ends it, a ``scan`` runs its body on each slice of its scan inputs and stacks what
it gives. Results are copied into the executor's output arrays.

A step keeps no state between calls (a loop's carried values are locals) and the
subgraph models' ``run`` is thread-safe, so a model with control flow may run on
several threads at once like any other (``ember/executor.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError, InternalError
from ember.frontend.graph import Graph, Node, TensorType
from ember.frontend.narrow_dtypes import from_storage, to_storage
from ember.graph.executor import CompiledModel
from ember.graph.step import Step


def _flag(array: Any) -> bool:
    return bool(np.asarray(array).reshape(-1)[0])


def _run_body(model: Any, arrays: Sequence[Any]) -> list[Any]:
    """``model.run`` on arrays as the executor holds them, results likewise: a subgraph is a
    model of its own, whose run takes and gives users' arrays, a float8 value as ml_dtypes'
    type where the executor holds its bits (``frontend/narrow_dtypes.py``)."""
    ins = [from_storage(a, _dtype(t)) for a, t in zip(arrays, model.input_types)]
    return [to_storage(r, _dtype(t)) for r, t in zip(model.run(ins), model.output_types)]


def _dtype(t: Any) -> str:
    return t.dtype if isinstance(t, TensorType) else ""


class IfStep:
    """``if``: inputs (cond, *captured), outputs those of the branch taken.

    A branch the importer could not type for the model's shapes is None, with the reason
    in ``refused``; taking it raises that (onnxruntime also fails only when it is taken)."""

    def __init__(
        self,
        then_model: CompiledModel | None,
        else_model: CompiledModel | None,
        refused: dict[str, str] | None = None,
    ) -> None:
        self.then_model = then_model
        self.else_model = else_model
        self.refused = refused or {}
        some = then_model if then_model is not None else else_model
        assert some is not None
        self.num_inputs = 1 + len(some.input_names)

    def __call__(self, *arrays: Any) -> None:
        taken = "then_branch" if _flag(arrays[0]) else "else_branch"
        model = self.then_model if taken == "then_branch" else self.else_model
        if model is None:
            raise ArgumentError(
                f"the If takes its {taken.split('_')[0]} branch, which cannot run on the shapes "
                f"the model was compiled for: {self.refused.get(taken, 'no reason recorded')}"
            )
        results = _run_body(model, arrays[1 : self.num_inputs])
        for dst, src in zip(arrays[self.num_inputs :], results):
            np.copyto(dst, src)


class LoopStep:
    """``loop``: inputs ([trip], [cond], *carried, *captured), outputs (*carried, *scans)."""

    def __init__(self, body: CompiledModel, attrs: dict[str, Any], num_inputs: int) -> None:
        self.body = body
        self.has_trip = bool(attrs["has_trip"])
        self.has_cond = bool(attrs["has_cond"])
        self.num_carried = int(attrs["num_carried"])
        self.num_inputs = num_inputs

    def __call__(self, *arrays: Any) -> None:
        ins, outs = list(arrays[: self.num_inputs]), arrays[self.num_inputs :]
        trip = int(np.asarray(ins.pop(0)).reshape(-1)[0]) if self.has_trip else None
        cond = _flag(ins.pop(0)) if self.has_cond else True
        n = self.num_carried
        values, captured = ins[:n], ins[n:]
        scans: list[list[np.ndarray]] = [[] for _ in outs[n:]]
        i = 0
        while cond and (trip is None or i < trip):
            step = [np.array(i, dtype=np.int64), np.array(cond), *values, *captured]
            res = _run_body(self.body, step)
            cond = _flag(res[0])
            values = res[1 : 1 + n]
            for k, s in enumerate(res[1 + n :]):
                scans[k].append(s)
            i += 1
        for dst, src in zip(outs[:n], values):
            np.copyto(dst, src)
        for dst, parts in zip(outs[n:], scans):
            if len(parts) != dst.shape[0]:
                raise ArgumentError(
                    f"Loop ran {len(parts)} iterations, but its scan outputs were compiled for "
                    f"{dst.shape[0]} (Ember's shapes are static)"
                )
            np.copyto(dst, np.stack(parts))


class ScanStep:
    """``scan``: inputs (*states, *scan inputs, *captured), outputs (*states, *scans)."""

    def __init__(self, body: CompiledModel, spec: dict[str, Any], num_inputs: int) -> None:
        self.body = body
        self.spec = spec
        self.num_inputs = num_inputs

    def __call__(self, *arrays: Any) -> None:
        sp = self.spec
        n, n_x = sp["num_states"], len(sp["in_axes"])
        states = list(arrays[:n])
        xs = arrays[n : n + n_x]
        captured = list(arrays[n + n_x : self.num_inputs])
        outs = arrays[self.num_inputs :]
        length = sp["length"]
        elems: list[list[np.ndarray]] = [[] for _ in outs[n:]]
        for i in range(length):
            slices = [
                np.take(x, length - 1 - i if d else i, axis=a)
                for x, a, d in zip(xs, sp["in_axes"], sp["in_dirs"])
            ]
            res = _run_body(self.body, [*states, *slices, *captured])
            states = res[:n]
            for k, e in enumerate(res[n:]):
                elems[k].append(e)
        for dst, src in zip(outs[:n], states):
            np.copyto(dst, src)
        for dst, parts, a, d in zip(outs[n:], elems, sp["out_axes"], sp["out_dirs"]):
            np.copyto(dst, np.stack(parts[::-1] if d else parts, axis=a))


def control_step(graph: Graph, node: Node, compile_subgraph: Callable[[Graph], Any]) -> Step:
    """The host step of control-flow ``node``, its subgraphs compiled by
    ``compile_subgraph`` (the driver's own steps, passed in so that this module, which
    the driver calls, does not call back up into it)."""
    subs = {k: compile_subgraph(g) for k, g in node.subgraphs.items()}
    kernel: Any
    if node.op == "if":
        refused = {
            k[len("refused_") :]: v for k, v in node.attrs.items() if k.startswith("refused_")
        }
        kernel = IfStep(subs.get("then_branch"), subs.get("else_branch"), refused)
    elif node.op == "loop":
        kernel = LoopStep(subs["body"], node.attrs, len(node.inputs))
    elif node.op == "scan":
        kernel = ScanStep(subs["body"], node.attrs, len(node.inputs))
    else:
        raise InternalError(f"node '{node.name}' ({node.op}) has subgraphs but is no control flow")
    return Step(kernel, node.inputs, node.outputs, node.where())
