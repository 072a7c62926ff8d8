"""Lean benchmark clients: one pre-encoded request, sent again and again, over gRPC or HTTP.

The client must cost as little as possible, or it dilutes every served ratio: requests are
encoded once (the same bytes for every server), gRPC goes through the client's raw method with
no (de)serializers, and HTTP keeps one connection alive (graphserve.core.httpclient's
HttpConnection, on a socket that blocks in the kernel, the request's bytes built once). The first
answer of each is decoded and checked, so a benchmark never times a server that answers with
errors.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from graphserve.core.client import JSON_HEADERS, GrpcClient, predict_outputs
from graphserve.core.httpclient import HttpConnection, blocking_connector
from graphserve.core.results import JsonResult, json_meta
from tools.bench.timing import Timing, timing_of

__all__ = ["BenchRequestError", "Load", "closed_loop", "grpc_caller", "merge", "rest_caller"]

_TIMEOUT_S = 60.0


class BenchRequestError(RuntimeError):
    """A server answered a benchmark request with an error (or not at all)."""


def grpc_caller(address: str, request: bytes) -> Callable[[], bytes]:
    """A callable that sends the serialized PredictRequest `request` to `address` and returns
    the reply's bytes. Raises BenchRequestError when the first reply is an error or empty."""
    client = GrpcClient.connect(address, timeout=_TIMEOUT_S)
    predict = client.raw("Predict")

    def call() -> bytes:
        return predict(request, timeout=_TIMEOUT_S)

    try:
        outputs = predict_outputs(call())
    except grpc.RpcError as exc:
        raise BenchRequestError(f"gRPC Predict to {address} failed: {exc.details()}") from None
    if not outputs:
        raise BenchRequestError(f"gRPC Predict to {address} answered without outputs")
    call.client = client  # type: ignore[attr-defined]  # kept open as long as the caller lives
    return call


def rest_caller(address: str, path: str, body: bytes) -> Callable[[], bytes]:
    """A callable that POSTs `body` to http://`address``path` on one kept-alive connection and
    returns the response body. Raises BenchRequestError on any status but 200."""
    connection = HttpConnection(
        address, _TIMEOUT_S, connect=blocking_connector(), keep_headers=False
    )
    request = connection.encode("POST", path, body, JSON_HEADERS)

    def call() -> bytes:
        status, answer = connection.send(request)
        if status != 200:
            raise BenchRequestError(
                f"POST http://{address}{path} answered {status}: {answer[:300]!r}"
            )
        return answer

    call()
    return call


@dataclass(frozen=True)
class Load(JsonResult):
    """A closed-loop run: throughput over the run, per-request latency, and errors."""

    clients: int
    seconds: float
    requests: int
    errors: int
    throughput: float
    latency: Timing
    # every timed request, for merging windows; not in the results
    samples_ms: np.ndarray = field(metadata=json_meta(skip=True))

    def summary(self) -> dict[str, Any]:
        """The window as the benchmarks' results record it: requests, errors, seconds, req/s,
        p50 and p99 (ms; None with no request answered)."""
        answered = self.requests > 0
        return {
            "requests": self.requests,
            "errors": self.errors,
            "seconds": self.seconds,
            "rps": self.throughput,
            "p50_ms": self.latency.p50_ms if answered else None,
            "p99_ms": self.latency.p99_ms if answered else None,
        }


def closed_loop(
    make_call: Callable[[], Callable[[], object]],
    *,
    clients: int,
    seconds: float,
    max_requests: int = 1_000_000,
) -> Load:
    """`clients` threads, each with its own caller from `make_call`, sending back to back for
    `seconds` (or until `max_requests` in all): the load of `clients` users with no think time.
    A failed request counts as an error and is not timed."""
    callers = [make_call() for _ in range(clients)]
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    stop = threading.Event()
    budget = threading.Semaphore(max_requests)
    start = threading.Barrier(clients + 1)

    ended = [0.0] * clients

    def user(i: int) -> None:
        call, times, clock = callers[i], latencies[i], time.perf_counter
        start.wait()
        while not stop.is_set() and budget.acquire(blocking=False):
            began = clock()
            try:
                call()
            except (grpc.RpcError, BenchRequestError, OSError):
                errors[i] += 1
                continue
            times.append((clock() - began) * 1000.0)
        ended[i] = clock()

    threads = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    deadline = began + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.perf_counter()))
    stop.set()
    for thread in threads:
        thread.join()
    samples = np.concatenate([np.asarray(t, dtype=np.float64) for t in latencies])
    return _load(clients, max(ended) - began, samples, sum(errors))


def merge(loads: list[Load]) -> Load:
    """Several windows of the same load as one: their requests over their summed time."""
    samples = np.concatenate([load.samples_ms for load in loads])
    seconds = sum(load.seconds for load in loads)
    return _load(loads[0].clients, seconds, samples, sum(load.errors for load in loads))


def _load(clients: int, seconds: float, samples: np.ndarray, errors: int) -> Load:
    return Load(
        clients=clients,
        seconds=seconds,
        requests=int(samples.size),
        errors=errors,
        throughput=samples.size / seconds if seconds > 0 else 0.0,
        latency=timing_of(samples),
        samples_ms=samples,
    )
