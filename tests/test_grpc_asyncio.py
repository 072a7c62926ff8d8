"""The asyncio gRPC front end (`--grpc-front-end asyncio`, the default with batching): a real
server on loopback, the official stubs. What differs from the threaded front end is tested
here: stopping with requests waiting in the batch queue, health's Watch stream, a client that
gives up while its request waits, and the choice of front end from the serve flags. The
request and error cases run against both front ends in test_bad_input and test_servers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from graphserve.core import client
from graphserve.core.batchingparams import BatchingParameters
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.batching import BatchingRunner
from graphserve.serving.registry import Servable
from graphserve.serving.runners import GraphRunner

X = np.random.default_rng(23).standard_normal((4, 784)).astype(np.float32)


@pytest.fixture(scope="module")
def graph(mlp_export: Any) -> GraphRunner:
    return GraphRunner(mlp_export.version_dir)


@pytest.fixture
def slow_batches(graph: GraphRunner) -> Iterator[tuple[ModelServer, BatchingRunner]]:
    """The MLP behind batches that wait half a second for company, on the asyncio front end."""
    runner = BatchingRunner(
        graph,
        BatchingParameters(max_batch_size=64, batch_timeout_micros=500_000, num_batch_threads=1),
    )
    registry = ModelRegistry()
    registry.add(Servable("mlp", 1, runner))
    options = ServerOptions(grpc_port=0, rest_port=None, grpc_workers=2, grpc_asyncio=True)
    server = ModelServer(registry, options).start()
    try:
        yield server, runner
    finally:
        server.stop(grace=1.0)
        runner.close()


def _request(rows: slice = slice(0, 1)) -> Any:
    return client.predict_request("mlp", {"images": X[rows]})


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_stop_lets_requests_waiting_for_their_batch_finish_and_tells_watchers(
    slow_batches: tuple[ModelServer, BatchingRunner], graph: GraphRunner
) -> None:
    server, runner = slow_batches
    expected = graph.run("serving_default", {"images": X[:2]})["logits"]
    address = f"127.0.0.1:{server.grpc_port}"
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        with client.GrpcClient.connect(address) as stub:
            waiting = [stub.method("Predict").future(_request(slice(i, i + 1))) for i in (0, 1)]
            _until(lambda: runner.stats.queued_rows == 2)
            # the grace outlasts the batch's wait; the Watch stream holds the server open to it
            stopping = threading.Thread(target=server.stop, kwargs={"grace": 3.0})
            stopping.start()
            # draining: health says so at once, while the two requests still wait
            assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(grpc.RpcError) as info:
                stub.predict(_request(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "shutting down" in info.value.details()
            answers = [client.predict_outputs(w.result(timeout=10))["logits"] for w in waiting]
        stopping.join(timeout=15)
        assert not stopping.is_alive()
    np.testing.assert_allclose(np.concatenate(answers), expected, rtol=1e-5, atol=1e-5)
    assert runner.stats.batches == 1  # the two waited together, as they would have


def test_a_client_that_gives_up_while_its_request_waits_leaves_the_server_serving(
    slow_batches: tuple[ModelServer, BatchingRunner], graph: GraphRunner
) -> None:
    """A deadline shorter than the batch's wait: the client hears DEADLINE_EXCEEDED, the
    request is dropped from its batch unrun, and the loop serves the next one."""
    server, runner = slow_batches
    with client.GrpcClient.connect(f"127.0.0.1:{server.grpc_port}") as stub:
        with pytest.raises(grpc.RpcError) as info:
            stub.predict(_request(), timeout=0.1)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        _until(lambda: runner.stats.expired == 1)
        assert runner.stats.batches == 0
        outputs = client.predict_outputs(stub.predict(_request(slice(1, 3)), timeout=30))
    expected = graph.run("serving_default", {"images": X[1:3]})["logits"]
    np.testing.assert_allclose(outputs["logits"], expected, rtol=1e-5, atol=1e-5)
    assert runner.stats.batches == 1


@pytest.mark.parametrize(
    ("front_end", "batching", "asyncio"),
    [
        ("auto", False, False),
        ("auto", True, True),
        ("threads", True, False),
        ("asyncio", False, True),
    ],
)
def test_auto_serves_grpc_on_asyncio_exactly_when_batching_is_on(
    mlp_export: Any, front_end: str, batching: bool, asyncio: bool
) -> None:
    """--grpc-front-end as the serve commands read it, and the server build_server makes of
    it (the importable API's default is the CLI's: asyncio with batching)."""
    from graphserve.serving.build import ServeConfig, build_server
    from graphserve.serving.config import ModelConfig
    from graphserve.serving.flags import ServeFlags

    flags = ServeFlags(grpc_front_end=front_end, enable_batching=batching)
    options = ServerOptions(grpc_port=0, rest_port=None, grpc_asyncio=flags.grpc_asyncio())
    config = ServeConfig(
        models=[ModelConfig("mlp", mlp_export.model_dir)],
        options=options,
        batching=flags.batching(),
    )
    server = build_server(config)
    try:
        assert server.options.grpc_asyncio is asyncio
    finally:
        server.stop()


def test_an_unknown_front_end_is_a_usage_error_naming_the_choices(mlp_export: Any) -> None:
    from typer.testing import CliRunner

    from graphserve.cli import app

    args = ["serve", "graph", "--model-base-path", str(mlp_export.model_dir)]
    result = CliRunner().invoke(app, [*args, "--grpc-front-end", "uvloop"])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "--grpc-front-end must be 'auto', 'threads' or 'asyncio', not 'uvloop'" in said
    assert "Traceback" not in result.output + result.stderr
