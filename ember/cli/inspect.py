"""``ember inspect FILE``: what an ``.onnx`` or ``.ember`` file holds.

It prints the inputs and outputs (symbolic dims kept), the ops and their counts, the whole
graph with ``--graph``, for an ONNX file the operators Ember lacks (exit 1), and for a CUDA
``.ember`` file its images and kernel launches. It runs nothing, so a CUDA model is
inspected on any machine.
"""

from __future__ import annotations

import argparse
import json
import zipfile
from collections import Counter
from typing import Any

import ember
from ember.cli.common import emulated, load_any
from ember.errors import UnsupportedOperatorError
from ember.frontend.graph import Value


def add_parser(sub: Any) -> None:
    """Register ``ember inspect``."""
    i = sub.add_parser(
        "inspect",
        help="show a model's inputs, outputs, ops and unsupported operators",
        description="Print what an .onnx or .ember file holds.",
    )
    i.add_argument("model", help="an .onnx or .ember file")
    i.add_argument("--graph", action="store_true", help="print the whole graph")
    i.set_defaults(fn=_cmd_inspect)


def _print_cuda_section(cuda: Any) -> None:
    """The images and launch table of a CUDA artifact."""
    if not cuda:
        return
    ptx = f"PTX for {cuda['ptx_arch']} (JIT on newer GPUs)" if cuda.get("ptx_arch") else "no PTX"
    modules = cuda.get("modules", [])
    launches = [k for m in modules for k in m.get("launches", [])]
    print(f"  cubins for {', '.join(cuda.get('archs', []))}; {ptx}; NVRTC {cuda.get('nvrtc')}")
    print(f"  {len(modules)} kernel modules, {len(launches)} CUDA kernels:")
    for k in launches:
        grid = "x".join(map(str, k["grid"]))
        block = "x".join(map(str, k["block"]))
        args = ", ".join(f"{d}{'*' if how == 'pointer' else ''} {n}" for n, d, how in k["args"])
        shared = k["dynamic_shared_bytes"]
        print(f"    {k['symbol']}<<<{grid}, {block}, {shared}>>>({args})")


def _cmd_inspect(ns: argparse.Namespace) -> int:
    path = ns.model
    if path.endswith(".ember"):
        with emulated(True):  # runs nothing: no GPU image need fit this machine's device
            model = load_any(path)
        with zipfile.ZipFile(path) as z:  # load checked it: names and hashes match
            manifest = json.loads(z.read("manifest.json"))
        print(f"{path}: a compiled Ember model for {manifest.get('target', '?')}")
        _print_cuda_section(manifest.get("cuda"))
        graph, inputs, outputs = _described(model)
    else:
        try:
            graph, inputs, outputs = _onnx_described(path)
        except UnsupportedOperatorError as e:
            print(f"{path}: Ember cannot compile this model yet.\n{e}")
            return 1
        print(f"{path}: an ONNX model Ember can compile")
    for v in inputs:
        print(f"  input  {v.name}: {v.type}")
    for v in outputs:
        print(f"  output {v.name}: {v.type}")
    symbols = list(dict.fromkeys(d for v in inputs for d in v.type.shape if isinstance(d, str)))
    if symbols:
        sizes = ", ".join(f"{s}=1" for s in symbols)
        print(f"  symbolic dims {symbols}: compiled per size on first use (ops below at {sizes})")
    counts = Counter(n.op for n in graph.nodes)
    print(f"  {len(graph.nodes)} ops, {len(graph.params)} constants:")
    for op, k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"    {op:<24} {k}")
    if ns.graph:
        print(graph)
    return 0


def _described(model: Any) -> tuple[Any, list[Any], list[Any]]:
    """A loaded model's graph (for a symbolic one, a compiled size's, else its size 1) and
    its inputs and outputs as it declares them."""
    if not hasattr(model, "symbols"):
        return model.graph, model.graph.inputs, model.graph.outputs
    if model.specializations:
        graph = next(iter(model.specializations.values())).graph
    else:
        graph = model.source.specialize({s: 1 for s in model.symbols})
    inputs = [Value(n, t) for n, t in zip(model.input_names, model.input_types)]
    outputs = [Value(n, t) for n, t in zip(model.output_names, model.output_types)]
    return graph, inputs, outputs


def _onnx_described(path: str) -> tuple[Any, list[Any], list[Any]]:
    """An ONNX file's graph (its symbolic dims set to 1 where the importer needs static
    shapes) and its inputs with their symbolic dims kept."""
    # start-up cost: the ONNX importer and the model compiler (~300 ms) stay out of
    # `ember --help` (and the importer loads onnx, an optional dependency, itself)
    from ember.frontend.onnx_import.importer import load_model
    from ember.graph.model_source import symbolic_source

    source = symbolic_source(load_model(path), None)
    if source is None:
        graph = ember.frontend.from_onnx(path)
        return graph, graph.inputs, graph.outputs
    symbols = {d for v in source.inputs for d in v.type.shape if isinstance(d, str)}
    graph = source.specialize({s: 1 for s in symbols})
    return graph, source.inputs, source.outputs
