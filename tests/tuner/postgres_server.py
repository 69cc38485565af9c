"""A throwaway PostgreSQL server on loopback for the shared-study tests.

It uses the server binaries of Debian's ``postgresql`` package (``.ci/run`` installs
it where missing). The cluster lives in a temporary directory and listens on
127.0.0.1 at a free port and on a Unix socket beside the data; it is stopped and
removed when the fixture ends. PostgreSQL refuses to run as root, so under root
the server runs as the ``postgres`` user the package creates.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def server_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None when PostgreSQL is absent."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(folder, "initdb")):
            return Path(folder)
    return None


def why_unavailable() -> str | None:
    """Why no server can be started here (None when one can)."""
    if server_binaries() is None:
        return "PostgreSQL server binaries not found (apt-get install postgresql)"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (pip install psycopg2-binary)"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser to start PostgreSQL as another user"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server; yields its SQLAlchemy URL (database ``postgres``, user ``ember``)."""
    bin_dir = server_binaries()
    assert bin_dir is not None, why_unavailable()
    root = Path(tempfile.mkdtemp(prefix="ember-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = _free_port()
    run = {"check": True, "capture_output": True, "timeout": 120}
    try:
        subprocess.run(
            _as_server_user(
                [str(bin_dir / "initdb"), "-D", str(data), "-U", "ember", "-A", "trust"]
            ),
            **run,
        )
        options = f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off"
        subprocess.run(
            _as_server_user(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-w",
                    "-t",
                    "60",
                    "-l",
                    str(root / "server.log"),
                    "start",
                ]
            ),
            **run,
        )
        try:
            yield f"postgresql+psycopg2://ember@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(
                _as_server_user(
                    [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
                ),
                capture_output=True,
                timeout=60,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
