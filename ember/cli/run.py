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

from ember.cli_common import add_threads_argument
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
    c.add_argument(
        "--target",
        default="llvm",
        metavar="TARGET",
        help="where the code will run: 'llvm' (default) is this machine's CPU "
        "(-mcpu=native), whose file other CPUs may refuse to load; for a file meant for "
        "other machines, a portable x86-64 level: 'llvm -mcpu=x86-64-v3' (AVX2 and FMA: Intel "
        "Haswell, AMD Zen and newer), 'llvm -mcpu=x86-64-v2' (older) or 'llvm -mcpu=x86-64-v4' "
        "(AVX-512); 'cuda' (or 'cuda -arch=sm_80') for an NVIDIA GPU. Quote it in the shell",
    )
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
    add_threads_argument(c)
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
    r.add_argument(
        "--output", help="write the outputs to this file, in .npz form, under exactly this name"
    )
    r.add_argument("--bench", type=int, default=0, metavar="N", help="also time N runs")
    r.add_argument(
        "--emulate",
        action="store_true",
        help="run a CUDA model in the SIMT emulator on the CPU (slow; for machines without a GPU)",
    )
    r.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also time each kernel (fused group) over N runs and print a table",
    )
    add_threads_argument(r)
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
    _progress(f"compiling {src.name} for {ns.target} ...")
    model = ember.compile(str(src), ns.target, ns.records, parse_shapes(ns.shape) or None)
    _progress(f"writing {out} ...")
    model.export(out, archs=archs)
    if sys.stderr.isatty():
        print("\r" + " " * 70 + "\r", end="", file=sys.stderr)
    took = time.perf_counter() - start
    if hasattr(model, "symbols"):  # symbolic dims: kernels are compiled per size when run
        print(
            f"prepared {src} -> {out} with symbolic dims {model.symbols} (compiled per size on "
            f"first run; fix them with --shape to compile now), {took:.1f} s"
        )
    else:
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
            if name not in feeds:  # a symbolic dim (the batch) is 1
                shape = tuple(d if isinstance(d, int) else 1 for d in t.shape)
                feeds[name] = _random_array(rng, shape, t.dtype)
    return feeds


def _random_array(rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    import numpy as np

    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(dtype)


def _cmd_run(ns: argparse.Namespace) -> int:
    for flag, value in (("--bench", ns.bench), ("--profile", ns.profile)):
        if value < 0:
            raise ArgumentError(f"{flag} must be 0 or more, got {value}")
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

    outs = model.run(feeds)
    for name, arr in zip(model.output_names, outs):
        print(f"{name}: {arr.dtype}{list(arr.shape)}")
    if ns.output:
        path = write_outputs(ns.output, dict(zip(model.output_names, outs)))
        print(f"wrote {path}")
    if ns.bench:
        t = model.benchmark(feeds, number=ns.bench, repeat=3)
        how = " (in the emulator: says nothing about a GPU)" if ns.emulate else ""
        print(f"latency: median {t['median'] * 1e3:.3f} ms, min {t['min'] * 1e3:.3f} ms{how}")
    if ns.profile:
        print(model.profile(feeds, number=ns.profile))


def write_outputs(name: str, arrays: dict[str, Any]) -> Path:
    """Write ``arrays`` as an ``.npz`` archive to exactly ``name`` and return that path.

    ``np.savez`` given a name appends ``.npz`` when it is missing (``o2`` became ``o2.npz``,
    ``.`` became ``..npz``); writing through an open file keeps the name the user gave. A
    folder is refused before anything runs into it."""
    import numpy as np

    path = Path(name)
    if path.is_dir() or name.endswith(("/", "\\")):
        raise ArgumentError(f"--output {name!r} is a folder; name the .npz file to write")
    try:
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    except OSError as e:
        raise ArgumentError(f"--output: cannot write {name}: {e}") from e
    return path


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
        import json
        import zipfile

        with _emulator(True):  # runs nothing: no GPU image need fit this machine's device
            model = _load_any(path)
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
    from ember.frontend.graph import Value

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
    import ember
    from ember.frontend.onnx_import.importer import load_model
    from ember.graph.dynamic_model import symbolic_source

    source = symbolic_source(load_model(path), None)
    if source is None:
        graph = ember.frontend.from_onnx(path)
        return graph, graph.inputs, graph.outputs
    symbols = {d for v in source.inputs for d in v.type.shape if isinstance(d, str)}
    graph = source.specialize({s: 1 for s in symbols})
    return graph, source.inputs, source.outputs
