"""The servers under test as child processes, and the ways to call them.

A peer's app runs in its own virtual environment and process group (its workers, Triton's
server and proxies are children of it); graphserve's own servers are `graphserve serve graph`,
batching off and on, as `make bench` starts them. For each: its start-up time (spawn to ready),
its pid (whose process tree tools/bench/measure.py reads), and one `Target` per route.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from graphserve.core.client import predict_outputs
from graphserve.core.httpclient import HttpConnection
from graphserve.core.processes import ServerProcess, free_ports
from tools.bench.clients import BenchRequestError, grpc_caller, rest_caller
from tools.bench.measure import alive, tree
from tools.bench.peers import v2grpc
from tools.bench.peers.base import Peer, Route
from tools.bench.peers.bodies import tfserving_decode, tfserving_encode

__all__ = ["Served", "Target", "peer_targets", "start_graphserve", "start_peer"]

APPS = Path(__file__).parent / "apps"
_TIMEOUT_S = 60.0
# TF Serving's batching as `make bench` runs it (tools/bench/served.py): batches close at 16 rows or
# 4 ms after their first request. Every peer that batches gets the same two numbers.
MAX_BATCH_SIZE = 16
BATCH_TIMEOUT_MS = 4.0


@dataclass
class Target:
    """One route of one server: how to make a caller (each load thread makes its own) and how
    to read the answer's output."""

    server: str  # "graphserve", "kserve", ...: whose
    config: str  # "batching off" / "batching on"
    route: Route
    make_call: Callable[[], Callable[[], bytes]]
    read: Callable[[bytes], np.ndarray]

    @property
    def key(self) -> str:
        on = "batching" if self.config == "batching on" else "plain"
        return f"{self.server}/{on}/{self.route.protocol}-{self.route.api}"


@dataclass
class Served:
    """A running server: its process, ports and what it took to start."""

    name: str  # the peer's name or "graphserve"
    title: str
    version: str
    config: str
    pid: int
    startup_s: float
    targets: list[Target] = field(default_factory=list)
    stop: Callable[[], object] = lambda: None
    info: dict[str, object] = field(default_factory=dict)
    log_path: Path | None = None


# ---------------------------------------------------------------------------------------------
# graphserve


def _tfserving_grpc_read(body: bytes) -> np.ndarray:
    (output,) = predict_outputs(body).values()
    return np.asarray(output, dtype=np.float32)


GRAPHSERVE_ROUTES = (
    Route("rest", "tfserving", "REST", "/v1/models/{name}:predict", tfserving_encode,
          tfserving_decode),
    Route("grpc", "tfserving", "gRPC"),
)  # fmt: skip


def start_graphserve(
    model_dir: Path, model_name: str, inputs: dict[str, np.ndarray], batching: bool, logs: Path
) -> Served:
    """`graphserve serve graph` on `model_dir` (BASE/NAME), batching off or on."""
    from graphserve.core.processes import serve_args as core_args
    from graphserve.loadtest.generator.payloads import grpc_request_bytes
    from tools.bench.served import serve_args

    kind = "graph-batching" if batching else "graph"
    args = serve_args(kind, model_dir, "", logs) if batching else core_args("graph", model_dir, "")
    log = logs / f"{model_name}-graphserve-{kind}.log"
    # Metrics on, as the peers have theirs by default; the batcher's counters give the batch
    # size it forms.
    args = [*args, "--model-name", model_name, "--metrics"]
    process = ServerProcess.on_free_ports(args, model_name, log)
    process.start()
    assert process.process is not None and process.ready_s is not None
    from importlib import metadata

    served = Served(
        "graphserve", "graphserve", metadata.version("graphserve"),
        "batching on" if batching else "batching off", process.process.pid, process.ready_s,
        stop=process.stop, log_path=log,
        info={"rest_address": str(process.rest_address), "grpc_address": process.grpc_address},
    )  # fmt: skip
    rest, grpc_route = GRAPHSERVE_ROUTES
    body, path = tfserving_encode(model_name, inputs), rest.path.format(name=model_name)
    request = grpc_request_bytes(inputs, model_name)
    served.targets = [
        Target("graphserve", served.config, rest,
               _rest_factory(str(process.rest_address), path, body), tfserving_decode),
        Target("graphserve", served.config, grpc_route,
               lambda: grpc_caller(process.grpc_address, request), _tfserving_grpc_read),
    ]  # fmt: skip
    return served


def _rest_factory(address: str, path: str, body: bytes) -> Callable[[], Callable[[], bytes]]:
    return lambda: rest_caller(address, path, body)


# ---------------------------------------------------------------------------------------------
# the peers


def _v2_grpc_caller(address: str, request: bytes) -> Callable[[], bytes]:
    channel = grpc.insecure_channel(
        address,
        options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
    )
    infer = channel.unary_unary(v2grpc.MODEL_INFER)

    def call() -> bytes:
        return bytes(infer(request, timeout=_TIMEOUT_S))

    try:
        call()
    except grpc.RpcError as exc:
        raise BenchRequestError(f"V2 ModelInfer to {address} failed: {exc.details()}") from None
    call.channel = channel  # type: ignore[attr-defined]  # kept open as long as the caller lives
    return call


def _healthy(address: str, path: str) -> bool:
    connection = HttpConnection(address, 1.0)
    try:
        return connection.request("GET", path, None, {}).status == 200
    except OSError:
        return False
    finally:
        connection.close()


def start_peer(
    peer: Peer,
    python: Path,
    version: str,
    model_dir: Path,
    model_name: str,
    inputs: dict[str, np.ndarray],
    batching: bool,
    logs: Path,
    timeout_s: float = 300.0,
) -> Served:
    """The peer's app on free loopback ports in a process group of its own; ready when its
    health URL answers 200. Raises RuntimeError with the log's tail when it exits or is not
    ready within `timeout_s`."""
    http_port, grpc_port = free_ports(2)
    grpc_port = grpc_port if peer.grpc else 0
    config = "batching on" if batching else "batching off"
    log = logs / f"{model_name}-{peer.name}-{'batching' if batching else 'plain'}.log"
    info_path = logs / f"{model_name}-{peer.name}-{'batching' if batching else 'plain'}.json"
    info_path.unlink(missing_ok=True)
    command = [
        str(python), str(APPS / peer.app), "--model-dir", str(model_dir), "--model-name",
        model_name, "--http-port", str(http_port), "--info", str(info_path),
    ]  # fmt: skip
    if peer.grpc:
        command += ["--grpc-port", str(grpc_port)]
    if batching:
        command += ["--max-batch-size", str(MAX_BATCH_SIZE)]
        command += ["--batch-timeout-ms", str(BATCH_TIMEOUT_MS)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    started = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            cwd=logs,
        )  # fmt: skip

    def stop() -> None:
        pids = tree(process.pid)  # BentoML's worker is in a session of its own (circus)
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(20)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # workers that outlived their parent
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)
        deadline = time.monotonic() + 10  # a killed process takes a moment to go
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)

    health = peer.health_path.format(name=model_name)
    deadline = time.monotonic() + timeout_s
    while not _healthy(f"127.0.0.1:{http_port}", health):
        if process.poll() is not None or time.monotonic() > deadline:
            stop()
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            why = f"exited with {process.returncode}" if process.returncode is not None else (
                f"not ready after {timeout_s:.0f} s")  # fmt: skip
            raise RuntimeError(f"{peer.title} ({config}) {why}:\n{tail}")
        time.sleep(0.1)
    startup_s = time.perf_counter() - started
    for _ in range(100):  # the app writes it once it serves: just before or after it is healthy
        if info_path.exists():
            break
        time.sleep(0.1)
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    served = Served(
        peer.name, peer.title, version, config, process.pid, startup_s, stop=stop, info=info,
        log_path=log,
    )  # fmt: skip
    served.info["http_port"] = http_port
    if peer.grpc:
        served.info["grpc_port"] = grpc_port
    served.targets = peer_targets(peer, served, model_name, inputs)
    return served


def peer_targets(
    peer: Peer, served: Served, model_name: str, inputs: dict[str, np.ndarray]
) -> list[Target]:
    """One target per route of a started peer, sending `inputs`."""
    targets = []
    for route in peer.routes:
        if route.protocol == "grpc":
            request = v2grpc.encode_request(model_name, inputs)
            make = _v2_factory(f"127.0.0.1:{served.info['grpc_port']}", request)
            targets.append(Target(peer.name, served.config, route, make, v2grpc.decode_response))
        else:
            assert route.encode is not None and route.decode is not None
            body = route.encode(model_name, inputs)
            path = route.path.format(name=model_name)
            make = _rest_factory(f"127.0.0.1:{served.info['http_port']}", path, body)
            targets.append(Target(peer.name, served.config, route, make, route.decode))
    return targets


def _v2_factory(address: str, request: bytes) -> Callable[[], Callable[[], bytes]]:
    return lambda: _v2_grpc_caller(address, request)
