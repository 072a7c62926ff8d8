"""Server-side batching: TF Serving's parameters file, and BatchingRunner around the real MLP."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from graphserve.core.codec import array_from_proto, array_to_proto
from graphserve.core.errors import FailedPrecondition, InvalidInput, Unavailable
from graphserve.serving.batching import (
    BatchingConfigError,
    BatchingParameters,
    BatchingRunner,
    load_batching_parameters,
)
from graphserve.serving.runner import Runner
from graphserve.serving.runners import GraphRunner

SIG = "serving_default"
X = np.random.default_rng(5).standard_normal((16, 784)).astype(np.float32)
LONG = 10_000_000  # 10 s: batches in these tests run because they are full, not by timeout


@pytest.fixture(scope="module")
def graph(mlp_export: Any) -> GraphRunner:
    return GraphRunner(mlp_export.version_dir)


@pytest.fixture(scope="module")
def unbatched(graph: GraphRunner) -> np.ndarray:
    """What the MLP answers for X with no batching in between."""
    return graph.run(SIG, {"images": X})["logits"]


class Recording(Runner):
    """Wraps a runner: records every batch it is given; can hold runs at a gate, or fail them."""

    def __init__(
        self,
        runner: Any,
        *,
        gate: threading.Event | None = None,
        error: Exception | None = None,
        extra: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
    ) -> None:
        self.runner = runner
        self.kind = runner.kind
        self.signatures = runner.signatures
        self.batches: list[dict[str, np.ndarray]] = []
        self.started = threading.Event()
        self.gate = gate
        self.error = error
        self.extra = extra

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.batches.append(inputs)
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(10), "the test never opened the gate"
        if self.error is not None:
            raise self.error
        outputs = self.runner.run(signature, inputs)
        return {**outputs, **self.extra(inputs)} if self.extra else outputs

    @property
    def sizes(self) -> list[int]:
        return [len(next(iter(b.values()))) for b in self.batches]


def _params(**given: Any) -> BatchingParameters:
    return BatchingParameters(**{"num_batch_threads": 1, **given})


def _in_threads(runner: BatchingRunner, requests: list[np.ndarray]) -> list[Future[Any]]:
    pool = ThreadPoolExecutor(len(requests))
    futures = [pool.submit(runner.run, SIG, {"images": x}) for x in requests]
    pool.shutdown(wait=False)
    return futures


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


# -- the parameters file -----------------------------------------------------------------------

TF_SERVING_FILE = """\
# batching.config, as passed to tensorflow_model_server --batching_parameters_file
max_batch_size { value: 32 }
batch_timeout_micros { value: 2000 }  # 2 ms
max_enqueued_batches { value: 4 }
num_batch_threads { value: 3 }
thread_pool_name { value: "mlp_batch_threads" }
allowed_batch_sizes: 8
allowed_batch_sizes: 16
allowed_batch_sizes: [24, 32]
pad_variable_length_inputs: true
"""
TF_SERVING_PARAMETERS = BatchingParameters(
    max_batch_size=32,
    batch_timeout_micros=2000,
    max_enqueued_batches=4,
    num_batch_threads=3,
    thread_pool_name="mlp_batch_threads",
    allowed_batch_sizes=(8, 16, 24, 32),
    pad_variable_length_inputs=True,
)  # what TF_SERVING_FILE says


def test_parses_a_tf_serving_batching_parameters_file(tmp_path: Path) -> None:
    path = tmp_path / "batching.config"
    path.write_text(TF_SERVING_FILE)
    assert load_batching_parameters(path) == TF_SERVING_PARAMETERS


def test_unset_fields_take_tf_serving_defaults(tmp_path: Path) -> None:
    path = tmp_path / "batching.config"
    path.write_text("# nothing set\n")
    params = load_batching_parameters(path)
    assert (params.max_batch_size, params.batch_timeout_micros, params.max_enqueued_batches) == (
        1000,
        0,
        10,
    )
    assert params.num_batch_threads >= 1
    assert params.thread_pool_name == "batch_threads"
    assert params.allowed_batch_sizes == ()
    assert not params.enable_large_batch_splitting and not params.pad_variable_length_inputs


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "max_batch_size { value: 8 }\nmax_batch { value: 8 }\n",
            r'2:1 : Message type "tensorflow.serving.BatchingParameters" has no field named '
            r'"max_batch"',
        ),
        ("max_batch_size: 32\n", r"1:17 : 'max_batch_size: 32': Expected \"\{\""),
        (
            "max_batch_size { value: 32 }\nallowed_batch_sizes: [8, 8, 32]\n",
            r"monotonically increasing; got \[8, 8, 32\]",
        ),
        (
            "max_batch_size { value: 32 }\nallowed_batch_sizes: [8, 16]\n",
            r"Last entry in allowed_batch_sizes must match max_batch_size; last entry was 16; "
            r"expected 32",
        ),
        ("num_batch_threads { value: 0 }\n", r"num_batch_threads must be positive; was 0"),
        (
            "max_batch_size { value: 8 }\nenable_large_batch_splitting { value: true }\n"
            "max_execution_batch_size { value: 16 }\n",
            r"max_execution_batch_size must be between 1 and max_batch_size \(8\); was 16",
        ),
    ],
)
def test_bad_files_fail_naming_the_file_and_the_problem(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "batching.config"
    path.write_text(text)
    with pytest.raises(BatchingConfigError, match=message) as caught:
        load_batching_parameters(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    "params",
    [
        BatchingParameters(max_batch_size=16, batch_timeout_micros=0, num_batch_threads=2),
        TF_SERVING_PARAMETERS,
        BatchingParameters(
            max_batch_size=64,
            max_enqueued_batches=1,
            num_batch_threads=1,
            enable_large_batch_splitting=True,
            max_execution_batch_size=16,
            thread_pool_name="",
        ),
    ],
    ids=["knobs", "padding", "splitting"],
)
def test_to_text_reads_back_as_equal_parameters(tmp_path: Path, params: BatchingParameters) -> None:
    path = tmp_path / "batching_parameters.txt"
    path.write_text(params.to_text())
    assert load_batching_parameters(path) == params


def test_to_text_writes_the_four_knobs_always_and_other_fields_only_when_not_default() -> None:
    text = BatchingParameters(
        max_batch_size=32, batch_timeout_micros=0, num_batch_threads=2, allowed_batch_sizes=(8, 32)
    ).to_text()
    assert text.splitlines() == [
        "max_batch_size { value: 32 }",
        "batch_timeout_micros { value: 0 }",  # 0 is written: text_format alone would write { }
        "max_enqueued_batches { value: 10 }",
        "num_batch_threads { value: 2 }",
        "allowed_batch_sizes: [8, 32]",
    ]
    splitting = BatchingParameters(
        max_batch_size=8, enable_large_batch_splitting=True, max_execution_batch_size=4
    ).to_text()
    assert "enable_large_batch_splitting { value: true }\n" in splitting
    assert "max_execution_batch_size { value: 4 }\n" in splitting
    assert "thread_pool_name" not in splitting and "pad_variable_length_inputs" not in splitting


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(BatchingConfigError, match="cannot read batching parameters file"):
        load_batching_parameters(tmp_path / "absent.config")


@pytest.mark.parametrize(
    "command",
    [["graph", "--model-base-path", "models/m"], ["eager", "examples:mlp", "--model-name", "m"]],
    ids=["graph", "eager"],
)
def test_serve_with_a_bad_batching_file_stops_at_start_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    from typer.testing import CliRunner

    from graphserve.cli import app

    path = tmp_path / "batching.config"
    path.write_text("max_batch_size { value: 8 }\nnum_batch_threads { value: 0 }\n")
    result = CliRunner().invoke(app, ["serve", *command, "--batching-parameters-file", str(path)])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())  # rich wraps long lines
    assert f"batching parameters file {path}: num_batch_threads must be positive" in said
    assert "Traceback" not in result.output + result.stderr


# -- batching the real MLP ---------------------------------------------------------------------


def test_concurrent_rows_share_runs_and_get_the_unbatched_answers(
    graph: GraphRunner, unbatched: np.ndarray
) -> None:
    inner = Recording(graph)
    with BatchingRunner(inner, _params(max_batch_size=8, batch_timeout_micros=LONG)) as runner:
        futures = _in_threads(runner, [X[i : i + 1] for i in range(16)])
        answers = [f.result(timeout=30)["logits"] for f in futures]
    for i, answer in enumerate(answers):
        assert answer.shape == (1, 10)
        np.testing.assert_allclose(answer, unbatched[i : i + 1], rtol=1e-5, atol=1e-5)
    assert inner.sizes == [8, 8]
    stats = runner.stats
    assert (stats.batches, stats.requests, stats.rows, stats.padding_rows) == (2, 16, 16, 0)


def test_coroutines_on_one_loop_share_a_batch_and_get_the_unbatched_answers(
    graph: GraphRunner, unbatched: np.ndarray
) -> None:
    """run_async: sixteen coroutines on one loop, no thread each, fill one batch of 16; the
    batch thread resumes them all with one call into the loop."""
    inner = Recording(graph)

    async def all_of_them() -> list[Any]:
        calls = [runner.run_async(SIG, {"images": X[i : i + 1]}) for i in range(16)]
        return await asyncio.gather(*calls)

    with BatchingRunner(inner, _params(max_batch_size=16, batch_timeout_micros=LONG)) as runner:
        answers = asyncio.run(all_of_them())
    for i, answer in enumerate(answers):
        np.testing.assert_allclose(answer["logits"], unbatched[i : i + 1], rtol=1e-5, atol=1e-5)
    assert inner.sizes == [16]


def test_a_request_whose_loop_closed_while_it_waited_does_not_stop_its_batch(
    graph: GraphRunner, unbatched: np.ndarray
) -> None:
    """A coroutine's loop stopped and closed under it (a server stopping) while its rows
    waited: the batch still runs, and answers the thread that shares it."""
    inner = Recording(graph)
    with BatchingRunner(inner, _params(max_batch_size=2, batch_timeout_micros=LONG)) as runner:
        loop = asyncio.new_event_loop()
        task = loop.create_task(runner.run_async(SIG, {"images": X[:1]}))
        loop.run_until_complete(asyncio.sleep(0))  # queued, awaiting its batch
        assert runner.stats.queued_rows == 1
        loop.close()  # the task still awaits: it will never run again
        answer = runner.run(SIG, {"images": X[1:2]})  # fills the batch
        np.testing.assert_allclose(answer["logits"], unbatched[1:2], rtol=1e-5, atol=1e-5)
        again = runner.run(SIG, {"images": X[2:4]})  # the batch thread lives on
    np.testing.assert_allclose(again["logits"], unbatched[2:4], rtol=1e-5, atol=1e-5)
    assert inner.sizes == [2, 2]
    assert not task.done()


def test_a_cancelled_coroutine_takes_its_rows_out_of_the_queue(
    graph: GraphRunner, unbatched: np.ndarray
) -> None:
    """A coroutine cancelled while its rows wait (its client left: the asyncio front end
    cancels the call's coroutine) takes them out of the queue unrun; the next request opens a
    batch of its own."""
    inner = Recording(graph)
    with BatchingRunner(inner, _params(max_batch_size=2, batch_timeout_micros=LONG)) as runner:
        loop = asyncio.new_event_loop()
        task = loop.create_task(runner.run_async(SIG, {"images": X[:1]}))
        loop.run_until_complete(asyncio.sleep(0))  # queued, awaiting its batch
        assert runner.stats.queued_rows == 1
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        loop.close()
        assert task.cancelled()
        assert (runner.stats.queued_rows, runner.stats.cancelled) == (0, 1)
        answer = runner.run(SIG, {"images": X[1:3]})  # a batch of its own, full
    np.testing.assert_allclose(answer["logits"], unbatched[1:3], rtol=1e-5, atol=1e-5)
    assert inner.sizes == [2]


def test_a_batch_is_padded_with_a_real_row_to_the_next_allowed_size(
    graph: GraphRunner, unbatched: np.ndarray
) -> None:
    inner = Recording(graph)
    with BatchingRunner(inner, _params(max_batch_size=8, allowed_batch_sizes=[4, 8])) as runner:
        answer = runner.run(SIG, {"images": X[:3]})["logits"]
    assert inner.sizes == [4]
    np.testing.assert_array_equal(inner.batches[0]["images"][3], X[0])
    assert answer.shape == (3, 10)
    np.testing.assert_allclose(answer, unbatched[:3], rtol=1e-5, atol=1e-5)
    assert (runner.stats.rows, runner.stats.padding_rows) == (3, 1)


def test_the_timeout_runs_a_lone_request(graph: GraphRunner, unbatched: np.ndarray) -> None:
    with BatchingRunner(graph, _params(max_batch_size=32, batch_timeout_micros=100_000)) as runner:
        started = time.monotonic()
        answer = runner.run(SIG, {"images": X[:1]})["logits"]
        waited = time.monotonic() - started
    assert 0.09 <= waited < 5
    np.testing.assert_allclose(answer, unbatched[:1], rtol=1e-5, atol=1e-5)
    assert runner.stats.batches == 1


def test_a_full_queue_turns_requests_away_with_unavailable(
    graph: GraphRunner, unbatched: np.ndarray
) -> None:
    gate = threading.Event()
    inner = Recording(graph, gate=gate)
    params = _params(max_batch_size=1, max_enqueued_batches=1)
    with BatchingRunner(inner, params) as runner:
        running = _in_threads(runner, [X[:1]])
        assert inner.started.wait(10)
        queued = _in_threads(runner, [X[1:2]])
        _until(lambda: runner.stats.queued_rows == 1, "the second request to be queued")
        with pytest.raises(Unavailable, match=r"the batch queue is full: 1 batches are enqueued"):
            runner.run(SIG, {"images": X[2:3]})
        assert runner.stats.rejected == 1
        gate.set()
        for i, future in enumerate(running + queued):
            np.testing.assert_allclose(
                future.result(timeout=30)["logits"], unbatched[i : i + 1], rtol=1e-5, atol=1e-5
            )
    assert runner.stats.batches == 2


def test_a_request_larger_than_max_batch_size_is_invalid(graph: GraphRunner) -> None:
    inner = Recording(graph)
    with (
        BatchingRunner(inner, _params(max_batch_size=4)) as runner,
        pytest.raises(InvalidInput, match="Task size 5 is larger than maximum input batch size 4"),
    ):
        runner.run(SIG, {"images": X[:5]})
    assert inner.batches == []


def test_large_batch_splitting_runs_a_request_in_pieces(
    graph: GraphRunner, unbatched: np.ndarray
) -> None:
    inner = Recording(graph)
    params = _params(
        max_batch_size=8, enable_large_batch_splitting=True, max_execution_batch_size=4
    )
    with BatchingRunner(inner, params) as runner:
        answer = runner.run(SIG, {"images": X[:7]})["logits"]
        # As in TF Serving, max_batch_size still bounds a request when splitting.
        with pytest.raises(InvalidInput, match="Task size 9 is larger"):
            runner.run(SIG, {"images": X[:9]})
    assert inner.sizes == [4, 3]
    np.testing.assert_allclose(answer, unbatched[:7], rtol=1e-5, atol=1e-5)


def test_an_error_reaches_every_request_of_its_batch(graph: GraphRunner) -> None:
    inner = Recording(graph, error=InvalidInput("the model refused this batch"))
    with BatchingRunner(inner, _params(max_batch_size=3, batch_timeout_micros=LONG)) as runner:
        futures = _in_threads(runner, [X[i : i + 1] for i in range(3)])
        errors = [f.exception(timeout=30) for f in futures]
    assert all(isinstance(e, InvalidInput) for e in errors), errors
    assert {str(e) for e in errors} == {"the model refused this batch"}
    assert (runner.stats.batches, runner.stats.failed_batches) == (1, 1)
    assert inner.sizes == [3]


def test_an_output_without_the_batch_dimension_fails_the_batch(graph: GraphRunner) -> None:
    inner = Recording(graph, extra=lambda inputs: {"total": np.asarray(inputs["images"].sum())})
    with (
        BatchingRunner(inner, _params(max_batch_size=2, batch_timeout_micros=LONG)) as runner,
    ):
        futures = _in_threads(runner, [X[:1], X[1:2]])
        errors = [f.exception(timeout=30) for f in futures]
    for error in errors:
        assert isinstance(error, FailedPrecondition)
        assert "output 'total' has shape []" in str(error)


def test_close_runs_what_is_queued_then_refuses_requests(
    graph: GraphRunner, unbatched: np.ndarray
) -> None:
    gate = threading.Event()
    inner = Recording(graph, gate=gate)
    runner = BatchingRunner(inner, _params(max_batch_size=1))
    futures = _in_threads(runner, [X[:1]])
    assert inner.started.wait(10)
    futures += _in_threads(runner, [X[1:2]])
    _until(lambda: runner.stats.queued_rows == 1, "the second request to be queued")
    futures += _in_threads(runner, [X[2:3]])
    _until(lambda: runner.stats.queued_rows == 2, "the third request to be queued")
    closer = threading.Thread(target=runner.close)
    closer.start()
    _until(lambda: runner.closed, "close() to begin")
    with pytest.raises(Unavailable, match="closed"):
        runner.run(SIG, {"images": X[3:4]})
    gate.set()
    closer.join(30)
    assert not closer.is_alive()
    for i, future in enumerate(futures):
        np.testing.assert_allclose(
            future.result(timeout=1)["logits"], unbatched[i : i + 1], rtol=1e-5, atol=1e-5
        )
    assert inner.sizes == [1, 1, 1]
    assert runner.stats.queued_rows == 0


# -- shapes: separate queues, or padding (a numpy model, so lengths can vary) ------------------


class Doubler(Runner):
    """A model with a variable-length input: y = 2x, keeping x's shape."""

    kind = "graph"

    def __init__(self) -> None:
        self.signatures: dict[str, Any] = {SIG: None}
        self.batches: list[np.ndarray] = []

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.batches.append(inputs["tokens"])
        return {"doubled": inputs["tokens"] * 2}


@pytest.mark.parametrize("pad", [False, True])
def test_lengths_that_differ_share_a_batch_only_when_padding(pad: bool) -> None:
    inner = Doubler()
    params = _params(max_batch_size=2, batch_timeout_micros=50_000, pad_variable_length_inputs=pad)
    short, long = np.array([[5, 6]], np.int32), np.array([[1, 2, 3]], np.int32)
    with BatchingRunner(inner, params) as runner, ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(runner.run, SIG, {"tokens": t}) for t in (short, long)]
        answers = [f.result(timeout=30)["doubled"] for f in futures]
    if pad:
        # As TF Serving: padded at the end with the input's own first element.
        assert [b.shape for b in inner.batches] == [(2, 3)]
        np.testing.assert_array_equal(answers[0], [[10, 12, 10]])
    else:
        assert sorted(b.shape for b in inner.batches) == [(1, 2), (1, 3)]
        np.testing.assert_array_equal(answers[0], [[10, 12]])
    np.testing.assert_array_equal(answers[1], [[2, 4, 6]])


class HeldDoubler(Doubler):
    """A Doubler that holds each batch of `held_length` tokens until `gate` opens."""

    def __init__(self, gate: threading.Event, held_length: int) -> None:
        super().__init__()
        self.gate = gate
        self.held_length = held_length
        self.holding = threading.Event()

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if inputs["tokens"].shape[1] == self.held_length:
            self.holding.set()
            assert self.gate.wait(10), "the test never opened the gate"
        return super().run(signature, inputs)


def test_batches_of_several_queues_run_by_their_timeouts_while_a_thread_is_busy() -> None:
    # A request wakes a batch thread only when it opens or fills a batch, so the open batches
    # of three queues must be timed by the one thread not held, one after the other.
    gate = threading.Event()
    inner = HeldDoubler(gate, held_length=5)
    params = _params(num_batch_threads=2, max_batch_size=8, batch_timeout_micros=30_000)
    with BatchingRunner(inner, params) as runner, ThreadPoolExecutor(4) as pool:
        held = pool.submit(runner.run, SIG, {"tokens": np.ones((1, 5), np.int32)})
        assert inner.holding.wait(10)
        started = time.monotonic()
        futures = [
            pool.submit(runner.run, SIG, {"tokens": np.full((1, n), n, np.int32)})
            for n in (2, 3, 4)
        ]
        answers = [f.result(timeout=10)["doubled"] for f in futures]
        waited = time.monotonic() - started
        gate.set()
        np.testing.assert_array_equal(held.result(timeout=10)["doubled"], [[2] * 5])
    assert 0.03 <= waited < 5
    for n, answer in zip((2, 3, 4), answers, strict=True):
        np.testing.assert_array_equal(answer, np.full((1, n), 2 * n))
    assert sorted(b.shape for b in inner.batches) == [(1, 2), (1, 3), (1, 4), (1, 5)]


def test_every_request_of_a_full_batch_gets_its_rows_from_one_run(
    graph: GraphRunner, unbatched: np.ndarray
) -> None:
    # 16 requests in flight at once, 4 rows each: every one is answered with its own rows, in
    # runs of max_batch_size, whatever thread hands each its answer.
    inner = Recording(graph)
    params = _params(num_batch_threads=2, max_batch_size=16, batch_timeout_micros=LONG)
    requests = [X[(4 * i) % 16 : (4 * i) % 16 + 4] for i in range(16)]
    with BatchingRunner(inner, params) as runner:
        futures = _in_threads(runner, requests)
        answers = [f.result(timeout=30)["logits"] for f in futures]
    for i, answer in enumerate(answers):
        start = (4 * i) % 16
        np.testing.assert_allclose(answer, unbatched[start : start + 4], rtol=1e-5, atol=1e-5)
    assert inner.sizes == [16, 16, 16, 16]


# -- end to end: a real server, the official TF Serving stubs ----------------------------------


@pytest.fixture
def batching_server(graph: GraphRunner) -> Iterator[tuple[str, BatchingRunner]]:
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
    from graphserve.serving.registry import Servable

    runner = BatchingRunner(graph, _params(max_batch_size=16, batch_timeout_micros=20_000))
    registry = ModelRegistry()
    registry.add(Servable("mlp", 1, runner))
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0, grpc_workers=16)
    with runner, ModelServer(registry, options) as server:
        yield f"127.0.0.1:{server.grpc_port}", runner


def test_grpc_predict_through_a_batching_server_matches_unbatched(
    batching_server: tuple[str, BatchingRunner], unbatched: np.ndarray
) -> None:
    address, runner = batching_server

    def predict(i: int) -> np.ndarray:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "mlp"
        request.inputs["images"].CopyFrom(array_to_proto(X[i : i + 1]))
        response = stub.Predict(request, timeout=30)
        return array_from_proto(response.outputs["logits"])

    with grpc.insecure_channel(address) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(predict, range(16)))
    for i, answer in enumerate(answers):
        np.testing.assert_allclose(answer, unbatched[i : i + 1], rtol=1e-5, atol=1e-5)
    assert runner.stats.rows == 16
    assert runner.stats.batches < 16


def test_on_the_asyncio_front_end_a_waiting_request_holds_no_thread(
    graph: GraphRunner, unbatched: np.ndarray
) -> None:
    """One gRPC thread, sixteen requests: on the threaded front end each would hold the thread
    while it waits, and run alone when its batch times out (16 batches, 200 ms each); on the
    asyncio front end they wait on the loop and fill one batch (two, if they straddle one)."""
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
    from graphserve.serving.registry import Servable

    runner = BatchingRunner(graph, _params(max_batch_size=16, batch_timeout_micros=200_000))
    registry = ModelRegistry()
    registry.add(Servable("mlp", 1, runner))
    options = ServerOptions(grpc_port=0, rest_port=None, grpc_workers=1, grpc_asyncio=True)
    with (
        runner,
        ModelServer(registry, options) as server,
        grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel,
    ):
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        calls = []
        for i in range(16):
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "mlp"
            request.inputs["images"].CopyFrom(array_to_proto(X[i : i + 1]))
            calls.append(stub.Predict.future(request, timeout=30))
        answers = [array_from_proto(call.result().outputs["logits"]) for call in calls]
    for i, answer in enumerate(answers):
        np.testing.assert_allclose(answer, unbatched[i : i + 1], rtol=1e-5, atol=1e-5)
    assert runner.stats.rows == 16
    assert runner.stats.batches <= 2


def _serve_options(tmp_path: Path, grpc_workers: int | None, batching: str | None) -> Any:
    from graphserve.serving.flags import ServeFlags

    params = None
    if batching is not None:
        params = tmp_path / "batching.txt"
        params.write_text(batching)
    return ServeFlags(
        host="127.0.0.1", grpc_port=0, rest_port=0, metrics=False, monitoring_config_file=None,
        max_message_bytes=1 << 20, grpc_workers=grpc_workers, intra_op=0, inter_op=0,
        log_format="text", batching_parameters_file=params,
    )  # fmt: skip


def test_batching_sizes_the_grpc_pool_so_batches_can_fill(tmp_path: Path) -> None:
    from graphserve.core.defaults import DEFAULT_GRPC_WORKERS

    # every waiting request holds a gRPC thread: 16 rows x (2 batch threads + 1 queued batch)
    serve = _serve_options(
        tmp_path, None, "max_batch_size { value: 16 }\nnum_batch_threads { value: 2 }\n"
    )
    serve.batching()
    assert serve.workers() == max(DEFAULT_GRPC_WORKERS, 48)
    explicit = _serve_options(tmp_path, 6, "max_batch_size { value: 16 }\n")
    explicit.batching()
    assert explicit.workers() == 6  # the operator's choice stands
    assert _serve_options(tmp_path, None, None).workers() == DEFAULT_GRPC_WORKERS
