"""``ember compile model.onnx -o model.ember``: import, compile and export a model.

The model goes through :func:`ember.compile` (``--shape`` fixes symbolic input dims,
``--records`` takes the best tuned configs) and :meth:`export` writes one self-contained
``.ember`` file that ``ember run`` and :func:`ember.load` read; ``--arch`` picks the CUDA
architectures whose cubins it stores. Progress goes to stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import ember
from ember.backend import get_backend
from ember.cli.common import add_threads_argument, parse_shapes
from ember.errors import ArgumentError
from ember.target import Target


def add_parser(sub: Any) -> None:
    """Register ``ember compile``."""
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


def _progress(message: str) -> None:
    if sys.stderr.isatty():
        print(f"\r{message:<70}", end="", file=sys.stderr, flush=True)


def _cmd_compile(ns: argparse.Namespace) -> int:
    src = Path(ns.model)
    out = Path(ns.output) if ns.output else src.with_suffix(".ember")
    archs = [a.strip() for a in ns.arch.split(",") if a.strip()] if ns.arch else None
    if archs is not None and not get_backend(ns.target).gpu:
        raise ArgumentError(f"--arch applies to CUDA models only (--target cuda), not {ns.target}")
    target = ns.target
    if archs and not Target.parse(target).arch:
        from ember.codegen_cuda.resources import arch_number  # CUDA only

        # lowered for the oldest arch asked for, so that each stored cubin can run the
        # kernels (else the visible GPU's arch decides, and a newer one refuses the rest)
        target = f"{target} -arch={min(archs, key=arch_number)}"
    start = time.perf_counter()
    _progress(f"compiling {src.name} for {target} ...")
    model = ember.compile(str(src), target, ns.records, parse_shapes(ns.shape) or None)
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
