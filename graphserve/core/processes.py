"""Servers as child processes: start one, wait until its model is AVAILABLE, stop it cleanly.

Used by `graphserve demo` and the end-to-end tests, which run servers the way a user does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "SERVER_KINDS",
    "ServerProcess",
    "export_flags",
    "free_port",
    "free_ports",
    "proc_status",
    "serve_args",
]


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free right now on `host` (loopback by default), and never handed
    out before in this process (see `free_ports`)."""
    return free_ports(1, host)[0]


# Every port free_ports handed out in this process, by host. The OS gives a port free again as
# soon as its picking socket closes, and a server takes it seconds later (after importing
# TensorFlow): two servers started side by side could be handed one port. A gRPC server binds
# with SO_REUSEPORT (grpcio's default, as TF Serving's), so the second would not fail to bind
# but share the port, each answering some connections. Never handing a port out twice here
# keeps the servers one process starts apart.
_HANDED_OUT: set[tuple[str, int]] = set()
_HANDING = threading.Lock()


def free_ports(count: int, host: str = "127.0.0.1") -> tuple[int, ...]:
    """`count` distinct ports the OS considers free right now on `host`, none handed out before
    by this process: each is bound while the next is picked, so the OS cannot hand out one
    twice, and all are released on return for the caller to bind. Free when picked, not later:
    another process may still take one (ServerProcess.start picks again)."""
    with _HANDING, contextlib.ExitStack() as held:
        ports: list[int] = []
        while len(ports) < count:
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
            if (host, port) not in _HANDED_OUT:  # else kept bound: the OS picks another
                ports.append(port)
        _HANDED_OUT.update((host, port) for port in ports)
    return tuple(ports)


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS (kB) and Threads of process `pid`, as /proc reports them (Linux): what the soak,
    swap and stress tests and `make soak` watch. OSError when the process is gone."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            fields[key] = int(value.split()[0])
    return fields


# The server kinds a load test or benchmark starts: kind -> `graphserve serve` arguments before
# the common ones ({base} is the model base path, {source} the Python model source).
SERVER_KINDS: dict[str, tuple[str, ...]] = {
    "graph": ("graph", "--model-base-path", "{base}"),
    "eager": ("eager", "{source}", "--mode", "call"),
    "eager-predict": ("eager", "{source}", "--mode", "predict"),
    "eager-function": ("eager", "{source}", "--mode", "function"),
    "null": ("null", "--model-base-path", "{base}"),
}


def serve_args(
    kind: str, base: Path | str, source: str | None, source_flags: Sequence[str] = ()
) -> list[str]:
    """The `graphserve serve` arguments of a server kind; `source_flags` (e.g. `export_flags`
    of the export's manifest) follow those of the kinds that run the source. ValueError for an
    unknown kind or a kind that needs a source when there is none."""
    if kind not in SERVER_KINDS:
        raise ValueError(f"unknown server kind {kind}: expected {', '.join(SERVER_KINDS)}")
    runs_source = "{source}" in SERVER_KINDS[kind]
    if source is None and runs_source:
        raise ValueError(f"server kind {kind} runs a Python model: give its SOURCE")
    args = [part.format(base=base, source=source) for part in SERVER_KINDS[kind]]
    return [*args, *source_flags] if runs_source else args


def export_flags(options: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The `graphserve serve eager` flags that give a Python model what its export was given, from
    the `options` of its manifest (graphserve.core.manifest): `--input` per recorded input,
    `--output-names`, `--signature-file` and `--samples-file` when recorded, `--input-range` per
    recorded range, `--import` per recorded module. Returns the flags and the recorded files
    that no longer exist, left out."""
    flags: list[str] = []
    for text in options.get("inputs") or ():
        flags += ["--input", str(text)]
    names = options.get("output_names") or ()
    if names:
        flags += ["--output-names", ",".join(map(str, names))]
    missing: list[str] = []
    for key, flag in (("signature_file", "--signature-file"), ("samples_file", "--samples-file")):
        path = options.get(key)
        if not path:
            continue
        if Path(path).is_file():
            flags += [flag, str(path)]
        else:
            missing.append(str(path))
    for text in options.get("input_ranges") or ():
        flags += ["--input-range", str(text)]
    for name in options.get("imports") or ():
        flags += ["--import", str(name)]
    return flags, missing


_BIND_ATTEMPTS = 4
# What a child that lost a port says: the OS's "[Errno 98] Address already in use" (REST),
# gRPC's "Failed to bind to address" (and, logged, "Address already in use").
_PORT_TAKEN = ("ddress already in use", "Failed to bind to address")


class _PortTaken(Exception):
    """A port this server was to bind was taken: the child exited saying so, or another server
    already answers there."""


class ServerProcess:
    """`graphserve serve ...` in a child process, its output to `log_path`."""

    def __init__(
        self,
        args: Sequence[str],
        grpc_address: str,
        model_name: str,
        log_path: Path,
        rest_address: str | None = None,
    ) -> None:
        self.args = [sys.executable, "-m", "graphserve", "serve", *args]
        self.grpc_address = grpc_address
        self.rest_address = rest_address
        self.model_name = model_name
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None  # from just before Popen to the first AVAILABLE
        # Set by on_free_ports: the host whose ports were picked, so a port taken by another
        # process between the pick and the child's bind can be picked again.
        self._picked_on: str | None = None
        self._base_args = self.args

    @classmethod
    def on_free_ports(
        cls, args: Sequence[str], model_name: str, log_path: Path, host: str = "127.0.0.1"
    ) -> ServerProcess:
        """`graphserve serve *args --grpc-port G --rest-port R` on two ports free on `host`.

        A port is free when picked, not when the child binds it seconds later (after importing
        TensorFlow): any socket, an outgoing connection's too, may take it in between. `start`
        picks again and restarts when the child exits because an address was in use."""
        process = cls(args, grpc_address="", model_name=model_name, log_path=log_path)
        process._picked_on = host
        process._pick_ports()
        return process

    def _pick_ports(self) -> None:
        host = self._picked_on
        assert host is not None
        grpc_port, rest_port = free_ports(2, host)
        self.args = [*self._base_args, "--grpc-port", str(grpc_port), "--rest-port", str(rest_port)]
        self.grpc_address = f"{host}:{grpc_port}"
        self.rest_address = f"{host}:{rest_port}"

    def start(self, timeout: float = 180.0, poll_s: float = 0.25) -> ServerProcess:
        """Start and block until `is_ready()` (GetModelStatus reports AVAILABLE; asked every
        `poll_s` s), then set `ready_s`; raises RuntimeError with the log tail if the process
        exits or is not ready within `timeout` s, and before starting when a server already
        answers at its address. Ports picked by `on_free_ports` and taken by another process
        before the child bound them are picked again, up to `_BIND_ATTEMPTS` starts in all;
        the error after the last says so, with every address tried."""
        tried: list[str] = []
        for attempt in range(1, _BIND_ATTEMPTS + 1):
            try:
                return self._start_once(timeout, poll_s)
            except _PortTaken as exc:
                if self._picked_on is None:  # ports the caller chose: not ours to change
                    raise RuntimeError(str(exc)) from None
                tried.append(f"gRPC {self.grpc_address} and REST {self.rest_address}")
                if attempt == _BIND_ATTEMPTS:
                    raise RuntimeError(
                        f"the server lost a port picked free at each of {attempt} starts, to "
                        f"another process between the pick and the bind (tried "
                        f"{'; '.join(tried)}); the last time: {exc}"
                    ) from None
                self._pick_ports()
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float, poll_s: float) -> ServerProcess:
        # One call before the clock starts: it imports gRPC and the stubs, and finds a server
        # already answering there (a port clash), which would make the child look ready at once.
        if self.is_ready():
            raise _PortTaken(f"a server at {self.address} already serves {self.model_name}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        self.ready_s = None
        started = time.perf_counter()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.args, stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if any(said in self.log_tail() for said in _PORT_TAKEN):
                    raise _PortTaken(f"server exited: a port was taken:\n{self.log_tail()}")
                raise RuntimeError(
                    f"server exited with code {self.process.returncode}:\n{self.log_tail()}"
                )
            if self.is_ready():
                self.ready_s = time.perf_counter() - started
                return self
            time.sleep(poll_s)
        self.stop()
        raise RuntimeError(f"server not ready after {timeout:.0f}s:\n{self.log_tail()}")

    @property
    def address(self) -> str:
        return self.grpc_address

    def is_ready(self) -> bool:
        """Whether the server answers and serves its model (subclasses may ask differently)."""
        return model_available(self.grpc_address, self.model_name)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (drain and exit), then SIGKILL if it has not exited within `timeout` s."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def model_available(grpc_address: str, model_name: str) -> bool:
    """True when the server at `grpc_address` reports a version of `model_name` AVAILABLE."""
    from graphserve.core.client import model_status

    return any(v.state == "AVAILABLE" for v in model_status(grpc_address, model_name))
