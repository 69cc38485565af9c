"""FX graphs of ATen ops into Ember graphs (see the package notes)."""

from __future__ import annotations

import operator
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError, UnsupportedOperatorError
from ember.frontend.graph import Graph, TensorType
from ember.frontend.onnx_import.context import GraphBuilder
from ember.frontend.torch._aten_ops import CONVERTERS, Emitter

# keyword arguments about where and how a tensor is stored, which Ember's buffers decide
PLACEMENT = ("memory_format", "layout", "device", "pin_memory")
# dtypes a graph input or constant may have (PyTorch's name -> Ember's)
DTYPES = {
    "float32": "float32", "float64": "float64", "float16": "float16", "int64": "int64",
    "int32": "int32", "int8": "int8", "uint8": "uint8", "bool": "bool",
}  # fmt: skip


def _numpy(tensor: Any) -> np.ndarray:
    """A CPU copy of a tensor's data as numpy (detached; bfloat16 is refused)."""
    t = tensor.detach().cpu()
    name = str(t.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ArgumentError(f"torch import: tensors of {t.dtype} are not supported yet")
    return t.contiguous().numpy().copy()


def _packet(target: Any) -> str:
    """``aten.convolution`` of ``aten.convolution.default``."""
    return str(target).rsplit(".", 1)[0] if str(target).count(".") >= 2 else str(target)


def _in_place(packet: str) -> str | None:
    """``aten.add`` of the in-place ``aten.add_`` (what decompositions such as the LSTM
    cell's leave), else None."""
    base = packet[:-1]
    return (
        base if packet.endswith("_") and not packet.endswith("__") and base in CONVERTERS else None
    )


def _converter(packet: str) -> Any:
    return CONVERTERS.get(packet) or CONVERTERS.get(_in_place(packet) or "")


class _Builder(Emitter):
    """One import: the Ember graph builder, and the FX node being converted (for names)."""

    def __init__(self, reserved: set[str]) -> None:
        self.b = GraphBuilder(reserved)
        self.where = ("", "")

    def emit(self, op: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None) -> str:
        (out,) = self.b.emit(op, list(inputs), attrs or {}, self.where)
        return out

    def const(self, array: np.ndarray) -> str:
        return self.b.add_param(self.b.fresh(self.where[0] or "const"), np.asarray(array))

    def type(self, value: str) -> TensorType:
        return self.b.values[value].type


def _where(node: Any) -> str:
    """An op and where it came from: its node, and the source line PyTorch recorded."""
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    line = f", {trace[-2].strip()}" if len(trace) > 1 else ""
    return f"{node.target} (node '{node.name}'{line})"


def unsupported(gm: Any) -> list[str]:
    """Each call of ``gm`` whose op has no converter, with its source line where known."""
    out = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem and node.users:
            if _converter(_packet(node.target)) is None:
                out.append(_where(node))
    return out


def from_fx(gm: Any, example_inputs: Sequence[Any], name: str = "main") -> Graph:
    """The Ember graph of an ATen-level ``GraphModule`` (``make_fx`` or AOT output):
    placeholders become inputs shaped like ``example_inputs``, ``get_attr`` tensors
    constants."""
    missing = unsupported(gm)
    if missing:
        raise UnsupportedOperatorError(
            f"{len(missing)} PyTorch op(s) Ember cannot import yet:\n  " + "\n  ".join(missing)
        )
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ArgumentError(
            f"torch import: the graph takes {len(placeholders)} inputs, "
            f"{len(example_inputs)} examples were given"
        )
    e = _Builder({n.name for n in placeholders})
    env: dict[Any, Any] = {}
    inputs = []
    for node, example in zip(placeholders, example_inputs):
        if isinstance(example, (int, float, bool)):
            env[node] = example  # a size Dynamo passes: this trace is specialised to it
            continue
        dtype = str(example.dtype).removeprefix("torch.")
        if dtype not in DTYPES:
            raise ArgumentError(f"torch import: inputs of {example.dtype} are not supported yet")
        ttype = TensorType(tuple(int(d) for d in example.shape), DTYPES[dtype])
        inputs.append(e.b.add_input(node.name, ttype))
        env[node] = node.name
    outputs: list[str] = []
    for node in gm.graph.nodes:
        e.where = (node.name, _packet(node.target) if node.op == "call_function" else "")
        if node.op == "get_attr":
            value = operator.attrgetter(node.target)(gm)
            env[node] = e.const(_numpy(value))
        elif node.op == "call_function" and node.target is operator.getitem:
            env[node] = env[node.args[0]][node.args[1]]
        elif node.op == "call_function" and not node.users:
            continue  # dead: what a decomposition left unused (an empty buffer, saved stats)
        elif node.op == "call_function":
            args = _resolve(node.args, env)
            kwargs = {k: _resolve(v, env) for k, v in node.kwargs.items()}
            for key in PLACEMENT:
                kwargs.pop(key, None)
            packet = _packet(node.target)
            env[node] = _converter(packet)(e, *args, **kwargs)
            if _in_place(packet) and _is_node(node.args[0]):
                env[node.args[0]] = env[node]  # the mutated tensor holds the result from now on
        elif node.op == "output":
            flat = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            outputs = [env[o] for o in flat]
        elif node.op != "placeholder":
            raise UnsupportedOperatorError(f"torch import: FX node kind {node.op!r} ({node.name})")
    for i, out in enumerate(outputs):
        if out in e.b.params or any(out == v.name for v in inputs):
            outputs[i] = e.emit("copy", [out])  # an output that is a constant or an input
    values = [e.b.values[o] for o in outputs]
    graph = Graph(inputs, values, e.b.nodes, e.b.params, e.b.values, name=name)
    return graph.verify()


def _resolve(value: Any, env: dict[Any, Any]) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(v, env) for v in value)
    return env.get(value, value) if _is_node(value) else value


def _is_node(value: Any) -> bool:
    return type(value).__name__ == "Node" and hasattr(value, "op")


KEPT = ("aten._scaled_dot_product_flash_attention_for_cpu.default",)  # Ember's own kernels


def _decompositions() -> dict[Any, Any]:
    """The core ATen decompositions but those of ops Ember runs as one kernel: PyTorch's
    fused attention stays whole (its math form stores the scores and adds a guard for
    fully masked rows, six more kernels a layer)."""
    from torch._decomp import core_aten_decompositions

    return {k: v for k, v in core_aten_decompositions().items() if str(k) not in KEPT}


def _aten_graph(fn: Any, example_inputs: Sequence[Any]) -> Any:
    """``fn`` traced to core ATen ops by ``make_fx``, its tensors constants."""
    import torch  # optional dependency: the torch frontend only
    from torch.fx.experimental.proxy_tensor import make_fx

    # oneDNN off, so an LSTM decomposes into GEMMs and gates instead of one opaque call
    # (toggling it warns about Intel GPUs' TF32, which says nothing here)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*TF32 acceleration on top of oneDNN.*")
        with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False):
            trace = make_fx(fn, decomposition_table=_decompositions(), record_stack_traces=True)
            return trace(*example_inputs)


def from_module(module: Any, example_inputs: Sequence[Any], name: str = "main") -> Graph:
    """The Ember graph of ``module(*example_inputs)`` (a ``torch.nn.Module`` in eval mode,
    or any function of tensors), traced with ``make_fx``."""
    return from_fx(_aten_graph(module, example_inputs), example_inputs, name)


def from_exported(program: Any, name: str = "main") -> Graph:
    """The Ember graph of a ``torch.export.ExportedProgram`` at its example inputs: its
    parameters and buffers become constants."""
    args, kwargs = program.example_inputs
    if kwargs:
        raise ArgumentError("from_exported: keyword example inputs are not supported yet")
    return from_module(program.module(), args, name)
