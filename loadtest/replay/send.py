"""Open loop: each request goes out at its time, whether or not the ones before it answered.

`send_schedule` runs up to `max_in_flight` OS threads. Each takes the next request of the
schedule, sleeps until its time, sends it with a blocking call (gRPC's, with the GIL released,
or an HttpConnection of its own over REST) and keeps the answer's bytes; decoding waits until
the load is over, so the threads only wait and write. When every thread is busy a request goes
out late, and the lateness is recorded, not hidden: a replay that cannot keep its schedule says
so (the share sent on time, lateness p50 and p99) beside the latencies, as a closed loop that
waits for answers before sending could never say (coordinated omission).

Python's switch interval is lowered while a replay runs (5 ms by default: a thread woken at its
time could wait that long for a thread decoding nothing in particular).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graphserve.core.client import JSON_HEADERS, GrpcClient, http_failure, rest_error_text
from graphserve.core.httpclient import HttpConnection
from graphserve.core.tls import ClientTls
from graphserve.loadtest.replay.requests import Prepared

__all__ = ["Outcome", "send_schedule"]

_START_DELAY_S = 0.2  # the threads start, connect and wait for the first time this long
_SWITCH_INTERVAL_S = 0.0005


@dataclass(slots=True)
class Outcome:
    """One request as sent: its place in the schedule, when it was due and when it went out
    (s after the start), how long its answer took, and the answer's bytes or the failure."""

    position: int
    due_s: float
    sent_s: float
    latency_ms: float
    answer: bytes | None
    error: str | None


Send = Callable[[Prepared], tuple[bytes | None, str | None]]


def _grpc_sender(client: GrpcClient, timeout_s: float) -> Callable[[], Send]:
    import grpc

    methods = {rpc: client.raw(rpc) for rpc in ("Predict", "Classify", "Regress", "MultiInference")}

    def opener() -> Send:
        def send(request: Prepared) -> tuple[bytes | None, str | None]:
            try:
                return methods[request.rpc](request.grpc, timeout=timeout_s), None
            except grpc.RpcError as exc:
                return None, client.error_text(exc)

        return send

    return opener


def _rest_sender(address: str, tls: ClientTls | None, timeout_s: float) -> Callable[[], Send]:
    def opener() -> Send:
        connection = HttpConnection(address, timeout_s, tls=tls)

        def send(request: Prepared) -> tuple[bytes | None, str | None]:
            assert request.rest_path is not None and request.rest_body is not None
            try:
                reply = connection.request("POST", request.rest_path, request.rest_body,
                                           JSON_HEADERS)  # fmt: skip
            except OSError as exc:
                return None, f"{type(exc).__name__}: {exc}"
            if reply.status != 200:
                return None, http_failure(reply.status, rest_error_text(reply.body))
            return reply.body, None

        return send

    return opener


def send_schedule(
    protocol: str,
    address: str,
    requests: Sequence[Prepared],
    due_s: Sequence[float],
    *,
    tls: ClientTls | None = None,
    max_in_flight: int = 32,
    timeout_s: float = 30.0,
) -> list[Outcome]:
    """Send `requests[i]` at `due_s[i]` seconds after the start, open loop, to `address` over
    `protocol` ("grpc" | "rest"); every outcome, in the schedule's order."""
    client = None
    if protocol == "grpc":
        client = GrpcClient.connect(address, tls=tls, timeout=timeout_s, max_message_bytes=-1)
        opener = _grpc_sender(client, timeout_s)
    else:
        opener = _rest_sender(address, tls, timeout_s)
    outcomes: list[Outcome | None] = [None] * len(requests)
    claim = threading.Lock()
    upcoming = iter(range(len(requests)))
    start = time.perf_counter() + _START_DELAY_S

    def run() -> None:
        send = opener()
        while True:
            with claim:
                position = next(upcoming, None)
            if position is None:
                return
            due = due_s[position]
            wait = start + due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            sent = time.perf_counter()
            answer, error = send(requests[position])
            took = time.perf_counter() - sent
            outcomes[position] = Outcome(position, due, sent - start, took * 1e3, answer, error)

    previous = sys.getswitchinterval()
    sys.setswitchinterval(_SWITCH_INTERVAL_S)
    try:
        threads = [
            threading.Thread(target=run, name=f"replay-{n}", daemon=True)
            for n in range(max(1, min(max_in_flight, len(requests))))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)
        if client is not None:
            client.close()
    return [o for o in outcomes if o is not None]
