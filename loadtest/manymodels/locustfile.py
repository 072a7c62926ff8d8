"""The locustfile of `graphserve loadtest many`: Predict to many models, each request to one
drawn by popularity, until told to stop or the request cap is spent.

    locust -f loadtest/manymodels/locustfile.py --headless -u 16 -r 16 -t 300s \
        --host 127.0.0.1:8500 --many-dir OUT/raw

Each user sends from a real OS thread of its own over a connection of its own (generator/users.py's
loop; generator/senders.py says why). Just before a send the user takes the process's next pick
(manymodels/popularity.py: the i-th request goes to `Picks.pick(i)`), so the same seed sends the
same models in the same order. Closed loop (rate 0): back to back; open loop: the users share
one schedule of evenly spaced sends at the rate, and a late send records its lag. Every answer
is read for the server's cold-load mark (`x-graphserve-cold-load`: a REST header, gRPC trailing
metadata) and otherwise not parsed.

The controller (loadtest/manymodels/run.py) writes and watches OUT/raw:
    plan.json      protocol, names, weights, seed, rate, max_requests (written before the start)
    requests.npz   the requests, encoded once: the bodies of each distinct signature ("body_<g>",
                   their lengths "body_lengths_<g>": one payload, or under --traffic the file's
                   requests that fit it, taken in order, cycling), the
                   model's group ("group") and, for gRPC, each model's PredictRequest head
                   ("heads", "head_lengths"): a PredictRequest is its fields' bytes, so the head
                   (model_spec.name) followed by the body (model_spec.signature_name, inputs) is
                   the model's request; protobuf merges the two model_specs
    started.json   written when the load begins: {"t0": time.time() of the first send}
    stop           the controller creates it to end the run
    records.npz    every request: start (time.time()), latency_ms, lag_ms, model (index in
                   names), error (-1: none, else an index in "errors", the failures' statuses),
                   cold_s (the server's mark, NaN: none); written when the users have stopped

Over TLS the host is `grpcs://HOST:PORT` or `https://HOST:PORT`, dialed with the options the
controller put in this process's environment (ClientTls.to_env; loadtest/generator/targets.py).

Neither TensorFlow nor the TF Serving protos are imported.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gevent
import grpc
import numpy as np
from locust import events
from locust.env import Environment
from locust.exception import CatchResponseError

from graphserve.core.client import JSON_HEADERS, GrpcClient, cold_load_seconds, rest_path
from graphserve.core.httpclient import HttpConnection
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.senders import (
    Completed,
    RealLock,
    http_connection,
    timed_call,
    timed_post,
)
from graphserve.loadtest.generator.targets import check_loopback, target_tls
from graphserve.loadtest.generator.users import (
    LoopUser,
    RequestBudget,
    Schedule,
    Sender,
    Sent,
    Traffic,
    Turn,
    end_run,
)
from graphserve.loadtest.manymodels.popularity import Picks

__all__ = ["ManyUser"]

_RPC_TIMEOUT_S = 30.0  # a cold request waits for its model to load
_WATCH_S = 0.05
_START_DELAY_S = 0.3

Row = tuple[float, float, float, int, int, float]


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    group = parser.add_argument_group("graphserve many")
    group.add_argument("--many-dir", default="", help="OUT/raw of `graphserve loadtest many`")


def _cold(pairs: Iterable[tuple[Any, Any]]) -> float:
    seconds = cold_load_seconds(pairs)
    return math.nan if seconds is None else seconds


class _Run:
    """This process's run: the plan, the requests, the picks and every request's record."""

    def __init__(self) -> None:
        self.dir = Path()
        self.protocol = "grpc"
        self.names: list[str] = []
        self.picks = Picks([1.0], 0)
        self.sent = itertools.count()  # next() is atomic: the picks' index
        self.groups = np.zeros(0, np.int64)
        self.bodies: list[list[bytes]] = []  # each group's: one payload, or a traffic file's
        self.turns: list[itertools.count[int]] = []  # each group's place in its bodies
        self.heads: list[bytes] = []
        self.paths: list[str] = []
        self.http = HttpConnection("127.0.0.1:1")  # only encodes: the users' own connections send
        self.rows: list[Row] = []  # list.append is atomic
        self.errors: dict[str, int] = {}
        self._lock = RealLock()
        self.written = False

    def load(self, directory: Path, host: str) -> None:
        plan = json.loads((directory / "plan.json").read_text())
        self.dir, self.protocol, self.names = directory, plan["protocol"], list(plan["names"])
        self.picks = Picks(plan["weights"], int(plan["seed"]))
        with np.load(directory / "requests.npz", allow_pickle=False) as npz:
            self.groups = npz["group"]
            for g in range(int(self.groups.max()) + 1):
                data, ends = npz[f"body_{g}"].tobytes(), np.cumsum(npz[f"body_lengths_{g}"])
                starts = [0, *ends[:-1].tolist()]
                self.bodies.append([data[a:b] for a, b in zip(starts, ends.tolist(), strict=True)])
            self.turns = [itertools.count() for _ in self.bodies]
            if self.protocol == "grpc":
                heads, ends = npz["heads"].tobytes(), np.cumsum(npz["head_lengths"]).tolist()
                self.heads = [heads[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        if self.protocol == "rest":
            self.http = HttpConnection(host)
            self.paths = [rest_path(name, "predict") for name in self.names]

    def body(self, model: int) -> bytes:
        """The next body of `model`'s group: its one payload, or under --traffic the next of
        the file's requests that fit it (next() is atomic)."""
        group = self.groups[model]
        bodies = self.bodies[group]
        return bodies[next(self.turns[group]) % len(bodies)] if len(bodies) > 1 else bodies[0]

    def grpc_request(self, model: int) -> bytes:
        return self.heads[model] + self.body(model)

    def rest_request(self, model: int) -> bytes:
        return self.http.encode("POST", self.paths[model], self.body(model), JSON_HEADERS)

    def error_index(self, error: BaseException | None) -> int:
        if error is None:
            return -1
        label = _status(error)
        with self._lock:
            return self.errors.setdefault(label, len(self.errors))

    def write(self) -> None:
        if self.written or not self.dir.parts:
            return
        self.written = True
        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * 6
        dtypes = (np.float64, np.float64, np.float64, np.int32, np.int16, np.float64)
        names = ("start", "latency_ms", "lag_ms", "model", "error", "cold_s")
        arrays = {n: np.asarray(c, d) for n, c, d in zip(names, columns, dtypes, strict=True)}
        arrays["errors"] = np.asarray(sorted(self.errors, key=self.errors.__getitem__), dtype=str)
        staged = self.dir / "records.partial.npz"
        with staged.open("wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
        os.replace(staged, self.dir / "records.npz")


def _status(error: BaseException) -> str:
    """A failure as the report counts it: the gRPC code's name, `HTTP 503`, or the error's type."""
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        return str(error.code().name)
    if isinstance(error, CatchResponseError):
        return str(error).split(":", 1)[0]
    return type(error).__name__


run = _Run()
traffic: Traffic[None] = Traffic()


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    # The request cap, if any, is read here: the budget must be in place before users start.
    options = environment.parsed_options
    if options is None or not options.many_dir:
        return
    plan = json.loads((Path(options.many_dir) / "plan.json").read_text())
    if plan.get("max_requests"):
        traffic.budget = RequestBudget(
            int(plan["max_requests"]), lambda: gevent.spawn(_finish, environment)
        )
        environment.events.request.add_listener(traffic.budget.complete)


@events.test_start.add_listener
def _on_start(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    assert options is not None  # run by locust's command line, which parses our options
    host = environment.host or ""
    check_loopback(host)
    directory = Path(options.many_dir)
    run.load(directory, host)
    plan = json.loads((directory / "plan.json").read_text())
    t0 = time.time() + _START_DELAY_S
    traffic.publish(Turn(None, schedule=Schedule(float(plan["rate"] or 0.0), t0)))
    (directory / "started.json").write_text(json.dumps({"t0": t0, "pid": os.getpid()}))
    gevent.spawn(_watch_stop, environment)


def _watch_stop(environment: Environment) -> None:
    while not (run.dir / "stop").exists():
        gevent.sleep(_WATCH_S)
    _finish(environment)


def _finish(environment: Environment) -> None:
    end_run(environment, traffic, _RPC_TIMEOUT_S + 1, run.write)


@events.test_stop.add_listener
def _on_stop(**_: Any) -> None:
    run.write()  # the run ended on locust's own bound (-t) before the controller's stop


class GrpcModels:
    """Predict over a channel of this user's own, to the model `model` names: the request's bytes
    go out as they are; the answer is read only for its trailing metadata."""

    request_type = "grpc"
    record = -1  # no traffic file: one request per signature

    def __init__(self, address: str, timeout_s: float, tls: ClientTls | None = None) -> None:
        self.timeout_s = timeout_s
        self.model = 0
        self.cold_s = math.nan
        self._client = GrpcClient.connect(address, timeout=timeout_s, max_message_bytes=-1, tls=tls)
        self._predict = self._client.raw("Predict")
        self._trailing: Iterable[tuple[str, Any]] = ()

    def _call(self, body: bytes, timeout: float) -> bytes:
        self._trailing = ()
        try:
            reply, call = self._predict.with_call(body, timeout=timeout)  # type: ignore[attr-defined]
        except grpc.RpcError as exc:
            self._trailing = exc.trailing_metadata() or ()  # type: ignore[attr-defined]
            raise
        self._trailing = call.trailing_metadata() or ()
        return bytes(reply)

    def send(self) -> tuple[float, float, int, BaseException | None, bytes]:
        body = run.grpc_request(self.model)
        start, ms, length, error = timed_call(self._call, body, self.timeout_s)
        self.cold_s = _cold(self._trailing)
        return start, ms, length, error, b""

    def close(self) -> None:
        self._client.close()


class RestModels:
    """POSTs to `/v1/models/NAME:predict` of the model `model` names over a keep-alive connection
    of this user's own; anything but 200 fails. The answer's headers are kept for the mark."""

    request_type = "POST"
    record = -1

    def __init__(self, address: str, timeout_s: float, tls: ClientTls | None = None) -> None:
        self.timeout_s = timeout_s
        self.model = 0
        self.cold_s = math.nan
        self._connection = http_connection(address, timeout_s, keep_headers=True, tls=tls)

    def post(self) -> tuple[int, bytes]:
        return self._connection.send(run.rest_request(self.model))

    def send(self) -> tuple[float, float, int, BaseException | None, bytes]:
        self._connection.answer_headers = []  # a failed exchange leaves none
        start, ms, length, error = timed_post(self)
        self.cold_s = _cold(self._connection.answer_headers)
        return start, ms, length, error, b""

    def close(self) -> None:
        self._connection.close()


class ManyUser(LoopUser):
    """Sends each request to the next model the picks name; records it with the cold mark."""

    traffic = traffic

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        # Made here, on the hub: a connection of its own (one shared by threads serializes them).
        kind = GrpcModels if run.protocol == "grpc" else RestModels
        host = self.host or ""
        self._sender = kind(host, _RPC_TIMEOUT_S, target_tls(host))

    def senders(self) -> list[Sender]:
        return [self._sender]

    def sending(self, turn: Turn[Any]) -> None:
        self._sender.model = run.picks.pick(next(run.sent))

    def record(self, turn: Turn[Any], sent: Sent) -> Completed:
        sender = self._sender
        error = run.error_index(sent.error)
        run.rows.append((sent.start, sent.ms, sent.lag_ms, sender.model, error, sender.cold_s))
        return sent.completed(turn.name)
