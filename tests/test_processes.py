"""Servers as child processes (graphserve.core.processes): the ports they are given, picked free,
and a start that loses them to another process. The child's own exit on a taken port, picked
again, is tests/test_nullserver.py's (a real server)."""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from graphserve.core import processes
from graphserve.core.processes import ServerProcess, free_port, free_ports


def test_free_ports_are_distinct_and_released() -> None:
    ports = free_ports(64)
    assert len(ports) == 64 and len(set(ports)) == 64
    with contextlib.ExitStack() as held:  # each can be bound now: none is held any more
        for port in ports:
            held.enter_context(socket.socket()).bind(("127.0.0.1", port))
    assert 0 < free_port() < 65536


def test_a_port_is_handed_out_once_per_process_though_the_os_frees_it_at_once() -> None:
    # Servers started side by side are given their ports before any binds one: without the
    # record, the OS hands a released port out again (the families test once got two gRPC
    # servers on one port, sharing it through SO_REUSEPORT; without it, 10 runs of 300 picks
    # here each repeated a port).
    picked = [free_port() for _ in range(300)]
    assert len(set(picked)) == 300
    assert not set(free_ports(8)) & set(picked)


def test_a_server_picks_two_distinct_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two picks one by one can return one port twice (the server then refuses "gRPC and REST
    cannot share port"); its two ports come from one pick."""
    monkeypatch.setattr(processes, "free_port", lambda host="127.0.0.1": 47655)
    server = ServerProcess.on_free_ports(["null"], "m", Path("unused.log"))
    assert server.grpc_address != server.rest_address
    assert server.args[-4:] == [
        "--grpc-port", server.grpc_address.rsplit(":", 1)[1],
        "--rest-port", str(server.rest_address).rsplit(":", 1)[1],
    ]  # fmt: skip


class _Sleeper(ServerProcess):
    """A stand-in child (a sleeping Python) that another server already answers for at its
    first `taken` picks, and that is ready once started on ports nobody else serves."""

    def __init__(self, args: Sequence[str], grpc_address: str, model_name: str, log_path: Path):
        super().__init__(args, grpc_address, model_name, log_path)
        self.args = self._base_args = [sys.executable, "-c", "import time; time.sleep(60)"]
        self.taken = 0
        self.asked: list[str] = []

    def is_ready(self) -> bool:
        self.asked.append(self.grpc_address)
        if self.process is None:  # before its child: is someone else answering there?
            return len(self.asked) <= self.taken
        return True


def test_a_start_whose_ports_are_taken_picks_new_ones(tmp_path: Path) -> None:
    server = _Sleeper.on_free_ports([], "m", tmp_path / "server.log")
    assert isinstance(server, _Sleeper)
    server.taken = 2
    with server:
        assert server.process is not None and server.process.poll() is None
        first, second, third = server.asked[:3]
        assert len({first, second, third}) == 3  # new ports at each start
        assert server.grpc_address == third
    assert server.process.poll() is not None


def test_a_start_that_loses_its_ports_every_time_says_why(tmp_path: Path) -> None:
    server = _Sleeper.on_free_ports([], "m", tmp_path / "server.log")
    assert isinstance(server, _Sleeper)
    server.taken = 100
    with pytest.raises(RuntimeError) as failed:
        server.start()
    message = str(failed.value)
    attempts = processes._BIND_ATTEMPTS
    assert f"lost a port picked free at each of {attempts} starts" in message
    assert message.count("gRPC 127.0.0.1:") == attempts  # every address tried, named
    assert "already serves m" in message  # and what happened the last time
    assert server.process is None  # no child started on a port someone else serves


def test_ports_the_caller_chose_are_not_changed(tmp_path: Path) -> None:
    server = _Sleeper(["null"], "127.0.0.1:1", "m", tmp_path / "server.log")
    server.taken = 1
    with pytest.raises(RuntimeError, match=r"^a server at 127.0.0.1:1 already serves m$"):
        server.start()
    assert server.asked == ["127.0.0.1:1"]
