"""The locustfile of `graphserve loadtest rollout`: steady gRPC Predict load until told to stop.

    locust -f loadtest/rollouts/locustfile.py --headless -u 16 -r 16 -t 300s --host 127.0.0.1:8500 \
        --rollout-dir OUT/raw --rollout-rate 200

Each user sends the pre-encoded request in OUT/raw/request.bin from a real OS thread over a
channel of its own (generator/users.py's loop; generator/senders.py says why). Under recorded
traffic (OUT/raw/requests.bin, generator/framed.py) the users take the file's requests in order,
cycling, one count for the process, and keep each version's first answer to each record. Closed loop
(--rollout-rate 0): back to back. Open loop: the users share one schedule of evenly spaced sends
at the rate, starting together, and a send that goes out late records its lag. Every answer is
read only as far as its `model_spec` (the version that answered); the outputs are skipped, not
parsed.

The controller (loadtest/rollouts/run.py, in the CLI's process) watches OUT/raw:
    started.json   written when the load begins: {"t0": time.time() of the first send}
    stop           the controller creates it to end the run
    records.npz    every request: start (time.time()), latency_ms, lag_ms, code (gRPC status
                   code number, 0 OK), version (-1: none), record (the traffic file's request
                   sent, -1 without one); written when the users have stopped
    answers.bin    under traffic: each version's first answer to each record
Locust's `-t` bounds the run if the controller never asks.

Over TLS the host is `grpcs://HOST:PORT`, dialed with the options the controller put in this
process's environment (ClientTls.to_env; loadtest/generator/targets.py).

Neither TensorFlow nor the TF Serving protos beyond model.proto are imported.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import gevent
import numpy as np
from locust import events
from locust.env import Environment
from tensorflow_serving.apis import model_pb2

from graphserve.loadtest.generator.framed import (
    ANSWERS,
    REQUESTS,
    read_requests,
    write_answers,
)
from graphserve.loadtest.generator.senders import Bodies, Completed
from graphserve.loadtest.generator.targets import check_loopback, target_tls
from graphserve.loadtest.generator.users import (
    GrpcPredict,
    LoopUser,
    Schedule,
    Sender,
    Sent,
    Traffic,
    Turn,
    end_run,
)

_RPC_TIMEOUT_S = 10.0
_WATCH_S = 0.05  # how often the hub looks for the stop file
_START_DELAY_S = 0.3  # the schedule starts a moment after the users are spawned


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    group = parser.add_argument_group("graphserve rollout")
    group.add_argument("--rollout-dir", default="", help="OUT/raw of `graphserve loadtest rollout`")
    group.add_argument(
        "--rollout-rate", type=float, default=0.0, help="open loop req/s (0: closed loop)"
    )


class _Run:
    """This process's run: where it writes, the request, and the records of every request."""

    def __init__(self) -> None:
        self.dir = Path()
        self.body = b""
        self.bodies: Bodies | None = None  # under traffic: the file's requests
        self.rows: list[tuple[float, float, float, int, int, int]] = []  # append is atomic
        self.answers: dict[tuple[int, int], bytes] = {}  # (record, version): first answer
        self.written = False

    def write(self) -> None:
        if self.written or not self.dir.parts:
            return
        self.written = True
        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * 6
        arrays = {
            "start": np.asarray(columns[0], np.float64),
            "latency_ms": np.asarray(columns[1], np.float64),
            "lag_ms": np.asarray(columns[2], np.float64),
            "code": np.asarray(columns[3], np.int16),
            "version": np.asarray(columns[4], np.int64),
            "record": np.asarray(columns[5], np.int32),
        }
        if self.bodies is not None:
            write_answers(self.dir / ANSWERS, dict(self.answers))
        partial = self.dir / "records.partial.npz"
        with partial.open("wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
        os.replace(partial, self.dir / "records.npz")


run = _Run()
traffic: Traffic[None] = Traffic()


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
    host = environment.host or ""
    check_loopback(host)
    if (run.dir / REQUESTS).exists():
        run.bodies = Bodies(read_requests(run.dir / REQUESTS))
    else:
        run.body = (run.dir / "request.bin").read_bytes()
    t0 = time.time() + _START_DELAY_S  # every user starts then, closed loop or open
    traffic.publish(Turn(None, schedule=Schedule(float(options.rollout_rate), t0)))
    (run.dir / "started.json").write_text(json.dumps({"t0": t0, "pid": os.getpid()}))
    gevent.spawn(_watch_stop, environment)


def _watch_stop(environment: Environment) -> None:
    """Stop when the controller says so: the threads finish the call they are in, then the
    records are written and locust quits."""
    while not (run.dir / "stop").exists():
        gevent.sleep(_WATCH_S)
    end_run(environment, traffic, _RPC_TIMEOUT_S + 1, run.write)


@events.test_stop.add_listener
def _on_stop(**_: Any) -> None:
    run.write()  # the run ended on locust's own bound (-t) before the controller's stop


class RolloutUser(LoopUser):
    """Sends the request to the host until the run stops; every answer is recorded with the
    version that gave it."""

    traffic = traffic

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        # Made here, on the hub: a channel of its own (one shared by threads serializes them).
        host = self.host or ""
        options: dict[str, Any] = {"max_message_bytes": -1, "tls": target_tls(host)}
        body = run.bodies if run.bodies is not None else run.body
        self._sender = GrpcPredict(host, body, _RPC_TIMEOUT_S, **options)

    def senders(self) -> list[Sender]:
        return [self._sender]

    def record(self, turn: Turn[None], sent: Sent) -> Completed:
        if sent.error is None:
            code, version = 0, answered_version(sent.reply)
        else:
            code, version = int(sent.error.code().value[0]), -1  # type: ignore[attr-defined]
        if sent.record >= 0 and code == 0:
            run.answers.setdefault((sent.record, version), sent.reply)
        run.rows.append((sent.start, sent.ms, sent.lag_ms, code, version, sent.record))
        return sent.completed(turn.name)
