"""Cancellation frees the server's work, as Triton's L0_request_cancellation checks for Triton.

A gRPC call cancelled by its client, or a REST client that closes its connection, while the
request waits (in the batch queue, or for a thread) is not run: it leaves the queue, and its
thread is free for the next request. A request the model had started finishes and its answer is
dropped. Each is counted in `graphserve_cancelled_requests_total{protocol, stage}`.

Real servers on loopback, the official stubs (GrpcClient) and real sockets; the model is TF
Serving's half_plus_two (y = 0.5 x + 2) behind a runner that counts the rows it is given and can
hold its runs at a gate, so that requests pile up where a test wants them.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from graphserve.core import client
from graphserve.core.batchingparams import BatchingParameters
from graphserve.core.httpclient import HttpConnection
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.batching import BatchingRunner
from graphserve.serving.registry import Servable
from graphserve.serving.runner import Runner
from graphserve.serving.runners import GraphRunner

MODEL = "hp2"
METRICS = "/monitoring/prometheus/metrics"
PREDICT = client.rest_path(MODEL, "predict")
LONG = 60_000_000  # µs: batches in these tests run because they are full, never by timeout
FRONT_ENDS = ["threads", "asyncio"]


@pytest.fixture(scope="module")
def hp2(tmp_path_factory: pytest.TempPathFactory) -> GraphRunner:
    from tests.savedmodels import write_half_plus_two

    base: Path = tmp_path_factory.mktemp("cancel") / MODEL
    return GraphRunner(write_half_plus_two(base / "1"))


class Counting(Runner):
    """Wraps a runner: counts the runs and rows it is given, and holds each run while `gate` is
    closed (set: open)."""

    def __init__(self, runner: Runner, gate: threading.Event | None = None) -> None:
        self.runner = runner
        self.kind = runner.kind
        self.signatures = runner.signatures
        self.gate = gate
        self.runs = 0
        self.rows = 0
        self._lock = threading.Lock()

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock:
            self.runs += 1
            self.rows += len(inputs["x"])
        if self.gate is not None:
            assert self.gate.wait(30), "the test never opened the gate"
        return self.runner.run(signature, inputs)


@dataclass
class Served:
    server: ModelServer
    batcher: BatchingRunner | None

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.server.grpc_port}"

    @property
    def rest(self) -> str:
        return f"127.0.0.1:{self.server.rest_port}"

    @property
    def queued_rows(self) -> int:
        assert self.batcher is not None
        return self.batcher.stats.queued_rows


@contextmanager
def serving(
    runner: Runner,
    front_end: str = "threads",
    batching: BatchingParameters | None = None,
    **options: Any,
) -> Iterator[Served]:
    """A server of `runner` as model hp2 version 1 (behind a batcher with `batching`), gRPC on
    `front_end`, REST and metrics on, `options` as ServerOptions takes them."""
    batcher = BatchingRunner(runner, batching) if batching is not None else None
    registry = ModelRegistry()
    registry.add(Servable(MODEL, 1, batcher or runner))
    settings = ServerOptions(
        grpc_port=0,
        rest_port=0,
        grpc_asyncio=front_end == "asyncio",
        metrics_path=METRICS,
        **options,
    )
    server = ModelServer(registry, settings).start()
    try:
        yield Served(server, batcher)
    finally:
        server.stop(grace=1.0)
        if batcher is not None:
            batcher.close()


def _params(**given: Any) -> BatchingParameters:
    return BatchingParameters(
        **{"max_batch_size": 4, "batch_timeout_micros": LONG, "num_batch_threads": 1, **given}
    )


def _grpc_request(values: list[float]) -> Any:
    return client.predict_request(MODEL, {"x": np.array(values, np.float32)})


def _answer(values: list[float]) -> np.ndarray:
    return np.array(values, np.float32) * np.float32(0.5) + np.float32(2)  # as the model does


def _assert_grpc_answer(response: Any, values: list[float]) -> None:
    got = client.predict_outputs(response)["y"]
    np.testing.assert_allclose(got, _answer(values), rtol=1e-6, atol=1e-6)


def _rest_request(values: list[float]) -> bytes:
    body = json.dumps({"instances": values}).encode()
    return (
        f"POST {PREDICT} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _assert_rest_answer(status: int, body: bytes, values: list[float]) -> None:
    assert status == 200, body
    got = json.loads(body)["predictions"]
    np.testing.assert_allclose(got, _answer(values), rtol=1e-6, atol=1e-6)


def _rest_predict(address: str, values: list[float]) -> None:
    connection = HttpConnection(address, timeout=30)
    try:
        _assert_rest_answer(*connection.send(_rest_request(values)), values)
    finally:
        connection.close()


def _sent_and_left(address: str, values: list[float]) -> socket.socket:
    """A REST predict sent on a connection of its own, whose answer is not read: close the
    socket to leave."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(_rest_request(values))
    return sock


def _until(condition: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _metrics(served: Served) -> dict[str, list[Any]]:
    """The server's metrics, scraped over HTTP: samples by family."""
    connection = HttpConnection(served.rest, timeout=30)
    try:
        reply = connection.request("GET", METRICS, None, {})
    finally:
        connection.close()
    assert reply.status == 200, reply.body
    families = text_string_to_metric_families(reply.body.decode())
    return {family.name: family.samples for family in families}


def _total(samples: list[Any], name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


def _cancelled(metrics: dict[str, list[Any]], **labels: str) -> float:
    samples = metrics.get("graphserve_cancelled_requests", [])
    return _total(samples, "graphserve_cancelled_requests_total", **labels)


def _requests(metrics: dict[str, list[Any]], **labels: str) -> float:
    return _total(metrics["graphserve_requests"], "graphserve_requests_total", **labels)


def _waiting_for_a_rest_thread(served: Served) -> int:
    return served.server._rest._http._app.pool.waiting  # type: ignore[union-attr]


# -- gRPC, in the batch queue --------------------------------------------------------------------


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_grpc_calls_cancelled_in_the_batch_queue_leave_it_unrun(
    hp2: GraphRunner, front_end: str
) -> None:
    """Three one-row calls wait for company in a batch of four; their clients cancel them. They
    leave the queue at once, a following request of four rows runs alone, and the three are
    counted where they were: in the queue."""
    counting = Counting(hp2)
    with (
        serving(counting, front_end, _params(), grpc_workers=8) as served,
        client.GrpcClient.connect(served.grpc) as stub,
    ):
        calls = [stub.method("Predict").future(_grpc_request([float(i)])) for i in range(3)]
        _until(lambda: served.queued_rows == 3, "the three calls to queue")
        assert all(call.cancel() for call in calls)
        _until(lambda: served.queued_rows == 0, "the cancelled calls to leave the queue")
        _assert_grpc_answer(stub.predict(_grpc_request([1, 2, 3, 4]), timeout=30), [1, 2, 3, 4])
        metrics = _metrics(served)
        assert served.batcher is not None
        stats = served.batcher.stats
    assert (counting.runs, counting.rows) == (1, 4)  # the following request alone
    assert (stats.batches, stats.rows, stats.cancelled) == (1, 4, 3)
    assert _cancelled(metrics, protocol="grpc", stage="queue") == 3
    assert _cancelled(metrics) == 3
    assert _requests(metrics, protocol="grpc", status="CANCELLED") == 3
    assert _requests(metrics, protocol="grpc", status="OK") == 1


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_grpc_calls_whose_deadline_passes_in_the_batch_queue_leave_it_at_once(
    hp2: GraphRunner, front_end: str
) -> None:
    """The same with a client timeout: gRPC ends the calls at their deadline, and they leave the
    queue then, not when their batch would have come up; counted as deadlines, not
    cancellations (DEADLINE_EXCEEDED, the batcher's expired)."""
    counting = Counting(hp2)
    with (
        serving(counting, front_end, _params(), grpc_workers=8) as served,
        client.GrpcClient.connect(served.grpc) as stub,
    ):
        calls = [
            stub.method("Predict").future(_grpc_request([float(i)]), timeout=0.5) for i in range(3)
        ]
        for call in calls:
            with pytest.raises(grpc.RpcError) as info:
                call.result()
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        _until(lambda: served.queued_rows == 0, "the expired calls to leave the queue")
        _assert_grpc_answer(stub.predict(_grpc_request([1, 2, 3, 4]), timeout=30), [1, 2, 3, 4])
        metrics = _metrics(served)
        assert served.batcher is not None
        stats = served.batcher.stats
    assert (counting.runs, counting.rows) == (1, 4)
    assert (stats.batches, stats.expired, stats.cancelled) == (1, 3, 0)
    assert _requests(metrics, protocol="grpc", status="DEADLINE_EXCEEDED") == 3
    assert _cancelled(metrics) == 0


# -- gRPC, waiting for a thread ------------------------------------------------------------------


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_a_grpc_call_cancelled_while_it_waits_for_a_thread_is_not_run(
    hp2: GraphRunner, front_end: str
) -> None:
    """Two gRPC threads, both held by calls the model holds; a third call waits for a thread (on
    the asyncio front end: for the model's executor, the same threads). Its client cancels it:
    once the threads are free, the model runs the first two, then the next request, never it."""
    gate = threading.Event()
    counting = Counting(hp2, gate)
    with (
        serving(counting, front_end, grpc_workers=2, max_concurrent_rpcs=3) as served,
        client.GrpcClient.connect(served.grpc) as stub,
    ):
        try:
            held = [stub.method("Predict").future(_grpc_request([v]), timeout=30) for v in (1, 2)]
            _until(lambda: counting.runs == 2, "both threads to be held")
            waiting = stub.method("Predict").future(_grpc_request([3.0]), timeout=30)
            # The limit refuses a fourth call only once the third is in: it waits for a thread.
            with pytest.raises(grpc.RpcError) as info:
                stub.predict(_grpc_request([4.0]), timeout=10)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert waiting.cancel()
            time.sleep(0.3)  # for the cancellation to reach the server before a thread frees
        finally:
            gate.set()
        for call, value in zip(held, (1.0, 2.0), strict=True):
            _assert_grpc_answer(call.result(), [value])
        _assert_grpc_answer(stub.predict(_grpc_request([5.0]), timeout=30), [5.0])
        metrics = _metrics(served)
    assert counting.runs == 3  # the two held and the next one: never the cancelled call
    assert _requests(metrics, protocol="grpc", status="OK") == 3
    # gRPC's threaded server drops a call cancelled before it has a thread without telling the
    # application: it is not counted there. The asyncio front end sees its coroutine cancelled
    # (and asyncio drops the executor job that had not started), but not whether a thread had
    # taken the job: it counts the call as running.
    cancelled = 1 if front_end == "asyncio" else 0
    assert _cancelled(metrics, protocol="grpc", stage="running") == cancelled
    assert _cancelled(metrics) == cancelled


# -- REST ----------------------------------------------------------------------------------------


def test_a_rest_client_that_leaves_while_its_request_waits_for_a_thread_is_not_run(
    hp2: GraphRunner,
) -> None:
    """One REST thread, held by a request the model holds; a second request waits for it, and
    its client closes the connection. Once the thread is free, the model runs the first request
    and the next one, never the second: it is counted as cancelled waiting for a thread."""
    gate = threading.Event()
    counting = Counting(hp2, gate)
    with serving(counting, rest_workers=1) as served:
        try:
            held = _sent_and_left(served.rest, [1.0])
            _until(lambda: counting.runs == 1, "the thread to be held")
            left = _sent_and_left(served.rest, [2.0])
            _until(lambda: _waiting_for_a_rest_thread(served) == 1, "the request to wait")
            left.close()
            time.sleep(0.3)  # for the server to see the connection closed
        finally:
            gate.set()
        reply = HttpConnection.over(held)
        _assert_rest_answer(*reply.send(b""), [1.0])
        held.close()
        _rest_predict(served.rest, [3.0])
        metrics = _metrics(served)
    assert (counting.runs, counting.rows) == (2, 2)  # the first and the next, never the second
    assert _cancelled(metrics, protocol="rest", stage="pool") == 1
    assert _cancelled(metrics) == 1
    assert _requests(metrics, protocol="rest", status="CANCELLED") == 1
    assert _requests(metrics, protocol="rest", status="OK") == 2


def test_rest_clients_that_leave_while_their_requests_wait_in_the_batch_queue_are_not_run(
    hp2: GraphRunner,
) -> None:
    """Three one-row REST requests wait for company in a batch of four; their clients close
    their connections. None is run: a following request of four rows runs alone, the queue is
    empty after it, and the three are counted as cancelled in the queue."""
    counting = Counting(hp2)
    with serving(counting, batching=_params(), rest_workers=8) as served:
        left = [_sent_and_left(served.rest, [float(i)]) for i in range(3)]
        _until(lambda: served.queued_rows == 3, "the three requests to queue")
        for sock in left:
            sock.close()
        time.sleep(0.3)  # for the server to see the connections closed
        _rest_predict(served.rest, [1.0, 2.0, 3.0, 4.0])
        _until(lambda: served.queued_rows == 0, "the queue to empty")
        metrics = _metrics(served)
        assert served.batcher is not None
        stats = served.batcher.stats
    assert (counting.runs, counting.rows) == (1, 4)
    assert (stats.rows, stats.cancelled) == (4, 3)
    assert _cancelled(metrics, protocol="rest", stage="queue") == 3
    assert _cancelled(metrics) == 3
    assert _requests(metrics, protocol="rest", status="CANCELLED") == 3
    assert _requests(metrics, protocol="rest", status="OK") == 1


# -- under load ----------------------------------------------------------------------------------


@dataclass
class Tally:
    sent: int = 0
    answered: int = 0  # answers read and checked
    left: int = 0  # calls cancelled, connections closed before the answer was read


def _grpc_user(address: str, seed: int, until: float, tally: Tally, wrong: list[str]) -> None:
    rng = random.Random(seed)
    with client.GrpcClient.connect(address) as stub:
        predict = stub.method("Predict")
        while time.monotonic() < until:
            values = [round(rng.uniform(-100, 100), 2)]
            call = predict.future(_grpc_request(values), timeout=30)
            tally.sent += 1
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0, 0.01))
                if call.cancel():
                    tally.left += 1
                    continue
            try:
                _assert_grpc_answer(call.result(), values)
                tally.answered += 1
            except Exception as exc:  # reported all at once, after the run
                wrong.append(f"gRPC {values}: {exc!r}")


def _rest_user(address: str, seed: int, until: float, tally: Tally, wrong: list[str]) -> None:
    rng = random.Random(seed)
    connection = HttpConnection(address, timeout=30)
    try:
        while time.monotonic() < until:
            values = [round(rng.uniform(-100, 100), 2)]
            tally.sent += 1
            if rng.random() < 0.5:
                sock = _sent_and_left(address, values)
                time.sleep(rng.uniform(0, 0.01))
                sock.close()
                tally.left += 1
                continue
            try:
                _assert_rest_answer(*connection.send(_rest_request(values)), values)
                tally.answered += 1
            except Exception as exc:  # reported all at once, after the run
                wrong.append(f"REST {values}: {exc!r}")
    finally:
        connection.close()


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_under_load_with_half_the_calls_cancelled_every_other_call_is_answered_right(
    hp2: GraphRunner, front_end: str
) -> None:
    """Eight clients (four gRPC, four REST) send one-row requests for a few seconds and give up
    on half of them at a random moment. The server stays up; every request not given up is
    answered right; the server's counts add up: what it answered and what it counted cancelled
    are at most what was sent (a call cancelled before it left the client never arrives); the
    model ran exactly the rows of the answered requests and of those cancelled while running; and
    at the end no request is queued or in flight."""
    counting = Counting(hp2)
    params = _params(max_batch_size=8, batch_timeout_micros=3_000, num_batch_threads=2)
    with serving(counting, front_end, params, grpc_workers=16, rest_workers=16) as served:
        until = time.monotonic() + 3.0
        tallies = [Tally() for _ in range(8)]
        wrong: list[str] = []
        users = [
            threading.Thread(
                target=_grpc_user if i < 4 else _rest_user,
                args=(served.grpc if i < 4 else served.rest, i, until, tallies[i], wrong),
            )
            for i in range(8)
        ]
        for user in users:
            user.start()
        for user in users:
            user.join(60)
        assert not any(user.is_alive() for user in users)
        _until(lambda: served.queued_rows == 0, "the queue to empty")
        _rest_predict(served.rest, [7.0])  # the server is still up
        metrics = _metrics(served)
        assert served.server.plane.drain(10.0), "a request is still in flight"
    sent = sum(t.sent for t in tallies)
    answered = sum(t.answered for t in tallies)
    left = sum(t.left for t in tallies)
    assert wrong == []
    assert sent == answered + left and left > 0 and answered > 0
    ok = _requests(metrics, status="OK") - 1  # less the check after the run
    cancelled = _requests(metrics, status="CANCELLED")
    assert _requests(metrics) == ok + 1 + cancelled  # no other outcome
    assert _cancelled(metrics) == cancelled  # every cancellation counted once, with its stage
    assert answered <= ok and ok + cancelled <= sent
    assert cancelled <= left
    # The model ran what was answered and what was cancelled while it ran (one row each), and
    # none of what was cancelled before: in the queue, or waiting for a thread.
    running = _cancelled(metrics, stage="running")
    assert counting.rows - 1 == ok + running
    assert _cancelled(metrics, stage="queue") > 0
