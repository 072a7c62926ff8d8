"""Version swaps under traffic, with batching on: the lifecycle must not leak.

`graphserve serve graph --enable_batching` runs as a user runs it (a child process on loopback).
Four client threads send Predict without a version (so each request lands on the newest) while
the test writes 30 new versions one after the other, each time waiting until the server reports
the new one AVAILABLE and the old one END. Every request must succeed with the model's values;
after a warm-up of WARMUP_SWAPS swaps the server's thread count must not grow, and its memory
must stay flat: each retired version's batch threads stop and its Session is closed once its
last request has finished (before, every swap left its batch threads waiting forever and its
Session in memory).

Bounded: 30 swaps of well under a second each, requests with a timeout.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from graphserve.core.client import model_status
from graphserve.core.codec import array_from_proto, array_to_proto
from graphserve.core.processes import ServerProcess, proc_status
from graphserve.model.examples import mlp

pytestmark = pytest.mark.slow

SWAPS = 30
WARMUP_SWAPS = 6  # samples start here: allocator arenas and gRPC threads settle first
CLIENTS = 4
SWAP_TIMEOUT_S = 30.0
RETIRE_TIMEOUT_S = 3.0  # a version that never closes is caught by the thread count instead
# Measured here: threads stay exactly flat; RSS moves within ~3 MB after the warm-up. One leaked
# MLP Session costs ~2 MB, a leaked batching runner its threads (one per batch thread): 24
# leaked swaps would add ~50 MB and dozens of threads.
MAX_RSS_GROWTH_KB = 12 * 1024
MAX_THREAD_GROWTH = 2
NAME = "mlp"


def _state(address: str, version: int) -> str:
    return next((s.state for s in model_status(address, NAME) if s.version == version), "")


def _wait_until_retired(pid: int, threads_before_push: int) -> None:
    """Until the server is back to the threads it had before the push: the retired version's
    retire thread (close, then collect) and its batch threads have ended. Bounded: a version
    that never closes keeps them, which the samples' thread count then shows."""
    deadline = time.monotonic() + RETIRE_TIMEOUT_S
    while proc_status(pid)["Threads"] > threads_before_push and time.monotonic() < deadline:
        time.sleep(0.02)


class Traffic:
    """CLIENTS threads sending Predict until stopped; every answer checked."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        rng = np.random.default_rng(7)
        self.x = rng.normal(size=(1, 784)).astype(np.float32)
        self.expected = mlp.build()(self.x).numpy()
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._drive) for _ in range(CLIENTS)]

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self.channel.close()

    def _drive(self) -> None:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = NAME
        request.inputs["images"].CopyFrom(array_to_proto(self.x))
        while not self._stop.is_set():
            try:
                response = self.stub.Predict(request, timeout=10)
                (output,) = response.outputs.values()
                got = array_from_proto(output)
                problem = "" if np.allclose(got, self.expected, atol=1e-5) else f"values {got}"
            except grpc.RpcError as exc:
                problem = f"{exc.code().name}: {exc.details()}"
            with self._lock:
                if problem:
                    self.failures.append(problem)
                else:
                    self.ok += 1


def test_thirty_swaps_under_traffic_with_batching_leak_nothing(
    mlp_export: Any, tmp_path: Path
) -> None:
    base = tmp_path / NAME
    base.mkdir()
    shutil.copytree(mlp_export.version_dir, base / "1")
    server = ServerProcess.on_free_ports(
        [
            "graph",
            "--model-base-path",
            str(base),
            "--model-name",
            NAME,
            "--enable_batching",
            "--file_system_poll_wait_seconds",
            "0.2",
        ],
        NAME,
        log_path=tmp_path / "server.log",
    )
    threads: list[int] = []
    rss_kb: list[int] = []
    with server:
        assert server.process is not None
        pid = server.process.pid
        with Traffic(server.grpc_address) as traffic:
            for version in range(2, SWAPS + 2):
                staging = tmp_path / f"staging-{version}"
                shutil.copytree(mlp_export.version_dir, staging)
                threads_before_push = proc_status(pid)["Threads"]
                staging.rename(base / str(version))  # whole or not at all, as export writes it
                deadline = time.monotonic() + SWAP_TIMEOUT_S
                while not (
                    _state(server.grpc_address, version) == "AVAILABLE"
                    and _state(server.grpc_address, version - 1) == "END"
                ):
                    assert time.monotonic() < deadline, (
                        f"version {version} did not replace {version - 1}: "
                        f"{model_status(server.grpc_address, NAME)}\n{server.log_tail()}"
                    )
                    time.sleep(0.05)
                shutil.rmtree(base / str(version - 1))
                # the retired version closes once its last request is done
                _wait_until_retired(pid, threads_before_push)
                if version - 1 >= WARMUP_SWAPS:
                    status = proc_status(pid)
                    threads.append(status["Threads"])
                    rss_kb.append(status["VmRSS"])
        print(
            f"\nswaps: {SWAPS}, requests ok {traffic.ok}, failed {len(traffic.failures)}; "
            f"threads {threads}; VmRSS kB {rss_kb}"
        )
        assert traffic.failures == [], traffic.failures[:5]
        assert traffic.ok > SWAPS * CLIENTS
        assert max(threads) - threads[0] <= MAX_THREAD_GROWTH, threads
        growth = int(np.mean(rss_kb[-3:]) - np.mean(rss_kb[:3]))
        assert growth <= MAX_RSS_GROWTH_KB, f"VmRSS grew {growth} kB: {rss_kb}"
    assert server.stop() == 0, server.log_tail()
