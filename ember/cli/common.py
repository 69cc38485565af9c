"""What the ``ember`` verbs share: the ``--threads`` flag, how a command ends when the reader
of its output goes away (``ember inspect m.onnx | head``), the ``--shape NAME=D0,D1,...``
syntax, loading a model file, and how tuning results read in a table.

:mod:`ember.cli` applies the first two around each verb; the verb modules call the rest.
It imports only what ``import ember`` already loads (the errors, the runtime, the tuner's
records), so ``ember --help`` stays fast; ``rich`` (the ``tune`` extra) loads when a table
is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import ember
from ember.errors import ArgumentError
from ember.runtime import set_num_threads
from ember.tuner.result import spread_text

THREADS_ENV = "EMBER_NUM_THREADS"
EMULATE_ENV = "EMBER_CUDA_EMULATE"
MESSAGE_WIDTH = 120  # characters of an error message a table shows
Overflow = Literal["fold", "crop", "ellipsis", "ignore"]  # what a table does with a long cell


def add_threads_argument(parser: Any) -> None:
    """Give a verb the ``--threads N`` flag that :func:`use_threads` applies."""
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help=f"CPU threads for parallel loops (default: ${THREADS_ENV}, else every core)",
    )


def use_threads(ns: argparse.Namespace) -> None:
    """Apply ``--threads N``: to this process (``set_num_threads``) and, through
    ``EMBER_NUM_THREADS``, to the processes it starts (the tuner's measuring workers).
    A count baked into a model's target (``-num-threads=N``) still wins for that model."""
    n = getattr(ns, "threads", None)
    if n is None:
        return
    if n < 1:
        raise ArgumentError(f"--threads must be a positive integer, got {n}")
    set_num_threads(n)
    os.environ[THREADS_ENV] = str(n)


def silence_broken_pipe() -> int:
    """After stdout's reader closed the pipe: point stdout at /dev/null, so the interpreter's
    final flush raises nothing, and give the shell's status for a SIGPIPE death (141)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (a test's capture)
        pass
    return 141


def verb_parser(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> Any:
    """The innermost subcommand parser ``ns`` was parsed by (``records show``'s for
    ``ember records show``), so an unknown flag is reported with that verb's usage."""
    chosen: Any = parser
    for dest in ("command", "records_command"):
        name = getattr(ns, dest, None)
        actions = [a for a in chosen._actions if isinstance(a, argparse._SubParsersAction)]
        if name is None or not actions:
            break
        chosen = actions[0].choices[name]
    return chosen


def parse_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    """``["x=1,3,224,224"]`` -> ``{"x": (1, 3, 224, 224)}`` (``--shape`` of ``compile`` and
    of ``tune MODEL``)."""
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


def load_any(path: str) -> Any:
    """A model from an ``.ember`` file, or an ``.onnx`` file compiled for this CPU."""
    if path.endswith(".onnx"):
        return ember.compile(path)
    return ember.load(path)


@contextlib.contextmanager
def emulated(on: bool) -> Iterator[None]:
    """CUDA kernels run in the SIMT emulator inside this block (``EMBER_CUDA_EMULATE``)."""
    before = os.environ.get(EMULATE_ENV)
    if on:
        os.environ[EMULATE_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(EMULATE_ENV, None)
        else:
            os.environ[EMULATE_ENV] = before


def ms_text(cost: float) -> str:
    """A cost in seconds as milliseconds, ``-`` for none (infinite)."""
    return "-" if math.isinf(cost) else f"{cost * 1e3:.4f} ms"


def error_examples(trials: list[Any]) -> dict[str, str]:
    """The first message of each error kind among ``trials``, one line each."""
    out: dict[str, str] = {}
    for t in trials:
        kind = t.result.error.value
        if not t.result.ok and kind not in out:
            lines = [line.strip() for line in t.result.message.splitlines() if line.strip()]
            out[kind] = (lines[0][:MESSAGE_WIDTH] if lines else "(no message)") + (
                f" (trial {t.number + 1})"
            )
    return out


def best_result(trials: list[Any]) -> Any:
    """The result of the fastest valid trial, or None."""
    ok = [t.result for t in trials if t.result.ok]
    return min(ok, key=lambda r: r.cost) if ok else None


def measured_text(result: Any) -> str:
    """A result's median cost, flagged when its repeats say the machine was busy."""
    if result is None or not result.ok:
        return "-" if result is None else f"- ({result.error.value})"
    if result.busy:
        return f"{ms_text(result.cost)} (busy machine: {spread_text(result.costs)}; re-measure)"
    return ms_text(result.cost)


def table(
    title: str, columns: Iterable[str] = (), overflow: Overflow = "fold", **options: Any
) -> Any:
    """A ``rich`` table with these columns; a long cell folds onto more lines unless
    ``overflow`` says otherwise (``"ellipsis"`` cuts it)."""
    # optional dependency: rich (the `tune` extra)
    from rich.table import Table

    out = Table(title=title, **options)
    for col in columns:
        out.add_column(col, overflow=overflow)
    return out


def console(width: int | None = None) -> Any:
    """A ``rich`` console on stdout (``width`` fixes the layout, else the terminal's)."""
    # optional dependency: rich (the `tune` extra)
    from rich.console import Console

    return Console(width=width)
