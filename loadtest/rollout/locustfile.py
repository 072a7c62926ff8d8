"""The locustfile of `graphserve loadtest rollout`: steady gRPC Predict load until told to stop.

    locust -f loadtest/rollout/locustfile.py --headless -u 16 -r 16 -t 300s --host 127.0.0.1:8500 \
        --rollout-dir OUT/raw --rollout-rate 200

Each user sends the pre-encoded request in OUT/raw/request.bin from a real OS thread over a
channel of its own (generator/senders.py says why). Closed loop (--rollout-rate 0): back to back.
Open loop: the users share one schedule of evenly spaced sends at the rate, starting together,
and a send that goes out late records its lag. Every answer is read only as far as its
`model_spec` (the version that answered); the outputs are skipped, not parsed.

The controller (loadtest/rollout/run.py, in the CLI's process) watches OUT/raw:
    started.json   written when the load begins: {"t0": time.time() of the first send}
    stop           the controller creates it to end the run
    records.npz    every request: start (time.time()), latency_ms, lag_ms, code (gRPC status
                   code number, 0 OK), version (-1: none); written when the users have stopped
Locust's `-t` bounds the run if the controller never asks.

Neither TensorFlow nor the TF Serving protos beyond model.proto are imported.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import gevent
import grpc
import numpy as np
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from tensorflow_serving.apis import model_pb2

from graphserve.core.client import GrpcClient
from graphserve.loadtest.generator.senders import (
    Completed,
    Completions,
    LoopThread,
    RealLock,
    real_sleep,
)
from graphserve.loadtest.generator.targets import check_loopback

_RPC_TIMEOUT_S = 10.0
_WATCH_S = 0.05  # how often the hub looks for the stop file
_START_DELAY_S = 0.3  # the schedule starts a moment after the users are spawned
_NAP_S = 0.05  # the longest a thread sleeps towards a send before looking at the stop flag


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    group = parser.add_argument_group("graphserve rollout")
    group.add_argument("--rollout-dir", default="", help="OUT/raw of `graphserve loadtest rollout`")
    group.add_argument(
        "--rollout-rate", type=float, default=0.0, help="open loop req/s (0: closed loop)"
    )


class _Run:
    """This process's state: the schedule, the stop flag and the records of every request."""

    def __init__(self) -> None:
        self.dir = Path()
        self.body = b""
        self.rate = 0.0
        self.t0 = 0.0
        self.next = 0  # the open loop's next send, as an index into the schedule
        self.stopping = False
        self.rows: list[tuple[float, float, float, int, int]] = []  # list.append is atomic
        self.lock = RealLock()
        self.threads: list[LoopThread] = []
        self.written = False

    def due(self) -> float:
        """The open loop's next send time (time.time()); each is taken once."""
        with self.lock:
            index, self.next = self.next, self.next + 1
        return self.t0 + index / self.rate

    def write(self) -> None:
        if self.written or not self.dir.parts:
            return
        self.written = True
        columns = list(zip(*self.rows, strict=True)) if self.rows else [(), (), (), (), ()]
        arrays = {
            "start": np.asarray(columns[0], np.float64),
            "latency_ms": np.asarray(columns[1], np.float64),
            "lag_ms": np.asarray(columns[2], np.float64),
            "code": np.asarray(columns[3], np.int16),
            "version": np.asarray(columns[4], np.int64),
        }
        partial = self.dir / "records.partial.npz"
        with partial.open("wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
        os.replace(partial, self.dir / "records.npz")


run = _Run()


def answered_version(reply: bytes) -> int:
    """`model_spec.version.value` of a serialized PredictResponse; -1 when it has none.

    Walks the top-level fields: the outputs (field 1) are skipped by their length, and only
    the model_spec (field 2) is parsed.
    """
    position, end = 0, len(reply)
    while position < end:
        key, position = _varint(reply, position)
        field, wire = key >> 3, key & 7
        if wire == 2:
            size, position = _varint(reply, position)
            if field == 2:
                spec = model_pb2.ModelSpec.FromString(reply[position : position + size])
                return int(spec.version.value) if spec.HasField("version") else -1
            position += size
        elif wire == 0:
            _, position = _varint(reply, position)
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
        else:
            return -1
    return -1


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


@events.test_start.add_listener
def _on_start(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    assert options is not None  # run by locust's command line, which parses our options
    run.dir = Path(options.rollout_dir)
    run.rate = float(options.rollout_rate)
    host = environment.host or ""
    check_loopback(host)
    run.body = (run.dir / "request.bin").read_bytes()
    run.t0 = time.time() + _START_DELAY_S
    (run.dir / "started.json").write_text(json.dumps({"t0": run.t0, "pid": os.getpid()}))
    gevent.spawn(_watch_stop, environment)


def _watch_stop(environment: Environment) -> None:
    """Stop when the controller says so: the threads finish the call they are in, then the
    records are written and locust quits."""
    while not (run.dir / "stop").exists():
        gevent.sleep(_WATCH_S)
    run.stopping = True
    deadline = time.monotonic() + _RPC_TIMEOUT_S + 1
    while any(not t.finished for t in run.threads) and time.monotonic() < deadline:
        gevent.sleep(0.01)
    run.write()
    if environment.runner is not None:
        environment.runner.quit()


@events.test_stop.add_listener
def _on_stop(**_: Any) -> None:
    run.write()  # the run ended on locust's own bound (-t) before the controller's stop


class RolloutUser(User):
    """Sends the request to the host until the run stops; every answer is recorded with the
    version that gave it."""

    wait_time = constant(0)

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        # Made here, on the hub: a channel of its own (one shared by threads serializes them).
        self._client = GrpcClient.connect(self.host or "", max_message_bytes=-1)
        self._predict = self._client.raw("Predict")
        self._completions = Completions.of(environment, "grpc")
        self._loop = LoopThread(self._send)

    @task
    def predict(self) -> None:
        run.threads.append(self._loop)
        self._loop.start().watch()
        raise StopUser()

    def on_stop(self) -> None:
        self._loop.join(_RPC_TIMEOUT_S)
        self._client.close()

    # -- on this user's thread

    def _send(self) -> bool:
        due = run.due() if run.rate > 0 else max(run.t0, time.time())
        while (delay := due - time.time()) > 0:
            if run.stopping:
                return False
            real_sleep(min(delay, _NAP_S))
        if run.stopping:
            return False
        lag_ms = max(0.0, (time.time() - due) * 1000) if run.rate > 0 else 0.0
        start, t0 = time.time(), time.perf_counter()
        try:
            reply = self._predict(run.body, timeout=_RPC_TIMEOUT_S)
            code, version, error = 0, answered_version(reply), None
        except grpc.RpcError as exc:
            reply, version, error = b"", -1, exc
            code = int(exc.code().value[0])  # type: ignore[attr-defined]
        ms = (time.perf_counter() - t0) * 1000
        run.rows.append((start, ms, lag_ms, code, version))
        self._completions.put(Completed("Predict", start, ms, len(reply), error, {}))
        return True
