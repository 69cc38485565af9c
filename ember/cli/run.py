"""``ember run model.ember``: run a compiled model on ``.npy`` inputs (or ``--random`` ones).

The outputs' names and shapes are printed and ``--output`` writes them to one ``.npz``
file; ``--bench N`` times N runs and ``--profile N`` times each kernel. An ``.onnx`` file
is compiled first. A CUDA model runs on a GPU, or with ``--emulate`` in the SIMT emulator
on the CPU; without either, ``run`` says so before running anything.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ember.backend import get_backend
from ember.cli.common import add_threads_argument, emulated, load_any
from ember.codegen_cuda import device
from ember.errors import ArgumentError, DeviceError


def add_parser(sub: Any) -> None:
    """Register ``ember run``."""
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


def _read_inputs(model: Any, items: list[str], random: bool) -> dict[str, Any]:
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
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(dtype)


def _cmd_run(ns: argparse.Namespace) -> int:
    for flag, value in (("--bench", ns.bench), ("--profile", ns.profile)):
        if value < 0:
            raise ArgumentError(f"{flag} must be 0 or more, got {value}")
    with emulated(ns.emulate):
        model = load_any(ns.model)
        _check_cuda_mode(model, ns.model, ns.emulate)
        feeds = _read_inputs(model, ns.input, ns.random)
        _run_and_report(model, feeds, ns)
    return 0


def _check_cuda_mode(model: Any, path: str, emulate: bool) -> None:
    """A CUDA model runs on a GPU, or in the emulator with ``--emulate``; without either,
    say so before running anything."""
    is_cuda = get_backend(model.target).gpu
    if emulate and not is_cuda:
        raise ArgumentError(f"--emulate applies to CUDA models; {path} is for {model.target}")
    if not is_cuda or emulate:
        return
    devices, reason = device._probe()
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
    path = Path(name)
    if path.is_dir() or name.endswith(("/", "\\")):
        raise ArgumentError(f"--output {name!r} is a folder; name the .npz file to write")
    try:
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    except OSError as e:
        raise ArgumentError(f"--output: cannot write {name}: {e}") from e
    return path
