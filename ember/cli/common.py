"""What every ``ember`` verb shares: the ``--threads`` flag and how a command ends when the
reader of its output goes away (``ember inspect m.onnx | head``).

``ember/cli.py`` applies these around each verb; ``model_cli`` and ``tune_cli`` add the flag
to their parsers. It imports nothing of Ember at module level but the errors.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ember.errors import ArgumentError

THREADS_ENV = "EMBER_NUM_THREADS"


def add_threads_argument(parser: Any) -> None:
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
    from ember.runtime import set_num_threads

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
