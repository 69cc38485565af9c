"""Remote measurement on loopback: a real ``ember rpc-server`` process measures a tuning
run of the CPU target; a wrong token is refused before any request; a server killed
mid-run turns the batch in flight into recorded errors and the run stops with a clear
error; ``--dry-run`` checks candidates without timing; a CUDA target without a GPU
points at ``--rpc`` and ``--dry-run``."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from ember.cli import main
from ember.errors import ArgumentError, DeviceError
from ember.tuner import MeasureOption, create_task, read_records, tune
from ember.tuner.rpc import HELLO, RemoteMeasurer, parse_address

TOKEN = "t0ken-for-tests"


class Server:
    def __init__(self) -> None:
        cmd = [sys.executable, "-m", "ember.cli", "rpc-server", "--port", "0", "--token", TOKEN]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        line = self.proc.stdout.readline()
        assert "listening on 127.0.0.1:" in line, line
        self.address = line.split()[-1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stdout.close()


@pytest.fixture
def server():
    srv = Server()
    yield srv
    srv.stop()


OPTION = MeasureOption(number=3, repeat=2, timeout=20.0)


def test_tuning_through_the_server(server, tmp_path):
    task = create_task("matmul.llvm", args=(33, 17, 20, "float32"))
    log = tmp_path / "remote.jsonl"
    with RemoteMeasurer(server.address, TOKEN, OPTION) as remote:
        assert remote.device_name  # the server's CPU model
        result = tune(task, n_trials=4, records=log, measure=remote, seed=1, retime_rounds=0)
    assert len(result.trials) == 4 and result.errors == {}
    recs = read_records(log)
    assert len(recs) == 4 and all(r.ok and len(r.costs) == 2 and r.cost > 0 for r in recs)
    assert all(r.task_key == task.key for r in recs)


def test_a_wrong_token_is_refused_and_the_server_goes_on(server):
    host, port = parse_address(server.address)
    with pytest.raises(DeviceError, match="refused the token"):
        RemoteMeasurer(server.address, "not-the-token", OPTION)
    with socket.create_connection((host, port), timeout=10) as raw:  # no RPyC, no token
        raw.sendall(HELLO + b"x" * 300 + b"\n")
        assert raw.recv(1) in (b"-", b"")
    with RemoteMeasurer(server.address, TOKEN, OPTION) as remote:
        assert remote.device_name


def test_a_server_killed_mid_run_gives_recorded_errors_then_a_clear_error(server, tmp_path):
    task = create_task("matmul.llvm", args=(16, 24, 8, "float32"))
    log = tmp_path / "killed.jsonl"

    def kill_after_two(state, trial):
        if trial is not None and state.measured == 2:
            server.stop()

    with RemoteMeasurer(server.address, TOKEN, OPTION) as remote:
        with pytest.raises(DeviceError, match="cannot reach the RPC server at 127.0.0.1"):
            tune(task, n_trials=6, records=log, measure=remote, on_trial=kill_after_two)
    recs = read_records(log)
    assert [r.error for r in recs[:2]] == ["ok", "ok"]
    assert recs[2].error == "crash" and "lost the RPC server" in recs[2].message
    assert len(recs) == 3


def test_address_and_token_checks(server):
    for bad in ("localhost", "host:", ":9190", "h:99999", "h:x"):
        with pytest.raises(ArgumentError, match="HOST:PORT"):
            parse_address(bad)
    with pytest.raises(ArgumentError, match="token"):
        RemoteMeasurer(server.address, "", OPTION)
    with pytest.raises(DeviceError, match="cannot reach"):
        RemoteMeasurer("127.0.0.1:1", TOKEN, OPTION)


def test_cli_tunes_through_the_server(server, tmp_path, capsys, monkeypatch):
    log = tmp_path / "cli.jsonl"
    argv = ["tune", "--op", "matmul", "--shape", "24,16,8", "--trials", "3", "--log", str(log)]
    argv += ["--retime-rounds", "0"]  # one record a trial (a re-timed pick would add six)
    monkeypatch.setenv("EMBER_RPC_TOKEN", TOKEN)
    assert main([*argv, "--rpc", server.address]) == 0
    assert "tuning summary" in capsys.readouterr().out
    assert len(read_records(log)) == 3
    monkeypatch.delenv("EMBER_RPC_TOKEN")
    assert main([*argv, "--rpc", server.address]) == 1
    assert "--rpc needs the server's token" in capsys.readouterr().err
    assert main([*argv, "--rpc", server.address, "--token", "nope"]) == 1
    assert "refused the token" in capsys.readouterr().err


def test_cuda_without_a_gpu_offers_rpc_and_dry_run(capsys, monkeypatch):
    from ember.codegen_cuda import device

    monkeypatch.setattr(device, "device_available", lambda: False)
    assert main(["tune", "--op", "matmul", "--shape", "64,64,64", "--target", "cuda"]) == 1
    err = capsys.readouterr().err
    assert "no CUDA device on this machine" in err and "--rpc" in err and "--dry-run" in err


def test_dry_run_checks_cpu_candidates_without_timing(capsys):
    argv = ["tune", "--op", "matmul", "--shape", "19,23,11", "--trials", "3", "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "checked 3 config(s): ok 3" in out and "no timing" in out


@pytest.mark.nvrtc
def test_dry_run_builds_and_emulates_cuda_candidates():
    pytest.importorskip("cuda.bindings.nvrtc")
    from ember.tuner.dryrun import dry_run

    task = create_task("matmul.cuda", args=(16, 16, 8, "float32"), target="cuda -arch=sm_80")
    result = dry_run(task, 3, MeasureOption(timeout=120.0), seed=0)
    assert len(result.configs) == 3 and not result.failures, result.failures
    ok = [r for r in result.results if r.error.value == "ok"]
    assert ok and all(r.costs == () and "dry run" in r.message for r in ok)


def test_dry_run_reports_wrong_results(tmp_path):
    """The dry run's check is real: a template computing the wrong answer fails it."""
    from ember.tuner.dryrun import dry_run
    from tests.tuner import templates

    task = create_task("fault.llvm", args=(16,))
    space = task.config_space
    configs = [space.from_choices({"mode": templates.MODES.index(m)}) for m in ("ok", "wrong")]
    from ember.tuner import LocalMeasurer

    with LocalMeasurer(MeasureOption(dry_run=True, timeout=5.0)) as m:
        results = m.measure(task, configs)
    assert [r.error.value for r in results] == ["ok", "wrong_result"]
    assert dry_run(task, 1, MeasureOption(timeout=5.0)).counts == {"ok": 1}


def test_a_task_the_server_sees_differently_is_a_clear_error(server):
    """Client and server disagreeing on a task's key (other Ember or template versions)
    get a DeviceError naming both keys, not a wrong measurement."""
    from types import SimpleNamespace

    task = create_task("matmul.llvm", args=(8, 8, 8, "float32"))
    fake = SimpleNamespace(
        template=task.template, name=task.name, args=task.args, target=task.target, key="0" * 20
    )
    cfg = task.config_space.get(0)
    with RemoteMeasurer(server.address, TOKEN, OPTION) as remote:
        with pytest.raises(DeviceError, match="different Ember or template versions"):
            remote.measure(fake, [cfg])
        assert remote.measure(task, [cfg])[0].ok  # the connection is still good
