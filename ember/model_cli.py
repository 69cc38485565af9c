"""The model commands of the ``ember`` CLI: ``compile``, ``run`` and ``inspect``.

``ember compile model.onnx -o model.ember`` imports, compiles and exports a model;
``ember run model.ember --input x=x.npy --output out.npz`` runs it (and times it with
``--bench N``); ``ember inspect`` prints what a model holds: inputs and outputs, the
ops and their counts, the graph, and for an ONNX file the operators Ember lacks.
CUDA models (``--target cuda``, cubins for ``--arch``) run on a GPU, or with
``ember run --emulate`` in the SIMT emulator; without either ``run`` says so, and
``inspect`` shows their images and kernel launches.
``ember/cli.py`` wires these parsers in; errors surface as ``EmberError``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError, DeviceError, UnsupportedOperatorError


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
    c.add_argument(
        "--arch",
        metavar="SM,SM,...",
        help="CUDA only: the architectures to store cubins for, e.g. sm_80,sm_90 (default: "
        "the target's, plus sm_80 and sm_90 where newer); PTX for the lowest is stored too",
    )
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
        "--emulate",
        action="store_true",
        help="run a CUDA model in the SIMT emulator on the CPU (slow; for machines without a GPU)",
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
    archs = [a.strip() for a in ns.arch.split(",") if a.strip()] if ns.arch else None
    if archs is not None and not ns.target.startswith("cuda"):
        raise ArgumentError(f"--arch applies to CUDA models only (--target cuda), not {ns.target}")
    start = time.perf_counter()
    _progress(f"importing {src.name} ...")
    graph = ember.frontend.from_onnx(str(src), parse_shapes(ns.shape) or None)
    _progress(f"compiling {len(graph.nodes)} nodes for {ns.target} ...")
    model = ember.compile(graph, target=ns.target, records=ns.records)
    _progress(f"writing {out} ...")
    model.export(out, archs=archs)
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
    if ns.bench < 0:
        raise ArgumentError(f"--bench must be 0 or more, got {ns.bench}")
    with _emulator(ns.emulate):
        model = _load_any(ns.model)
        _check_cuda_mode(model, ns.model, ns.emulate)
        feeds = _read_inputs(model, ns.input, ns.random)
        _run_and_report(model, feeds, ns)
    return 0


@contextlib.contextmanager
def _emulator(on: bool) -> Iterator[None]:
    """CUDA kernels run in the SIMT emulator inside this block (``EMBER_CUDA_EMULATE``)."""
    import os

    before = os.environ.get("EMBER_CUDA_EMULATE")
    if on:
        os.environ["EMBER_CUDA_EMULATE"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("EMBER_CUDA_EMULATE", None)
        else:
            os.environ["EMBER_CUDA_EMULATE"] = before


def _check_cuda_mode(model: Any, path: str, emulate: bool) -> None:
    """A CUDA model runs on a GPU, or in the emulator with ``--emulate``; without either,
    say so before running anything."""
    is_cuda = str(model.target).startswith("cuda")
    if emulate and not is_cuda:
        raise ArgumentError(f"--emulate applies to CUDA models; {path} is for {model.target}")
    if not is_cuda or emulate:
        return
    from ember.codegen_cuda.device import _probe

    devices, reason = _probe()
    if not devices:
        raise DeviceError(
            f"{path} is compiled for CUDA and there is no usable GPU here ({reason}); "
            "add --emulate to run it in the SIMT emulator on the CPU (slow)"
        )


def _run_and_report(model: Any, feeds: dict[str, Any], ns: argparse.Namespace) -> None:
    import numpy as np

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
        how = " (in the emulator: says nothing about a GPU)" if ns.emulate else ""
        print(f"latency: median {t['median'] * 1e3:.3f} ms, min {t['min'] * 1e3:.3f} ms{how}")


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
        from ember.artifact import read_archive

        manifest, _ = read_archive(path)
        with _emulator(True):  # runs nothing: no GPU image need fit this machine's device
            graph = _load_any(path).graph
        print(f"{path}: a compiled Ember model for {manifest['target']}")
        _print_cuda_section(manifest.get("cuda"))
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
