"""``ember rpc-server`` and the measuring side of ``ember tune``: local, remote or dry.

``ember rpc-server --token T`` serves measurements on this host
(:class:`ember.tuner.rpc.RPCServer`, loopback unless ``--host`` says otherwise);
``ember tune --rpc HOST:PORT --token T`` measures there. :func:`measurer_for` picks the
measurer for ``ember tune``: remote with ``--rpc``, otherwise local, and refuses a
CUDA target on a machine without a GPU unless ``--dry-run`` asks only for builds and
emulator checks. Wired in by :mod:`ember.tune_cli`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ember.errors import ArgumentError, DeviceError

TOKEN_ENV = "EMBER_RPC_TOKEN"


def add_rpc_parser(sub: Any) -> None:
    from ember.tuner.rpc import DEFAULT_PORT

    srv = sub.add_parser("rpc-server", help="measure tuning candidates for remote `ember tune`")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    srv.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    srv.add_argument("--token", default=None,
                     help=f"clients send it (default: ${TOKEN_ENV}, else new)")  # fmt: skip
    srv.set_defaults(fn=cmd_rpc_server)


def _token(ns: argparse.Namespace) -> str | None:
    return ns.token or os.environ.get(TOKEN_ENV) or None


def cmd_rpc_server(ns: argparse.Namespace) -> int:
    from ember.tuner.rpc import RPCServer, new_token

    if not 0 <= ns.port < 65536:
        raise ArgumentError(f"--port must be in [0, 65535], got {ns.port}")
    token = _token(ns)
    if token is None:
        token = new_token()
        print(f"token: {token}", flush=True)
    from ember.tune_worker import task_from_spec

    server = RPCServer(token, ns.host, ns.port, make_task=task_from_spec)
    if ns.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            "warning: listening beyond loopback; the token is sent in clear text, so reach "
            "this port through an SSH tunnel or a private network",
            file=sys.stderr,
        )
    print(f"ember rpc-server listening on {server.host}:{server.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def measurer_for(ns: argparse.Namespace, task: Any, option: Any) -> tuple[Any, bool]:
    """The measurer ``ember tune`` uses, and whether the caller must close it."""
    from dataclasses import replace

    if ns.dry_run:
        option = replace(option, dry_run=True)
    if ns.rpc:
        from ember.tuner.rpc import RemoteMeasurer

        token = _token(ns)
        if token is None:
            raise ArgumentError(f"--rpc needs the server's token: pass --token or set {TOKEN_ENV}")
        return RemoteMeasurer(ns.rpc, token, option), True
    if task.target.kind == "cuda" and not ns.dry_run and not _gpu_here():
        raise DeviceError(
            "no CUDA device on this machine: run `ember rpc-server --token T` on a GPU host and "
            "pass --rpc HOST:PORT --token T to measure there, or pass --dry-run to build, "
            "NVRTC-compile and check every candidate on the emulator without timing"
        )
    from ember.tuner import LocalMeasurer

    return LocalMeasurer(option), True


def _gpu_here() -> bool:
    from ember.codegen_cuda.device import device_available

    return device_available()


def cmd_dry_run(ns: argparse.Namespace, task: Any, measure: Any) -> int:
    """Check ``--trials`` configs; exit 1 when any failed."""
    from rich.console import Console
    from rich.table import Table

    from ember.tuner.dryrun import dry_run

    result = dry_run(task, ns.trials, seed=ns.seed, measure=measure)
    table = Table(title=f"dry run of {task.name}{task.args} on {task.target} (no timing)")
    for col in ("config", "result", "message"):
        table.add_column(col)
    for cfg, r in zip(result.configs, result.results):
        message = r.message.strip().splitlines()[-1][:100] if r.message else ""
        table.add_row(str(cfg), r.error.value, message)
    Console().print(table)
    counts = ", ".join(f"{k} {n}" for k, n in sorted(result.counts.items()))
    print(f"checked {len(result.configs)} config(s): {counts}")
    return 1 if result.failures else 0
