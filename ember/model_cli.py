"""The model commands of the ``ember`` CLI: ``compile``, ``run`` and ``inspect``.

``ember compile model.onnx -o model.ember`` imports, compiles and exports a model;
``ember run model.ember --input x=x.npy --output out.npz`` runs it (and times it with
``--bench N``); ``ember inspect`` prints what a model holds: inputs and outputs, the
ops and their counts, the graph, and for an ONNX file the operators Ember lacks.
``ember/cli.py`` wires these parsers in; errors surface as ``EmberError``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError, UnsupportedOperatorError


def add_parsers(sub: Any) -> None:
    c = sub.add_parser(
        "compile",
        help="compile an ONNX model into one .ember file",
        description="Import an ONNX model, compile every kernel for the target, and write "
        "one self-contained .ember file that `ember run` and ember.load() read.",
    )
    c.add_argument("model", help="the .onnx file")
    c.add_argument("-o", "--output", help="the .ember file to write (default: MODEL.ember)")
    c.add_argument("--target", default="llvm", help="llvm (default) or cuda")
    c.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="fix an input's shape (symbolic dims such as the batch); repeatable",
    )
    c.add_argument("--records", help="tuning records (JSON lines) to take the best configs from")
    c.set_defaults(fn=_cmd_compile)

    r = sub.add_parser(
        "run",
        help="run a compiled .ember model on .npy inputs",
        description="Run a compiled model. Inputs come from .npy files (or random data "
        "with --random); outputs go to an .npz file.",
    )
    r.add_argument("model", help="the .ember file (or an .onnx file, compiled first)")
    r.add_argument(
        "--input", action="append", default=[], metavar="NAME=FILE.npy", help="repeatable"
    )
    r.add_argument("--random", action="store_true", help="feed seeded random inputs")
    r.add_argument("--output", help="write the outputs to this .npz file")
    r.add_argument("--bench", type=int, default=0, metavar="N", help="also time N runs")
    r.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also time each kernel (fused group) over N runs and print a table",
    )
    r.set_defaults(fn=_cmd_run)

    i = sub.add_parser(
        "inspect",
        help="show a model's inputs, outputs, ops and unsupported operators",
        description="Print what an .onnx or .ember file holds.",
    )
    i.add_argument("model", help="an .onnx or .ember file")
    i.add_argument("--graph", action="store_true", help="print the whole graph")
    i.set_defaults(fn=_cmd_inspect)


def parse_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    """``["x=1,3,224,224"]`` -> ``{"x": (1, 3, 224, 224)}``."""
    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d < 0 for d in shape):
            raise ArgumentError(
                f"--shape {item!r}: expected NAME=D0,D1,... with non-negative integers"
            )
        shapes[name] = shape
    return shapes


def _progress(message: str) -> None:
    if sys.stderr.isatty():
        print(f"\r{message:<70}", end="", file=sys.stderr, flush=True)


def _cmd_compile(ns: argparse.Namespace) -> int:
    import ember

    src = Path(ns.model)
    out = Path(ns.output) if ns.output else src.with_suffix(".ember")
    start = time.perf_counter()
    _progress(f"importing {src.name} ...")
    graph = ember.frontend.from_onnx(str(src), parse_shapes(ns.shape) or None)
    _progress(f"compiling {len(graph.nodes)} nodes for {ns.target} ...")
    model = ember.compile(graph, target=ns.target, records=ns.records)
    _progress(f"writing {out} ...")
    model.export(out)
    if sys.stderr.isatty():
        print("\r" + " " * 70 + "\r", end="", file=sys.stderr)
    took = time.perf_counter() - start
    print(f"compiled {src} -> {out}: {len(model.steps)} kernels, {took:.1f} s")
    return 0


def _load_any(path: str) -> Any:
    import ember

    if path.endswith(".onnx"):
        return ember.compile(path)
    return ember.load(path)


def _read_inputs(model: Any, items: list[str], random: bool) -> dict[str, Any]:
    import numpy as np

    feeds: dict[str, Any] = {}
    for item in items:
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise ArgumentError(f"--input {item!r}: expected NAME=FILE.npy")
        try:
            feeds[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ArgumentError(f"--input {name}: cannot read {file}: {e}") from e
    if random:
        rng = np.random.default_rng(0)
        for name, t in zip(model.input_names, model.input_types):
            if name not in feeds:
                feeds[name] = _random_array(rng, t.shape, t.dtype)
    return feeds


def _random_array(rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    import numpy as np

    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(dtype)


def _cmd_run(ns: argparse.Namespace) -> int:
    import numpy as np

    for flag, value in (("--bench", ns.bench), ("--profile", ns.profile)):
        if value < 0:
            raise ArgumentError(f"{flag} must be 0 or more, got {value}")
    model = _load_any(ns.model)
    feeds = _read_inputs(model, ns.input, ns.random)
    outs = model.run(feeds)
    for name, arr in zip(model.output_names, outs):
        print(f"{name}: {arr.dtype}{list(arr.shape)}")
    if ns.output:
        try:
            np.savez(ns.output, **dict(zip(model.output_names, outs)))
        except OSError as e:
            raise ArgumentError(f"--output: cannot write {ns.output}: {e}") from e
        print(f"wrote {ns.output}")
    if ns.bench:
        t = model.benchmark(feeds, number=ns.bench, repeat=3)
        print(f"latency: median {t['median'] * 1e3:.3f} ms, min {t['min'] * 1e3:.3f} ms")
    if ns.profile:
        print(model.profile(feeds, number=ns.profile))
    return 0


def _cmd_inspect(ns: argparse.Namespace) -> int:
    path = ns.model
    if path.endswith(".ember"):
        graph = _load_any(path).graph
        print(f"{path}: a compiled Ember model")
    else:
        import ember

        try:
            graph = ember.frontend.from_onnx(path)
        except UnsupportedOperatorError as e:
            print(f"{path}: Ember cannot compile this model yet.\n{e}")
            return 1
        print(f"{path}: an ONNX model Ember can compile")
    for v in graph.inputs:
        print(f"  input  {v.name}: {v.type}")
    for v in graph.outputs:
        print(f"  output {v.name}: {v.type}")
    counts = Counter(n.op for n in graph.nodes)
    print(f"  {len(graph.nodes)} ops, {len(graph.params)} constants:")
    for op, k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"    {op:<24} {k}")
    if ns.graph:
        print(graph)
    return 0
