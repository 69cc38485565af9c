"""Remote measurement over RPyC: a token-checked server on the device host, a measurer here.

``ember tune --rpc host:port --token T`` on a machine without the device measures on
the host running ``ember rpc-server`` (:func:`serve`). The server runs each batch
through a :class:`~ember.tuner.measure.LocalMeasurer`, so remote candidates get the
same isolated builder and runner processes, deadlines and result checks as local
ones; one batch is measured at a time (two clients never time on one device at once).

RPyC carries the calls; only JSON strings cross the wire (no pickles, no remote
objects). Before RPyC's own handshake the client sends one line holding the token,
which the server compares with :func:`hmac.compare_digest` and answers with one byte;
a wrong token is refused before any RPyC request is read. The server listens on
loopback unless told otherwise; the token travels in clear text, so a server on
another address belongs behind an SSH tunnel or a private network.

:class:`RemoteMeasurer` is a measurer for ``tune(measure=...)``. A batch whose
connection drops gets ``crash`` results naming the server (they are recorded and
the search goes on); the next batch reconnects once, and a server that cannot be
reached raises :class:`~ember.errors.DeviceError`.
"""

from __future__ import annotations

import hmac
import json
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ember.errors import ArgumentError, ConfigError, DeviceError, EmberError
from ember.tuner.measure import LocalMeasurer, MeasureOption, task_spec
from ember.tuner.records import host_device_name
from ember.tuner.result import ErrorKind, MeasureResult
from ember.tuner.space import ConfigEntity
from ember.tuner.task import create_task

DEFAULT_PORT = 9190
HELLO = b"ember-rpc-1 "  # the first bytes a client sends, then the token and a newline
ACCEPTED, REFUSED = b"+", b"-"
MAX_TOKEN = 256
AUTH_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) -> (host, port)."""
    host, sep, port = str(text).rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ArgumentError(
            f"--rpc expects HOST:PORT (e.g. 127.0.0.1:{DEFAULT_PORT}), got {text!r}"
        )
    return host, int(port)


def _check_token(token: Any) -> str:
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN or "\n" in token:
        raise ArgumentError(
            f"the RPC token must be a non-empty string of at most {MAX_TOKEN} characters "
            "without newlines (pass --token or set EMBER_RPC_TOKEN)"
        )
    return token


def new_token() -> str:
    """A fresh random token for an RPC server, so only clients given it can connect."""
    return secrets.token_urlsafe(24)


# -- server ------------------------------------------------------------------------------


def token_authenticator(token: str) -> Any:
    """An RPyC authenticator accepting connections whose first line is ``HELLO + token``."""
    # optional dependency: rpyc
    from rpyc.utils.authenticators import AuthenticationError

    expected = HELLO + _check_token(token).encode() + b"\n"

    def authenticate(sock: socket.socket) -> tuple[socket.socket, None]:
        sock.settimeout(AUTH_TIMEOUT_S)
        line = b""
        try:
            while not line.endswith(b"\n") and len(line) <= len(HELLO) + MAX_TOKEN + 1:
                chunk = sock.recv(len(HELLO) + MAX_TOKEN + 2 - len(line))
                if not chunk:
                    break
                line += chunk
        except OSError as e:
            raise AuthenticationError(f"no token received: {e}") from e
        if not hmac.compare_digest(line, expected):
            try:
                sock.sendall(REFUSED)
            except OSError:
                pass
            raise AuthenticationError("wrong token")
        sock.sendall(ACCEPTED)
        sock.settimeout(None)
        return sock, None

    return authenticate


class _Measurers:
    """The server's measurers, one per measuring option, shared by all connections; the
    lock makes batches take turns on the device."""

    def __init__(self, make_task: Callable[[dict[str, Any]], Any]) -> None:
        self.make_task = make_task
        self.lock = threading.Lock()
        self.by_option: dict[str, LocalMeasurer] = {}
        self.tasks: dict[str, Any] = {}

    def measure(self, spec: dict[str, Any], configs: list[dict], option: dict) -> list[dict]:
        with self.lock:
            task = self._task(spec)
            key = json.dumps(option, sort_keys=True)
            if key not in self.by_option:
                self.by_option[key] = LocalMeasurer(MeasureOption(**option))
            entities = [ConfigEntity.from_json(c, task.config_space) for c in configs]
            results = self.by_option[key].measure(task, entities)
        return [_result_dict(r) for r in results]

    def _task(self, spec: dict[str, Any]) -> Any:
        if spec["key"] not in self.tasks:
            task = self.make_task(spec)
            if task.key != spec["key"]:
                raise ConfigError(
                    f"the server's task {spec['name']}{tuple(spec['args'])} has key {task.key}, "
                    f"the client's {spec['key']}: the two run different Ember or template versions"
                )
            self.tasks[spec["key"]] = task
        return self.tasks[spec["key"]]

    def close(self) -> None:
        with self.lock:
            for m in self.by_option.values():
                m.close()
            self.by_option.clear()


def _builtin_task(spec: dict[str, Any]) -> Any:
    """A task of a registered (or built-in) template; ``ember rpc-server`` passes a maker
    that also imports the template's module."""
    return create_task(spec["name"], tuple(spec["args"]), spec["target"], spec.get("fixed"))


def _result_dict(r: MeasureResult) -> dict[str, Any]:
    return {
        "costs": list(r.costs),
        "error": r.error.value,
        "message": r.message,
        "build_s": r.build_s,
        "run_s": r.run_s,
    }


def _service_class(measurers: _Measurers) -> type:
    # optional dependency: rpyc
    import rpyc

    class MeasureService(rpyc.Service):  # type: ignore[misc]
        """What a client may call: strings in, strings out."""

        def exposed_device_name(self) -> str:
            return host_device_name()

        def exposed_measure(self, spec: str, configs: str, option: str) -> str:
            try:
                out = measurers.measure(json.loads(spec), json.loads(configs), json.loads(option))
            except EmberError as e:
                return json.dumps({"error": f"{type(e).__name__}: {e}"})
            except Exception as e:  # a malformed request: answered, never raised across
                return json.dumps({"error": f"bad request: {type(e).__name__}: {e}"})
            return json.dumps({"results": out})

    return MeasureService


SAFE_CONFIG = {
    "allow_public_attrs": False,
    "allow_pickle": False,
    "allow_setattr": False,
    "allow_delattr": False,
    "allow_all_attrs": False,
    "import_custom_exceptions": False,
    "instantiate_custom_exceptions": False,
}


class RPCServer:
    """``ember rpc-server``: answers measuring requests of clients that know the token."""

    def __init__(
        self,
        token: str,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        make_task: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        # optional dependency: rpyc
        from rpyc.utils.server import ThreadedServer

        self.measurers = _Measurers(make_task or _builtin_task)
        try:
            self.server = ThreadedServer(
                _service_class(self.measurers),
                hostname=host,
                port=port,
                authenticator=token_authenticator(token),
                protocol_config=SAFE_CONFIG,
            )
        except OSError as e:
            raise ArgumentError(f"cannot listen on {host}:{port}: {e}") from e
        # Listen now, so clients may connect as soon as the address is printed (start()
        # listens again, which the OS allows).
        self.server.listener.listen(self.server.backlog)
        self.host = host
        self.port = int(self.server.listener.getsockname()[1])

    def serve_forever(self) -> None:
        try:
            self.server.start()
        finally:
            self.measurers.close()

    def close(self) -> None:
        self.server.close()
        self.measurers.close()


# -- client ------------------------------------------------------------------------------


class RemoteMeasurer:
    """Measures on an ``ember rpc-server`` host; a drop-in for :class:`LocalMeasurer`."""

    def __init__(self, address: str, token: str, option: MeasureOption | None = None) -> None:
        self.host, self.port = parse_address(address)
        self.token = _check_token(token)
        self.option = option or MeasureOption()
        self.jobs = self.option.jobs
        self.restarts = 0
        self._conn: Any = None
        self._device = ""
        self._connect()

    @property
    def where(self) -> str:
        return f"the RPC server at {self.host}:{self.port}"

    @property
    def device_name(self) -> str:
        return self._device

    def _connect(self) -> None:
        # optional dependency: rpyc
        import rpyc
        from rpyc.utils.factory import connect_stream

        try:
            stream = rpyc.SocketStream.connect(self.host, self.port, timeout=CONNECT_TIMEOUT_S)
            stream.sock.sendall(HELLO + self.token.encode() + b"\n")
            answer = stream.sock.recv(1)
        except OSError as e:
            raise DeviceError(f"cannot reach {self.where}: {e}") from e
        if answer != ACCEPTED:
            stream.close()
            raise DeviceError(f"{self.where} refused the token (check --token / EMBER_RPC_TOKEN)")
        stream.sock.settimeout(None)
        try:
            self._conn = connect_stream(stream, config=dict(SAFE_CONFIG))
            self._device = str(self._conn.root.device_name())
        except (EOFError, OSError) as e:
            raise DeviceError(f"{self.where} closed the connection: {e}") from e

    def _deadline(self, n: int) -> float:
        o = self.option
        return 5 * o.build_timeout + n * (o.build_timeout + o.timeout) + 60.0

    def measure(self, task: Any, configs: list[ConfigEntity]) -> list[MeasureResult]:
        if self._conn is None:
            self._connect()  # raises DeviceError when the server is gone for good
        spec = json.dumps(task_spec(task))
        payload = json.dumps([c.to_json() for c in configs])
        option = json.dumps(asdict(self.option))
        # optional dependency: rpyc
        import rpyc

        try:
            call = rpyc.timed(self._conn.root.measure, self._deadline(len(configs)))
            reply = json.loads(call(spec, payload, option).value)
        except (EOFError, OSError, TimeoutError) as e:  # TimeoutError: the deadline passed
            self._drop()
            self.restarts += 1
            text = f"lost {self.where} while measuring: {type(e).__name__}: {e}"
            return [MeasureResult.failed(ErrorKind.CRASH, text) for _ in configs]
        if "error" in reply:
            raise DeviceError(f"{self.where} cannot measure task {task.name}: {reply['error']}")
        return [
            MeasureResult(
                tuple(r["costs"]),
                ErrorKind(r["error"]),
                r["message"],
                r["build_s"],
                r["run_s"],
            )
            for r in reply["results"]
        ]

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a dead connection may fail to close; it is gone either way
                pass

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> RemoteMeasurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["DEFAULT_PORT", "RPCServer", "RemoteMeasurer", "new_token", "parse_address"]
