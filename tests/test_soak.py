"""Soak: the graph and the eager server as child processes, driven with good and bad requests.

Each server runs as a user runs it (`graphserve serve graph|eager ... --metrics`, loopback,
free ports). One thread drives gRPC through the TF Serving stubs, another REST over keep-alive
connections; a fifth of the requests of each are bad in a way a real client gets wrong (wrong
shape or dtype, unknown input or model, bad JSON, strings for numbers, an empty body), because
error paths (exceptions with tracebacks, log records, metric labels) leak as often as the happy
path. After a warm-up, VmRSS and the thread count are read from /proc/PID/status after every
round. The server must answer every good request with the model's values (computed in this
process), every bad one with its documented status, keep its memory and its threads flat, and
keep the number of metric series bounded.

Bounded: WARMUP + ROUNDS * ROUND requests per server (15 to 30 s per server on two cores), each
with a timeout.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
import pytest
from tensorflow.core.framework import types_pb2

from graphserve.core import client
from graphserve.core.client import GrpcClient, RestClient
from graphserve.core.codec import array_to_proto
from graphserve.core.processes import ServerProcess, proc_status
from graphserve.model.examples import mlp

pytestmark = pytest.mark.slow

WARMUP = 4500  # requests before the first RSS sample (see below)
ROUND = 500  # requests per measured round, half gRPC, half REST; RSS is read after each
ROUNDS = 8
MEASURED = ROUND * ROUNDS
REQUEST_TIMEOUT_S = 20.0

# Memory. Measured here (2 cores): RSS climbs 6 to 9 MB over the first 3000 to 4000 requests
# (allocator arenas of the gRPC and HTTP threads filling up), then moves in a sawtooth of up to
# 2.5 MB peak to peak from one sample to the next, without a trend. So the warm-up is 4500
# requests, and growth is taken between the mean of the first three samples and the mean of the
# last three, which smooths the sawtooth to within ~0.5 MB. The two windows' centres are
# (ROUNDS - 2) * ROUND = 3000 requests apart: a leak of 1 KB per request (a third of one
# request's 784 floats) adds 3 MB between them. The bound, 1.5 MB, is half that leak and three
# times the noise.
MAX_RSS_GROWTH_KB = 1536
# Connections are reused; the server's threads must not grow with requests.
MAX_THREAD_GROWTH = 4
ATOL = 1e-5
MODEL = "mlp"


@dataclass
class SoakRun:
    arm: str
    rss_kb: list[int] = field(default_factory=list)  # after the warm-up, then after each round
    threads: list[int] = field(default_factory=list)
    good: int = 0
    bad: int = 0
    unexpected: list[str] = field(default_factory=list)
    model_series: set[str] = field(default_factory=set)  # model labels in the metrics
    seconds: float = 0.0


@dataclass(frozen=True)
class Case:
    x: np.ndarray
    expected: np.ndarray


def _cases() -> list[Case]:
    """A handful of inputs of batch 1 to 4 and what the model says for them in this process."""
    model = mlp.build()
    rng = np.random.default_rng(20261201)
    cases = []
    for batch in (1, 2, 3, 4, 1, 2, 3, 4):
        x = rng.standard_normal((batch, 784)).astype(np.float32)
        cases.append(Case(x, np.asarray(model(x))))
    return cases


# ---------------------------------------------------------------------------------------------
# gRPC


class GrpcDriver:
    """Predict over one channel; good requests cycle through the cases, bad ones through kinds."""

    BAD = ("wrong_shape", "bad_dtype", "unknown_input", "unknown_model", "short_content")

    def __init__(self, address: str, cases: list[Case], run: SoakRun) -> None:
        self.client = GrpcClient.connect(address, timeout=REQUEST_TIMEOUT_S)
        self.cases = cases
        self.run = run
        self.sent = 0

    def close(self) -> None:
        self.client.close()

    def drive(self, count: int) -> None:
        for _ in range(count):
            i = self.sent
            self.sent += 1
            if i % 5 == 4:
                self._bad(self.BAD[(i // 5) % len(self.BAD)], i)
            else:
                self._good(self.cases[i % len(self.cases)])

    def _request(self, name: str = MODEL) -> Any:
        return client.predict_request(name, {})

    def _good(self, case: Case) -> None:
        request = client.predict_request(MODEL, {"images": case.x})
        try:
            response = self.client.predict(request)
            got = client.predict_outputs(response)["logits"]
            np.testing.assert_allclose(got, case.expected, atol=ATOL)
        except (grpc.RpcError, AssertionError) as exc:
            self.run.unexpected.append(f"grpc good: {_brief(exc)}")
        self.run.good += 1

    def _bad(self, kind: str, i: int) -> None:
        x = self.cases[i % len(self.cases)].x
        expected = grpc.StatusCode.INVALID_ARGUMENT
        request = self._request()
        tensor = request.inputs["images"]
        if kind == "wrong_shape":
            tensor.CopyFrom(array_to_proto(x[:, :783]))
        elif kind == "bad_dtype":
            tensor.CopyFrom(array_to_proto(x.astype(np.float64)))
        elif kind == "unknown_input":
            del request.inputs["images"]
            request.inputs["pixels"].CopyFrom(array_to_proto(x))
        elif kind == "unknown_model":
            # A new name every time: a server that keeps anything per requested name grows.
            request = self._request(f"no-such-model-{i}")
            request.inputs["images"].CopyFrom(array_to_proto(x))
            expected = grpc.StatusCode.NOT_FOUND
        else:  # short_content
            tensor.dtype = types_pb2.DT_FLOAT
            tensor.tensor_shape.dim.add(size=x.shape[0])
            tensor.tensor_shape.dim.add(size=784)
            tensor.tensor_content = x.tobytes()[:-4]
        try:
            self.client.predict(request)
            self.run.unexpected.append(f"grpc {kind}: answered OK")
        except grpc.RpcError as exc:
            if exc.code() != expected:  # type: ignore[attr-defined]
                self.run.unexpected.append(f"grpc {kind}: {_brief(exc)}")
        self.run.bad += 1


# ---------------------------------------------------------------------------------------------
# REST


class RestDriver:
    """:predict over keep-alive connections, a new connection every RECONNECT requests."""

    BAD = ("bad_json", "wrong_shape", "strings", "unknown_model", "empty_body")
    RECONNECT = 100

    def __init__(self, address: str, cases: list[Case], run: SoakRun) -> None:
        self.client = RestClient(address, timeout=REQUEST_TIMEOUT_S)
        self.cases = cases
        self.run = run
        self.sent = 0

    def close(self) -> None:
        self.client.close()

    def drive(self, count: int) -> None:
        for _ in range(count):
            i = self.sent
            self.sent += 1
            if i % self.RECONNECT == 0:
                self.close()
            if i % 5 == 4:
                self._bad(self.BAD[(i // 5) % len(self.BAD)], i)
            else:
                self._good(self.cases[i % len(self.cases)], columnar=i % 2 == 1)

    def _post(self, path: str, body: bytes) -> tuple[int, Any]:
        reply = self.client.post(path, body)
        return reply.status, reply.json()

    def _good(self, case: Case, columnar: bool) -> None:
        key, answer = ("inputs", "outputs") if columnar else ("instances", "predictions")
        body = json.dumps({key: case.x.tolist()}).encode()
        try:
            status, payload = self._post(f"/v1/models/{MODEL}:predict", body)
            assert status == 200, f"status {status}: {payload}"
            np.testing.assert_allclose(
                np.asarray(payload[answer], dtype=np.float32), case.expected, atol=ATOL
            )
        except (OSError, http.client.HTTPException, ValueError, AssertionError) as exc:
            self.run.unexpected.append(f"rest good: {_brief(exc)}")
        self.run.good += 1

    def _bad(self, kind: str, i: int) -> None:
        x = self.cases[i % len(self.cases)].x
        path, expected = f"/v1/models/{MODEL}:predict", 400
        if kind == "bad_json":
            body = json.dumps({"instances": x.tolist()}).encode()[:-7]
        elif kind == "wrong_shape":
            body = json.dumps({"instances": x[:, :783].tolist()}).encode()
        elif kind == "strings":
            body = json.dumps({"instances": [[str(v) for v in row] for row in x]}).encode()
        elif kind == "unknown_model":
            path, expected = f"/v1/models/no-such-model-{i}:predict", 404
            body = json.dumps({"instances": x.tolist()}).encode()
        else:  # empty_body
            body = b""
        try:
            status, payload = self._post(path, body)
            ok = status == expected and isinstance(payload.get("error"), str)
            if not ok:
                self.run.unexpected.append(f"rest {kind}: status {status}: {str(payload)[:200]}")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            self.run.unexpected.append(f"rest {kind}: {_brief(exc)}")
        self.run.bad += 1


def _brief(exc: BaseException) -> str:
    if isinstance(exc, grpc.RpcError):
        return f"{exc.code().name}: {exc.details()}"  # type: ignore[attr-defined]
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _in_parallel(*jobs: Callable[[], None]) -> None:
    """Run the drivers side by side; re-raise the first exception one of them raised."""
    errors: list[BaseException] = []

    def guarded(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _metric_models(address: str) -> set[str]:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=REQUEST_TIMEOUT_S)
    try:
        conn.request("GET", "/monitoring/prometheus/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return set(re.findall(r'^graphserve_requests_total\{[^}]*model="([^"]*)"', text, re.M))


# ---------------------------------------------------------------------------------------------
# The soak, once per server; the tests below assert on its record.

ARGS = {
    "graph": lambda export: ["graph", "--model-base-path", str(export.model_dir)],
    "eager": lambda export: ["eager", "examples:mlp"],
}


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return _cases()


@pytest.fixture(scope="module", params=["graph", "eager"])
def soak(
    request: pytest.FixtureRequest,
    mlp_export: Any,
    cases: list[Case],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SoakRun]:
    arm = request.param
    server = ServerProcess.on_free_ports(
        [*ARGS[arm](mlp_export), "--model-name", MODEL, "--metrics"],
        MODEL,
        log_path=tmp_path_factory.mktemp(f"soak-{arm}") / "server.log",
    )
    run = SoakRun(arm)
    with server:
        assert server.process is not None and server.rest_address is not None
        pid = server.process.pid
        grpc_driver = GrpcDriver(server.grpc_address, cases, run)
        rest_driver = RestDriver(server.rest_address, cases, run)
        started = time.perf_counter()

        def drive_then_sample(requests: int) -> None:
            half = requests // 2
            _in_parallel(lambda: grpc_driver.drive(half), lambda: rest_driver.drive(half))
            time.sleep(0.2)  # let the last responses' buffers go back to the allocator
            status = proc_status(pid)
            run.rss_kb.append(status["VmRSS"])
            run.threads.append(status["Threads"])

        try:
            drive_then_sample(WARMUP)
            for _ in range(ROUNDS):
                drive_then_sample(ROUND)
            run.model_series = _metric_models(server.rest_address)
        finally:
            grpc_driver.close()
            rest_driver.close()
        run.seconds = time.perf_counter() - started
    print(
        f"\nsoak {arm}: {run.good} good + {run.bad} bad requests in {run.seconds:.1f}s; "
        f"VmRSS kB {run.rss_kb}; threads {run.threads}; metric models {len(run.model_series)}"
    )
    assert server.stop() == 0, server.log_tail()
    yield run


def test_soak_answers_every_request_as_documented(soak: SoakRun) -> None:
    assert soak.good + soak.bad == WARMUP + MEASURED
    assert soak.bad == (WARMUP + MEASURED) // 5
    assert not soak.unexpected, f"{len(soak.unexpected)} unexpected: {soak.unexpected[:10]}"


def test_soak_memory_stays_flat(soak: SoakRun) -> None:
    first, last = soak.rss_kb[:3], soak.rss_kb[-3:]
    growth = int(np.mean(last) - np.mean(first))
    apart = (ROUNDS - 2) * ROUND
    assert growth <= MAX_RSS_GROWTH_KB, (
        f"{soak.arm}: VmRSS grew {growth} kB over {apart} requests "
        f"({growth * 1024 / apart:.0f} bytes per request): {soak.rss_kb}"
    )


def test_soak_threads_stay_flat(soak: SoakRun) -> None:
    assert max(soak.threads) - soak.threads[0] <= MAX_THREAD_GROWTH, soak.threads


def test_soak_metric_series_do_not_grow_with_unknown_model_names(soak: SoakRun) -> None:
    """Requests for models the server does not have must not each create a metric series: a
    client (or a scanner) sending new names would grow the server's memory without bound."""
    assert len(soak.model_series) <= 2, (
        f"{soak.arm}: {len(soak.model_series)} model label values in graphserve_requests_total, "
        f"e.g. {sorted(soak.model_series)[:5]}"
    )
