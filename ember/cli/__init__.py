"""The ``ember`` command line: :func:`main` builds the parser from one module per verb and
runs the chosen one.

The verbs, in the order ``ember --help`` lists them: ``demo`` (:mod:`ember.cli.demo`),
``info`` (:mod:`ember.cli.info`), ``compile``, ``run`` and ``inspect``
(:mod:`ember.cli.compile`, :mod:`ember.cli.run`, :mod:`ember.cli.inspect`), ``tune``
(:mod:`ember.cli.tune`, a model's tasks in :mod:`ember.cli.tune_model`), ``rpc-server``
(:mod:`ember.cli.rpc_server`), ``records`` (:mod:`ember.cli.records`) and ``bench``
(:mod:`ember.cli.bench`, Ember beside onnxruntime and the performance gate); what they share
is in :mod:`ember.cli.common`. Each verb module gives ``add_parser(sub)``, which registers
its subcommand and the function that runs it, and imports the compiler, onnx, optuna and
rich only when that function runs, so ``ember --help`` stays fast.

A user error prints its message and exits 1; ``EMBER_DEBUG=1`` shows the traceback. An
unknown flag is reported with the verb's usage; a closed stdout pipe (``| head``) ends the
command quietly with status 141; ``--threads`` applies before any verb runs.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import threading
import time
import traceback

from ember import config
from ember.cli.bench import add_parser as add_bench
from ember.cli.common import silence_broken_pipe, use_threads, verb_parser
from ember.cli.compile import add_parser as add_compile
from ember.cli.demo import add_parser as add_demo
from ember.cli.info import add_parser as add_info
from ember.cli.inspect import add_parser as add_inspect
from ember.cli.records import add_parser as add_records
from ember.cli.rpc_server import add_parser as add_rpc_server
from ember.cli.run import add_parser as add_run
from ember.cli.tune import add_parser as add_tune
from ember.errors import EmberError

VERBS = (
    add_demo,
    add_info,
    add_compile,
    add_run,
    add_inspect,
    add_tune,
    add_rpc_server,
    add_records,
    add_bench,
)
EXIT_GRACE_S = 5.0  # after Ctrl-C, how long the interpreter may take to exit


def main(argv: list[str] | None = None) -> int:
    """Run ``ember ARGS`` (``argv``, else the process's arguments) and return the exit status:
    0 done, 1 a user error (message on stderr), 130 interrupted, 141 stdout's reader left."""
    parser = argparse.ArgumentParser(prog="ember", description="Ember deep-learning compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    for add_verb in VERBS:
        add_verb(sub)
    ns, extra = parser.parse_known_args(argv)
    if extra:  # reported by the verb's own parser, with its usage, not the top level's
        verb_parser(parser, ns).error("unrecognized arguments: " + " ".join(extra))
    try:
        if ns.command != "demo":  # the demo reads its own --threads
            use_threads(ns)
        status = int(ns.fn(ns) or 0)
        sys.stdout.flush()  # a pipe's buffered output fails here, not at interpreter exit
        return status
    except BrokenPipeError:  # `ember inspect m.onnx | head`: the reader has what it wanted
        return silence_broken_pipe()
    except EmberError as e:
        if config.debug():
            traceback.print_exc()
        print(f"ember: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # one line: workers ignore SIGINT (ember.tuner.workers)
        hint = " (a tuning run continues with --resume)" if ns.command == "tune" else ""
        print(f"ember: interrupted{hint}", file=sys.stderr)
        return 130


def run() -> None:
    """The ``ember`` command's entry (and ``python -m ember.cli``): :func:`main`, then exit
    with its status. After Ctrl-C the exit is bounded: the interpreter joins the tuner's
    threads and worker processes as it exits, and should any of them hang there (once seen
    under CI load: ``ember tune --jobs 2`` still running 120 s after Ctrl-C), the process
    ends anyway after ``EXIT_GRACE_S`` seconds, with the stacks it was waiting on printed
    when ``EMBER_DEBUG`` is set. Only here, not in :func:`main`, which a host process may
    call and must not have ended for it."""
    status = main()
    if status == 130:
        _exit_within(EXIT_GRACE_S, status)
    sys.exit(status)


def _exit_within(seconds: float, status: int) -> None:
    def force() -> None:
        time.sleep(seconds)
        if config.debug():
            faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(status)

    threading.Thread(target=force, name="ember-exit-watchdog", daemon=True).start()
