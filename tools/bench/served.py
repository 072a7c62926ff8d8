"""Served: each model behind every server, at concurrency 1 and under 16 clients.

For one exported model it starts, as child processes on free loopback ports:

    graph           `graphserve serve graph` on the SavedModel (defaults)
    eager           `graphserve serve eager` on the Python source (defaults)
    null            `graphserve serve null`: the same stack answering zeros, no model work — the
                    floor a served request cannot go below
    graph-batching  the graph server with TF Serving-style batching on (a parameters file)
    eager-batching  the eager server with the same batching
    peer            `python -m tools.bench.flask_peer`: Flask calling `model.predict`, what users
                    write first

and measures, with the same request bytes for all, p50/p99 at concurrency 1 over gRPC and REST
(interleaved rounds, see bench.timing) and throughput and p99 at 16 closed-loop clients with
batching off and on, for each runner, in alternating windows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphserve.core.batchingparams import BatchingParameters
from graphserve.core.processes import ServerProcess
from graphserve.core.processes import serve_args as core_serve_args
from graphserve.core.results import JsonResult
from tools.bench.clients import Load, closed_loop, grpc_caller, merge, rest_caller
from tools.bench.flask_peer import PeerProcess
from tools.bench.timing import Timing, interleave

__all__ = [
    "BATCHING",
    "BATCHING_PARAMETERS",
    "SERVER_KINDS",
    "Batching",
    "model_servers",
    "served_latency",
]

SERVER_KINDS = ("graph", "eager", "null", "graph-batching", "eager-batching", "peer")
LATENCY_ARMS = ("graph", "eager", "null")

# TF Serving's batching knobs for a CPU box, one set for every model (tools/bench/README.md has the
# sweep they come from). num_batch_threads: the cores (TF Serving's guide; its default here).
# max_batch_size 16: what 16 closed-loop clients can fill, no more. batch_timeout_micros 4000:
# after a batch returns, its 16 clients' next requests arrive within 1-2 ms; a batch thread
# takes an open batch once its timeout passes, so 1 ms ran the MLP in batches of 4-5 rows
# (slower than no batching) and 4 ms in batches of 15, while no request waits past 4 ms.
# max_enqueued_batches 16: never the limit at 16 clients.
BATCHING = BatchingParameters(max_batch_size=16, batch_timeout_micros=4000, max_enqueued_batches=16)
BATCHING_PARAMETERS = BATCHING.to_text()


def serve_args(kind: str, model_base_path: Path, source: str, work_dir: Path) -> list[str]:
    """The `graphserve serve` arguments of a server kind (peer excepted)."""
    if kind in ("graph", "eager", "null"):
        return core_serve_args(kind, model_base_path, source)
    if kind.endswith("-batching"):
        params = work_dir / "batching_parameters.txt"
        params.write_text(BATCHING_PARAMETERS)
        unbatched = serve_args(kind.removesuffix("-batching"), model_base_path, source, work_dir)
        return [*unbatched, "--enable-batching", "--batching-parameters-file", str(params)]
    raise ValueError(f"unknown server kind {kind!r}: expected one of {', '.join(SERVER_KINDS)}")


@contextmanager
def model_servers(
    model_name: str, model_base_path: Path, source: str, work_dir: Path, kinds: tuple[str, ...]
) -> Iterator[dict[str, ServerProcess]]:
    """Start every server kind at once (they load in parallel), yield them ready, stop them.
    Raises RuntimeError naming the server that did not start, with its log tail."""
    work_dir.mkdir(parents=True, exist_ok=True)
    processes: dict[str, ServerProcess] = {}
    for kind in kinds:
        log_path = work_dir / f"{model_name}-{kind}.log"
        if kind == "peer":
            processes[kind] = PeerProcess(source, model_name, log_path)
        else:
            args = [
                *serve_args(kind, model_base_path, source, work_dir),
                "--model-name",
                model_name,
            ]
            processes[kind] = ServerProcess.on_free_ports(args, model_name, log_path)
    try:
        with ThreadPoolExecutor(len(processes)) as pool:
            started = {kind: pool.submit(p.start) for kind, p in processes.items()}
            for kind, future in started.items():
                try:
                    future.result()
                except RuntimeError as exc:
                    raise RuntimeError(
                        f"the {kind} server for {model_name} did not start: {exc}"
                    ) from None
        yield processes
    finally:
        for process in processes.values():
            process.stop()


@dataclass(frozen=True)
class Requests:
    """One payload, encoded once for each protocol."""

    grpc: bytes
    rest_path: str
    rest_body: bytes


def encode_requests(model_name: str, payload: Mapping[str, np.ndarray]) -> Requests:
    from graphserve.core.client import rest_path
    from graphserve.loadtest.generator.payloads import grpc_request_bytes, rest_body

    return Requests(
        grpc=grpc_request_bytes(payload, model_name),
        rest_path=rest_path(model_name, "predict"),
        rest_body=rest_body(payload, columnar=False),
    )


def served_latency(
    servers: Mapping[str, ServerProcess], requests: Requests, *, budget_s: float
) -> dict[str, Timing]:
    """p50/p99 at concurrency 1 of every latency arm among `servers` over gRPC and REST, and
    the peer over REST, keyed `KIND/PROTOCOL`, all timed in interleaved rounds."""
    calls: dict[str, Callable[[], object]] = {}
    kinds = [kind for kind in LATENCY_ARMS if kind in servers]
    for kind in kinds:
        calls[f"{kind}/grpc"] = grpc_caller(servers[kind].grpc_address, requests.grpc)
    for kind in kinds:
        rest = str(servers[kind].rest_address)
        calls[f"{kind}/rest"] = rest_caller(rest, requests.rest_path, requests.rest_body)
    if "peer" in servers:
        peer = str(servers["peer"].rest_address)
        calls["peer/rest"] = rest_caller(peer, requests.rest_path, requests.rest_body)
    return interleave(calls, budget_s=budget_s)


@dataclass(frozen=True)
class Batching(JsonResult):
    """Closed-loop load with server-side batching off and on."""

    off: Load
    on: Load
    parameters: str


def batching_load(
    servers: Mapping[str, ServerProcess],
    requests: Requests,
    *,
    clients: int = 16,
    seconds: float = 8.0,
    windows: int = 10,
    runner: str = "graph",
) -> Batching:
    """`clients` closed-loop gRPC clients on the `runner` server with batching off and on
    (`runner`-batching), in `windows` alternating windows (off on on off ...) that share
    `seconds` in all. Short windows, many of them: the load other processes put on a shared
    machine changes within seconds, and swung a ratio from 0.96× to 1.38× between three
    10-second runs of 4 windows each."""
    arms = {"off": servers[runner].grpc_address, "on": servers[f"{runner}-batching"].grpc_address}
    loads: dict[str, list[Load]] = {"off": [], "on": []}
    order = ["off", "on"]
    for _ in range(windows // 2):
        for arm in order:
            make_call = functools.partial(grpc_caller, arms[arm], requests.grpc)
            loads[arm].append(closed_loop(make_call, clients=clients, seconds=seconds / windows))
        order.reverse()
    return Batching(off=merge(loads["off"]), on=merge(loads["on"]), parameters=BATCHING_PARAMETERS)


def server_kinds_json(servers: Mapping[str, ServerProcess]) -> dict[str, Any]:
    """What was started, for the results: command line and time to ready per server."""
    return {
        kind: {"command": process.args[1:], "ready_s": process.ready_s}
        for kind, process in servers.items()
    }
