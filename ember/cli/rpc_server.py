"""``ember rpc-server``: serve tuning measurements on this host for a remote ``ember tune``.

``ember rpc-server --token T`` serves measurements here (:class:`ember.tuner.rpc.RPCServer`,
loopback unless ``--host`` says otherwise); ``ember tune --rpc HOST:PORT --token T``
measures there (:mod:`ember.cli.tune` reads the token through :func:`rpc_token`). The
server builds each candidate through :func:`ember.tune_worker.task_from_spec`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ember.errors import ArgumentError
from ember.tuner.rpc import DEFAULT_PORT, RPCServer, new_token

TOKEN_ENV = "EMBER_RPC_TOKEN"


def add_parser(sub: Any) -> None:
    """Register ``ember rpc-server``."""
    srv = sub.add_parser("rpc-server", help="measure tuning candidates for remote `ember tune`")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    srv.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    srv.add_argument("--token", default=None,
                     help=f"clients send it (default: ${TOKEN_ENV}, else new)")  # fmt: skip
    srv.set_defaults(fn=cmd_rpc_server)


def rpc_token(ns: argparse.Namespace) -> str | None:
    """The token ``--token`` gives, else ``$EMBER_RPC_TOKEN``, else None."""
    return ns.token or os.environ.get(TOKEN_ENV) or None


def cmd_rpc_server(ns: argparse.Namespace) -> int:
    """Serve until interrupted; a new token is made and printed when none was given."""
    if not 0 <= ns.port < 65536:
        raise ArgumentError(f"--port must be in [0, 65535], got {ns.port}")
    token = rpc_token(ns)
    if token is None:
        token = new_token()
        print(f"token: {token}", flush=True)
    # start-up cost: the builder (compiler driver, TIR) loads only when the server starts
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
