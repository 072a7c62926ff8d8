"""The front end's fast paths (issue 42), against real servers and a real Session.

REST serves a predict on its event loop when the model ran lately in under a millisecond and runs
on its caller (no thread hand-off at all; the Session then runs the graph on the loop's thread),
and hands everything else to a worker thread as before. The answers are the same either way.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphserve.core.batchingparams import BatchingParameters
from graphserve.core.httpclient import HttpConnection
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.batching import BatchingRunner
from graphserve.serving.registry import Servable
from graphserve.serving.rest_api import HERE_MAX_BODY_BYTES, HERE_MAX_RUN_S
from graphserve.serving.runner import Runner
from graphserve.serving.servable import RunTime
from graphserve.serving.session_runner import SessionRunner
from tools.bench.frontend import LIBRARIES, OTHER, profile_by_library

MODEL = "hp2"
FIXTURES = Path(__file__).parent / "fixtures" / "perf"


@pytest.fixture(scope="module")
def hp2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.savedmodels import write_half_plus_two

    return write_half_plus_two(tmp_path_factory.mktemp("frontend") / MODEL / "1")


class Where(Runner):
    """Wraps a runner: records the thread each run ran on and which call it came through, and
    sleeps `delay` s per run (a slow model)."""

    def __init__(self, runner: Runner, delay: float = 0.0) -> None:
        self.runner = runner
        self.kind = runner.kind
        self.signatures = runner.signatures
        self.path = runner.path
        self.delay = delay
        self.calls: list[tuple[str, str]] = []  # (thread name, "run" | "run_inline")

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._run("run", signature, inputs)

    def run_inline(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._run("run_inline", signature, inputs)

    def _run(
        self, how: str, signature: str, inputs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        self.calls.append((threading.current_thread().name, how))
        if self.delay:
            time.sleep(self.delay)
        run = self.runner.run_inline if how == "run_inline" else self.runner.run
        return run(signature, inputs)


@contextmanager
def serving(runner: Runner) -> Iterator[ModelServer]:
    registry = ModelRegistry()
    registry.add(Servable(MODEL, 1, runner))
    server = ModelServer(registry, ServerOptions(grpc_port=0, rest_port=0)).start()
    try:
        yield server
    finally:
        server.stop(grace=1.0)


def _predict(port: int, body: bytes, verb: str = "predict") -> tuple[int, dict[str, object]]:
    connection = HttpConnection(f"127.0.0.1:{port}", 10.0)
    try:
        reply = connection.request("POST", f"/v1/models/{MODEL}:{verb}", body, {})
    finally:
        connection.close()
    return reply.status, json.loads(reply.body)


def _instances(values: list[float]) -> bytes:
    return json.dumps({"instances": values}).encode()


def test_a_fast_model_is_served_on_the_event_loop_with_its_graph_on_the_same_thread(
    hp2_dir: Path,
) -> None:
    runner = Where(SessionRunner(hp2_dir))
    with serving(runner) as server:
        answers = [_predict(server.rest_port, _instances([1.0, 2.0, 5.0])) for _ in range(40)]
    assert all(status == 200 for status, _ in answers)
    for _, body in answers:  # half_plus_two: x / 2 + 2, the same answer on either path
        assert body == {"predictions": [2.5, 3.0, 4.5]}
    # The first runs on a worker (no run time known yet), and so do the next while the moving
    # average of the runs is over a millisecond (a cold first run); then on the loop ("rest"),
    # the Session's graph on the loop's own thread.
    (first_thread, first_call), *_ = runner.calls
    assert first_thread.startswith("rest-") and first_call == "run"
    assert runner.calls[-10:] == [("rest", "run_inline")] * 10


def test_a_slow_model_a_large_body_and_batching_stay_on_worker_threads(hp2_dir: Path) -> None:
    slow = Where(SessionRunner(hp2_dir), delay=HERE_MAX_RUN_S * 3)
    with serving(slow) as server:
        for _ in range(3):
            assert _predict(server.rest_port, _instances([1.0]))[0] == 200
    assert [how for _, how in slow.calls] == ["run"] * 3
    assert all(name.startswith("rest-") for name, _ in slow.calls)

    fast = Where(SessionRunner(hp2_dir))
    with serving(fast) as server:
        for _ in range(40):
            assert _predict(server.rest_port, _instances([1.0]))[0] == 200
        assert fast.calls[-1] == ("rest", "run_inline")
        values = [0.5] * (HERE_MAX_BODY_BYTES // 4)  # "0.5, " is 5 bytes: past the limit
        status, body = _predict(server.rest_port, _instances(values))
        assert status == 200 and len(body["predictions"]) == len(values)  # type: ignore[arg-type]
        assert fast.calls[-1][1] == "run" and fast.calls[-1][0].startswith("rest-")

    inner = Where(SessionRunner(hp2_dir))
    batcher = BatchingRunner(inner, BatchingParameters(max_batch_size=4, batch_timeout_micros=100))
    try:
        with serving(batcher) as server:
            for _ in range(3):
                status, body = _predict(server.rest_port, _instances([4.0]))
                assert status == 200 and body == {"predictions": [4.0]}
    finally:
        batcher.close()
    assert [how for _, how in inner.calls] == ["run"] * 3  # the batch threads run it
    assert all(not name.startswith("rest") for name, _ in inner.calls)


def test_errors_on_the_event_loop_are_answered_as_on_a_thread(hp2_dir: Path) -> None:
    runner = Where(SessionRunner(hp2_dir))
    with serving(runner) as server:
        for _ in range(40):
            assert _predict(server.rest_port, _instances([1.0]))[0] == 200
        assert runner.calls[-1] == ("rest", "run_inline")
        # A string where the model takes floats: 400 naming what was wrong, from the loop
        status, body = _predict(server.rest_port, b'{"instances": ["a"]}')
        assert status == 400 and "error" in body
        status, body = _predict(server.rest_port, b'{"instances": "x"}')
        assert status == 400 and "error" in body
        # ... and the server goes on serving, on the loop
        assert _predict(server.rest_port, _instances([3.0])) == (200, {"predictions": [3.5]})
    assert runner.calls[-1] == ("rest", "run_inline")


def test_run_inline_answers_what_run_answers(hp2_dir: Path) -> None:
    runner = SessionRunner(hp2_dir)
    try:
        x = {"x": np.array([1.0, 2.0, 5.0], np.float32)}
        np.testing.assert_array_equal(
            runner.run_inline("serving_default", x)["y"], runner.run("serving_default", x)["y"]
        )
        with pytest.raises(Exception, match="x"):
            runner.run_inline("serving_default", {"x": np.array(["a"], object)})
    finally:
        runner.close()


def test_run_time_is_a_moving_average_of_the_runs() -> None:
    run_time = RunTime()
    assert run_time.mean is None
    run_time.observe(0.001)
    assert run_time.mean == pytest.approx(0.001)
    run_time.observe(0.002)
    assert run_time.mean == pytest.approx(0.001 + RunTime.WEIGHT * 0.001)


def test_a_run_held_up_moves_the_run_time_little_and_a_slow_model_still_leaves_the_loop() -> None:
    """A 0.3 ms model whose one run waited 50 ms for the GIL stays on the event loop; a model
    that runs 5 ms every time averages past HERE_MAX_RUN_S all the same."""
    quick = RunTime()
    for _ in range(20):
        quick.observe(0.0003)
    quick.observe(0.050)
    assert quick.mean is not None and quick.mean < HERE_MAX_RUN_S
    slow = RunTime()
    for _ in range(20):
        slow.observe(0.005)
    assert slow.mean is not None and slow.mean > HERE_MAX_RUN_S


def test_a_perf_report_is_grouped_by_library() -> None:
    """A report captured from perf (tests/fixtures/perf/README.md) of `serve graph` under
    16 clients: every sample lands in a group, the shares add up to the report's total."""
    report = (FIXTURES / "report-dso.txt").read_text()
    shares = profile_by_library(report)
    assert set(shares) <= {name for name, _ in LIBRARIES} | {OTHER}
    for expected in ("kernel", "Python", "gRPC core", "TensorFlow"):
        assert shares[expected] > 0.02, shares
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.01)
    assert list(shares.values()) == sorted(shares.values(), reverse=True)


@pytest.fixture(scope="module")
def frontend(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A quick `python -m tools.bench frontend` run: real servers, real load, seconds long."""
    from tools.bench.frontend import FrontendSpec, run_frontend

    return run_frontend(FrontendSpec.quick(tmp_path_factory.mktemp("bench-frontend")))


def test_the_front_end_is_the_server_minus_the_model_as_each_protocol_calls_it(
    frontend: dict[str, Any],
) -> None:
    model = frontend["model_cpu_us"]
    assert model["pool"] > 0 and model["inline"] > 0
    for protocol, call in (("grpc", "run"), ("rest", "run_inline")):
        figures = frontend["protocols"][protocol]
        assert figures["model_call"] == call
        assert figures["model_cpu_us"] == model["inline" if call == "run_inline" else "pool"]
        assert figures["front_end_cpu_us"] == pytest.approx(
            figures["server_cpu_us"] - figures["model_cpu_us"]
        )
        for window in figures["windows"]:
            assert window["requests"] > 0 and window["cpu_us_per_request"] > 0
    assert frontend["grpcio_floor"]["server_cpu_us"] > 0
    assert "baseline" not in frontend


def test_every_front_end_goal_is_measured(frontend: dict[str, Any]) -> None:
    from tools.bench.goals import FRONTEND_GOALS

    goals = {g["key"]: g for g in frontend["goals"]}
    assert list(goals) == [g.key for g in FRONTEND_GOALS]
    for goal in goals.values():
        assert goal["value"] is not None and goal["value"] > 0, goal
        assert "not measured" not in goal["detail"]
    assert goals["G16a"]["value"] == frontend["protocols"]["grpc"]["front_end_cpu_us"]
    assert goals["G17b"]["value"] == frontend["protocols"]["rest"]["server_cpu_us"]
    assert goals["G18"]["value"] == frontend["perf_analyzer"]["p50_ms"]
    routes = frontend["mobilenet"]["routes"]
    assert set(routes) == {"grpc", "rest"}
    assert goals["G19a"]["value"] == routes["grpc"]["fraction_of_limit"]


def test_the_front_end_page_renders_every_part(frontend: dict[str, Any]) -> None:
    from tools.bench.render import render_frontend

    page = render_frontend(frontend)
    for part in ("## Goals", "## The front end's cost", "grpcio's own floor",
                 "perf_analyzer (gRPC, 1 client)", "Where the server's CPU went",
                 "MobileNetV2"):  # fmt: skip
        assert part in page


def test_a_batched_rest_predict_awaits_its_batch_holding_no_thread(hp2_dir: Path) -> None:
    """One REST worker thread, four clients at once, batches of four after half a second: the
    four requests wait for their batch on the event loop, so they make one batch. (On a
    thread each, the one thread would hold the first while it waited, and the batches would be
    of one.)"""
    inner = Where(SessionRunner(hp2_dir))
    params = BatchingParameters(max_batch_size=4, batch_timeout_micros=500_000,
                                num_batch_threads=1)  # fmt: skip
    batcher = BatchingRunner(inner, params)
    registry = ModelRegistry()
    registry.add(Servable(MODEL, 1, batcher))
    server = ModelServer(registry, ServerOptions(grpc_port=0, rest_port=0, rest_workers=1))
    server.start()
    try:
        answers: list[tuple[int, dict[str, object]]] = []
        threads = [
            threading.Thread(target=lambda v=v: answers.append(
                _predict(server.rest_port, _instances([float(v)]))))
            for v in range(4)
        ]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        server.stop(grace=1.0)
        batcher.close()
    assert sorted(body["predictions"] for _, body in answers) == [[2.0], [2.5], [3.0], [3.5]]  # type: ignore[type-var]
    assert len(inner.calls) == 1  # one batch of the four


def test_with_batching_the_pools_share_the_cores_out_between_the_batch_threads() -> None:
    import os

    from graphserve.serving.build import ServeConfig, _pool_sizes

    cores = len(os.sched_getaffinity(0))
    batching = BatchingParameters(num_batch_threads=2)
    assert _pool_sizes(ServeConfig(batching=batching)) == (max(1, cores // 2),) * 2
    assert _pool_sizes(ServeConfig(batching=BatchingParameters(num_batch_threads=cores * 4))) == (
        1,
        1,
    )
    # given, or no batching: as given (0 is TensorFlow's choice)
    assert _pool_sizes(ServeConfig(batching=batching, intra_op_threads=3)) == (3, 0)
    assert _pool_sizes(ServeConfig()) == (0, 0)
