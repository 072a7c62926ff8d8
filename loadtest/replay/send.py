"""Open loop: each request goes out at its time, whether or not the ones before it answered.

`send_schedule` sends each request at its time and keeps the answer's bytes; decoding waits
until the load is over, so the senders only wait and write. Over gRPC one thread sends with the
non-blocking call and the answers come back on callbacks; over REST up to `max_in_flight` OS
threads each take the next request, sleep until its time and send it on a keep-alive
connection of their own. When `max_in_flight` requests are already out, the next goes out
late, and the lateness is recorded, not hidden: a replay that cannot keep its schedule says so
(the share sent on time, lateness p50 and p99) beside the latencies, as a closed loop that waits
for answers before sending could never say (coordinated omission). Each send also notes how long
its thread waited for a CPU on the way (Linux's schedstat), so that a late request can be told
apart: every sender in flight (the server fell behind), no CPU free (the machine's cores were
busy, the server's among them), or neither (the replaying process itself).

Python's switch interval is lowered while a replay runs (5 ms by default: a thread woken at its
time could wait that long for a thread decoding nothing in particular), and its cyclic garbage
collector waits until the schedule is over (what exists before is frozen out of its reach): in a
process that holds a model, as a benchmark's or a script's does, a full collection took long
enough to send requests late. Nothing the send loop makes is cyclic; reference counting frees it.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from graphserve.core.client import JSON_HEADERS, GrpcClient, http_failure, rest_error_text
from graphserve.core.httpclient import HttpConnection
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.recorded import Prepared

__all__ = ["Outcome", "send_schedule"]

_START_DELAY_S = 0.05  # from the last thread connected to the first request
_SWITCH_INTERVAL_S = 0.0005


@dataclass(slots=True)
class Outcome:
    """One request as sent: its place in the schedule, when it was due and when it went out
    (s after the start), how long its answer took, the answer's bytes or the failure, and how
    long its sending thread waited for a CPU on its way to sending it (None: not known)."""

    position: int
    due_s: float
    sent_s: float
    latency_ms: float
    answer: bytes | None
    error: str | None
    cpu_wait_ms: float | None = None


class _RunQueue:
    """How long the calling thread has waited for a CPU, runnable and not running (ns, Linux's
    /proc/thread-self/schedstat, its second field; the kernel adds a wait when the thread gets
    its CPU): a late send whose thread waited so is the machine's cores being busy (the
    server's, on one machine), not the replay. None where there is no such file."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None

    def waited_ns(self) -> int | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 96, 0).split()[1])
        except (OSError, IndexError, ValueError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _waited_ms(before: int | None, after: int | None) -> float | None:
    return None if before is None or after is None else (after - before) / 1e6


Send = Callable[[Prepared], tuple[bytes | None, str | None]]


def _grpc_schedule(
    client: GrpcClient,
    requests: Sequence[Prepared],
    due_s: Sequence[float],
    max_in_flight: int,
    timeout_s: float,
) -> list[Outcome]:
    """gRPC: one thread sends each request at its time with the non-blocking call (grpc's C
    core carries it), and the answers come back on callbacks. Measured here at 500 req/s on the
    mlp: 99.8 % sent on time against 96.5 % from 32 threads each blocking in its call, whose
    wake-ups and GIL hand-offs cost more than the calls."""
    import grpc

    # the schedule starts on a connected channel (one that will not connect fails its requests)
    with contextlib.suppress(grpc.FutureTimeoutError):
        client.wait_until_connected(min(timeout_s, 5.0))
    methods: dict[str, Any] = {
        rpc: client.raw(rpc) for rpc in ("Predict", "Classify", "Regress", "MultiInference")
    }
    outcomes: list[Outcome | None] = [None] * len(requests)
    slots = threading.BoundedSemaphore(max_in_flight)
    finished = threading.Semaphore(0)
    start = time.perf_counter() + _START_DELAY_S

    def answered(future: grpc.Future, position: int, sent: float, waited: float | None) -> None:
        took = time.perf_counter() - sent
        error = future.exception()
        answer = None if error is not None else future.result()
        outcomes[position] = Outcome(
            position, due_s[position], sent - start, took * 1e3, answer,
            None if error is None else client.error_text(error), waited,
        )  # fmt: skip
        slots.release()
        finished.release()

    # The CPU wait from one send to the next: the call before, the sleep, a slot.
    run_queue = _RunQueue()
    last = run_queue.waited_ns()
    try:
        for position, request in enumerate(requests):
            wait = start + due_s[position] - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            slots.acquire()  # every slot in flight: this request goes out late, and says so
            sent = time.perf_counter()
            now = run_queue.waited_ns()
            waited, last = _waited_ms(last, now), now
            future = methods[request.rpc].future(request.grpc, timeout=timeout_s)
            future.add_done_callback(partial(answered, position=position, sent=sent, waited=waited))
    finally:
        run_queue.close()
    for _ in requests:
        finished.acquire()
    return [o for o in outcomes if o is not None]


def _rest_sender(
    address: str, tls: ClientTls | None, timeout_s: float, status_path: str
) -> Callable[[], Send]:
    def opener() -> Send:
        connection = HttpConnection(address, timeout_s, tls=tls)
        # each thread's connection open before the schedule starts: a GET of the model's status
        with contextlib.suppress(OSError):
            connection.request("GET", status_path, None, JSON_HEADERS)

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
    `protocol` ("grpc" | "rest"), at most `max_in_flight` at a time; every outcome, in the
    schedule's order."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(_SWITCH_INTERVAL_S)
    collecting = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        if protocol == "grpc":
            with GrpcClient.connect(
                address, tls=tls, timeout=timeout_s, max_message_bytes=-1
            ) as client:
                return _grpc_schedule(client, requests, due_s, max_in_flight, timeout_s)
        status = (requests[0].rest_path or "/v1/models/").partition(":")[0]
        opener = _rest_sender(address, tls, timeout_s, status)
        return _threads_schedule(opener, requests, due_s, max_in_flight)
    finally:
        sys.setswitchinterval(previous)
        gc.unfreeze()
        if collecting:
            gc.enable()


def _threads_schedule(
    opener: Callable[[], Send],
    requests: Sequence[Prepared],
    due_s: Sequence[float],
    max_in_flight: int,
) -> list[Outcome]:
    """REST: `max_in_flight` threads, each on its own keep-alive connection, each taking the
    next request, sleeping until its time and sending it with a blocking call."""
    outcomes: list[Outcome | None] = [None] * len(requests)
    claim = threading.Lock()
    upcoming = iter(range(len(requests)))
    count = max(1, min(max_in_flight, len(requests)))
    clock = [0.0]  # the start, set once every thread is connected (the barrier's action)

    def started() -> None:
        clock[0] = time.perf_counter() + _START_DELAY_S

    ready = threading.Barrier(count, action=started)

    def run() -> None:
        try:
            send = opener()
        finally:
            ready.wait()
        start = clock[0]
        run_queue = _RunQueue()  # the CPU wait from taking a request to sending it
        try:
            while True:
                with claim:
                    position = next(upcoming, None)
                if position is None:
                    return
                before = run_queue.waited_ns()
                due = due_s[position]
                wait = start + due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                sent = time.perf_counter()
                waited = _waited_ms(before, run_queue.waited_ns())
                answer, error = send(requests[position])
                took = time.perf_counter() - sent
                outcomes[position] = Outcome(
                    position, due, sent - start, took * 1e3, answer, error, waited
                )
        finally:
            run_queue.close()

    threads = [threading.Thread(target=run, name=f"replay-{n}", daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [o for o in outcomes if o is not None]
