"""Clients that give up, at random moments, on a real `graphserve serve graph` that batches: every
request not given up is answered right, every one given up is counted where it was, what waited
is not run, and nothing is left behind.

    python -m tools.fuzz.cancel --duration 20s [--seed S] [--out FILE.json] [--grpc-front-end auto]

The server is a child process on free ports of 127.0.0.1 serving the example mlp (exported here
into a temporary directory), with metrics on and batching (BATCHING: up to MAX_BATCH rows, a batch
timeout long enough that requests wait in the queue), REST_WORKERS REST threads and GRPC_WORKERS
gRPC ones, all started with the server. For `--duration`, GRPC_USERS gRPC clients (GrpcClient's
`.future()` calls) and REST_USERS REST clients send predicts of 1 to 3 rows of INPUTS, one at a
time, and each request is, by a seeded draw:

    gRPC   waited for (a 30 s deadline); cancelled at a random moment within GIVE_UP_S; or sent
           with a short deadline (SHORT_DEADLINE_S) and waited for
    REST   sent on the client's keep-alive connection and waited for; or sent on a connection
           of its own that is closed, unread, at a random moment within GIVE_UP_S

What is checked (`Run.violations`); any violation exits 1:

1. every answer read has the values the model gives those rows (computed here from the
   example's seeded weights), and no request fails otherwise (no UNAVAILABLE, no 500);
2. the server's counts of the run (metrics scraped before and after, once they stop moving) add
   up, per protocol: no status but OK, CANCELLED and DEADLINE_EXCEEDED; OK at least what was
   answered; OK, CANCELLED and DEADLINE_EXCEEDED at most what was sent (a call cancelled before
   it left its client never arrives); CANCELLED at most what clients gave up, DEADLINE_EXCEEDED
   at most the deadlines clients saw; each cancellation counted once with its stage;
3. the model ran (the batcher's `graphserve_batched_requests_total`) every request answered OK
   and every one cancelled while running, and of the others only ones whose deadline passed
   after their batch was taken: none cancelled in the queue or waiting for a thread, none that
   expired in the queue; it ran at least the rows of every answer read; none was turned away;
4. the server is alive and answers a predict right afterwards;
5. once idle, it has the threads and open file descriptors it had before the run
   (/proc/PID/status and /proc/PID/fd).

The JSON summary (`Run.summary`): what clients sent, had answered (requests and rows), gave up
on (`cancelled_by_client`: gRPC calls cancelled before their answer came, REST connections closed
unread) and saw pass their short deadline, and the wrong answers; the server's counts of the run
(requests by status, cancellations by stage, the batcher's batches, requests, rows, cancelled
and expired); what the server freed unrun (`not_run`); the rows the model ran against the rows
answered; crashes, leaked threads and descriptors, seconds, the seed and the commit. `make fuzz`
writes it to tools/bench/results/cancel.json; tests/test_fuzz_cancel.py runs it for a few seconds on
the threaded gRPC front end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphserve.core import client
from graphserve.core.batchingparams import BatchingParameters
from graphserve.core.defaults import DEFAULT_METRICS_PATH
from graphserve.core.httpclient import HttpConnection
from graphserve.core.processes import ServerProcess
from graphserve.serving.deadline import POOL, QUEUE, RUNNING
from tools.fuzz.http_raw import ChildServer, _environment, write_summary

__all__ = [
    "BATCHING",
    "Inputs",
    "Run",
    "ServerCounts",
    "Tally",
    "grpc_user",
    "main",
    "rest_user",
]

MODEL = "mlp"
PREDICT = client.rest_path(MODEL, "predict")
MAX_BATCH = 8
BATCHING = BatchingParameters(
    max_batch_size=MAX_BATCH, batch_timeout_micros=20_000, num_batch_threads=1
)
GRPC_USERS = 4
REST_USERS = 4
# Every one started with the server (gRPC primes its workers, REST starts at least four), so the
# threads counted before the run are all a run may end with: more after it is a leak.
REST_WORKERS = 4
GRPC_WORKERS = 8
GIVE_UP_S = BATCHING.batch_timeout_micros / 1e6  # clients give up within this, at random
SHORT_DEADLINE_S = (0.002, GIVE_UP_S)
INPUTS = 64  # distinct rows, so that a row answered for another request shows
ROWS = (1, 2, 3)  # rows in one request
STATUSES = ("OK", "CANCELLED", "DEADLINE_EXCEEDED")  # the only ones a run may end with
STAGES = (POOL, QUEUE, RUNNING)
PROTOCOLS = ("grpc", "rest")


# ---------------------------------------------------------------------------------------------
# What clients send


class Inputs:
    """INPUTS rows of the mlp's input and the model's answers for them; each request is
    `rows` rows from `start`, encoded once for either protocol."""

    def __init__(self, seed: int) -> None:
        from graphserve.model.examples import mlp

        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal((INPUTS, 784)).astype(np.float32)
        self.expected = np.asarray(mlp.build()(self.x), dtype=np.float32)
        self.grpc: dict[tuple[int, int], bytes] = {}
        self.rest: dict[tuple[int, int], bytes] = {}
        for rows in ROWS:
            for start in range(INPUTS - rows + 1):
                x = self.x[start : start + rows]
                request = client.predict_request(MODEL, {"images": x})
                self.grpc[start, rows] = request.SerializeToString()
                body = json.dumps({"instances": x.tolist()}).encode()
                self.rest[start, rows] = (
                    f"POST {PREDICT} HTTP/1.1\r\nHost: cancel\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode() + body

    def draw(self, rng: random.Random) -> tuple[int, int]:
        rows = rng.choice(ROWS)
        return rng.randrange(INPUTS - rows + 1), rows

    def wrong(self, got: Any, start: int, rows: int) -> str | None:
        """None when `got` is the model's answer for the request, else what is wrong."""
        got = np.asarray(got, dtype=np.float32)
        want = self.expected[start : start + rows]
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            return f"rows {start}..{start + rows - 1}: got {got.tolist()!r:.300}"
        return None


@dataclass
class Tally:
    """One client's requests, by what became of them."""

    protocol: str
    sent: int = 0
    answered: int = 0  # answers read, their values checked
    answered_rows: int = 0
    cancelled: int = 0  # calls cancelled, connections closed before the answer was read
    deadline_exceeded: int = 0  # short deadlines that passed before the answer
    wrong: list[str] = field(default_factory=list)  # wrong values, or a failure of another kind


def grpc_user(address: str, inputs: Inputs, seed: int, until: float, tally: Tally) -> None:
    """Predicts until `until`: waited for, cancelled at a random moment, or with a short
    deadline, a third each."""
    import grpc

    rng = random.Random(seed)
    with client.GrpcClient.connect(address) as stub:
        predict = stub.method("Predict")
        while time.monotonic() < until:
            start, rows = inputs.draw(rng)
            kind = rng.randrange(3)
            timeout = rng.uniform(*SHORT_DEADLINE_S) if kind == 2 else 30.0
            call = predict.future(inputs.grpc[start, rows], timeout=timeout)
            tally.sent += 1
            if kind == 1:
                time.sleep(rng.uniform(0, GIVE_UP_S))
                if call.cancel():
                    tally.cancelled += 1
                    continue
            try:
                outputs = client.predict_outputs(call.result())
            except grpc.RpcError as exc:
                if kind == 2 and exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    tally.deadline_exceeded += 1
                else:
                    tally.wrong.append(f"gRPC rows {start}+{rows}: {exc.code()} {exc.details()}")
                continue
            (logits,) = outputs.values()
            problem = inputs.wrong(logits, start, rows)
            if problem is None:
                tally.answered += 1
                tally.answered_rows += rows
            else:
                tally.wrong.append(f"gRPC {problem}")


def rest_user(address: str, inputs: Inputs, seed: int, until: float, tally: Tally) -> None:
    """Predicts until `until`: half waited for on a keep-alive connection, half sent on a
    connection of their own that is closed, unread, at a random moment."""
    rng = random.Random(seed)
    host, port = address.rsplit(":", 1)
    connection = HttpConnection(address, timeout=30)
    try:
        while time.monotonic() < until:
            start, rows = inputs.draw(rng)
            request = inputs.rest[start, rows]
            if rng.random() < 0.5:
                with socket.create_connection((host, int(port)), timeout=30) as sock:
                    sock.sendall(request)
                    tally.sent += 1
                    time.sleep(rng.uniform(0, GIVE_UP_S))
                tally.cancelled += 1
                continue
            tally.sent += 1
            try:
                status, body = connection.send(request)
            except OSError as exc:
                tally.wrong.append(f"REST rows {start}+{rows}: {exc!r}")
                continue
            if status != 200:
                tally.wrong.append(f"REST rows {start}+{rows}: {status} {body[:300]!r}")
                continue
            problem = inputs.wrong(json.loads(body)["predictions"], start, rows)
            if problem is None:
                tally.answered += 1
                tally.answered_rows += rows
            else:
                tally.wrong.append(f"REST {problem}")
    finally:
        connection.close()


# ---------------------------------------------------------------------------------------------
# The server


@dataclass(frozen=True)
class ServerCounts:
    """The counters of one scrape that a run reads, for model MODEL."""

    requests: dict[str, dict[str, int]]  # protocol -> status -> requests
    cancelled: dict[str, dict[str, int]]  # protocol -> stage -> requests
    batch: dict[str, int]  # the batcher's: batches, requests, rows, cancelled, expired, ...

    @classmethod
    def parse(cls, text: str) -> ServerCounts:
        from prometheus_client.parser import text_string_to_metric_families

        requests: dict[str, Counter[str]] = {p: Counter() for p in PROTOCOLS}
        cancelled: dict[str, Counter[str]] = {p: Counter() for p in PROTOCOLS}
        batch: Counter[str] = Counter()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = sample.labels
                if sample.name == "graphserve_requests_total" and labels["model"] == MODEL:
                    requests[labels["protocol"]][labels["status"]] += int(sample.value)
                elif sample.name == "graphserve_cancelled_requests_total":
                    cancelled[labels["protocol"]][labels["stage"]] += int(sample.value)
                elif family.name in _BATCH_FAMILIES and labels.get("model") == MODEL:
                    batch[_BATCH_FAMILIES[family.name]] += int(sample.value)
        return cls(
            {p: dict(c) for p, c in requests.items()},
            {p: dict(c) for p, c in cancelled.items()},
            dict(batch),
        )

    def since(self, before: ServerCounts) -> ServerCounts:
        """What was counted between `before` and this scrape."""

        def minus(now: dict[str, int], then: dict[str, int]) -> dict[str, int]:
            return {k: v - then.get(k, 0) for k, v in now.items() if v - then.get(k, 0)}

        return ServerCounts(
            {p: minus(self.requests[p], before.requests[p]) for p in PROTOCOLS},
            {p: minus(self.cancelled[p], before.cancelled[p]) for p in PROTOCOLS},
            minus(self.batch, before.batch),
        )


_BATCH_FAMILIES = {
    "graphserve_batches": "batches",
    "graphserve_batched_requests": "requests",
    "graphserve_batched_rows": "rows",
    "graphserve_batch_rejected_requests": "rejected",
    "graphserve_batch_cancelled_requests": "cancelled",
    "graphserve_batch_expired_requests": "expired",
}


class CancelServer(ChildServer):
    """`graphserve serve graph` of BASE/mlp with metrics, BATCHING from `batching_file` and the
    threads above, as a child process on free ports of 127.0.0.1; its log to `log_path`."""

    def __init__(
        self, model_dir: Path, batching_file: Path, log_path: Path, front_end: str
    ) -> None:
        args = [
            "graph",
            "--model-base-path",
            str(model_dir),
            "--model-name",
            MODEL,
            "--batching-parameters-file",
            str(batching_file),
            "--metrics",
            "--grpc-front-end",
            front_end,
            "--grpc-workers",
            str(GRPC_WORKERS),
            "--rest-workers",
            str(REST_WORKERS),
            "--file-system-poll-wait-seconds",
            "0",
        ]
        self.process = ServerProcess.on_free_ports(args, MODEL, log_path)

    @property
    def grpc(self) -> str:
        return self.process.grpc_address

    @property
    def rest(self) -> str:
        assert self.process.rest_address is not None
        return self.process.rest_address

    def probe(self, inputs: Inputs) -> str | None:
        """A predict of three rows on a new connection: None when answered right, else what
        went wrong."""
        connection = HttpConnection(self.rest, timeout=30)
        try:
            status, body = connection.send(inputs.rest[0, 3])
        except OSError as exc:
            return f"a predict failed: {exc!r}"
        finally:
            connection.close()
        if status != 200:
            return f"a predict got {status}: {body[:300]!r}"
        return inputs.wrong(json.loads(body)["predictions"], 0, 3)

    def counts(self) -> ServerCounts:
        connection = HttpConnection(self.rest, timeout=30)
        try:
            reply = connection.request("GET", DEFAULT_METRICS_PATH, None, {})
        finally:
            connection.close()
        if reply.status != 200:
            raise RuntimeError(f"the metrics answered {reply.status}: {reply.body[:300]!r}")
        return ServerCounts.parse(reply.body.decode())

    def settled_counts(self, wait_s: float = 10.0) -> ServerCounts:
        """The counters once two scrapes half a second apart agree (requests still queued or
        waiting for a thread have ended), or after `wait_s`."""
        deadline = time.monotonic() + wait_s
        last = self.counts()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = self.counts()
            if now == last:
                return now
            last = now
        return last


# ---------------------------------------------------------------------------------------------
# A run


@dataclass
class Run:
    """What the clients and the server counted in one run, and how the server ended it."""

    tallies: list[Tally]
    server: ServerCounts  # counted during the run
    crashed: bool
    probe: str | None  # what went wrong with the predict after the run
    baseline: tuple[int, int]  # threads, descriptors before the run
    after: tuple[int, int]  # ... and once idle after it
    seconds: float
    seed: int
    front_end: str

    def client(self, protocol: str | None = None) -> dict[str, Any]:
        """The clients' totals, of one protocol or all."""
        tallies = [t for t in self.tallies if protocol in (None, t.protocol)]
        totals: dict[str, Any] = {
            key: sum(getattr(t, key) for t in tallies)
            for key in ("sent", "answered", "answered_rows", "cancelled", "deadline_exceeded")
        }
        totals["wrong"] = sum(len(t.wrong) for t in tallies)
        return totals

    @property
    def leaked(self) -> tuple[int, int]:
        return max(self.after[0] - self.baseline[0], 0), max(self.after[1] - self.baseline[1], 0)

    def violations(self) -> list[str]:
        found = [w for t in self.tallies for w in t.wrong[:10]]
        if self.crashed:
            found.append("the server died")
        elif self.probe is not None:
            found.append(f"after the run, {self.probe}")
        if self.leaked != (0, 0):
            found.append(f"threads, fds before {self.baseline}, after {self.after}")
        mine = self.client()
        if not (mine["answered"] and mine["cancelled"]):
            found.append(f"the run answered {mine['answered']}, cancelled {mine['cancelled']}")
        for protocol in PROTOCOLS:
            found += self._counts_add_up(protocol)
        found += self._model_ran_what_it_should()
        return found

    def _counts_add_up(self, protocol: str) -> list[str]:
        mine, theirs = self.client(protocol), self.server.requests[protocol]
        ok, cancelled, expired = (theirs.get(s, 0) for s in STATUSES)
        stages = self.server.cancelled[protocol]
        checks = {
            f"statuses other than {STATUSES}": set(theirs) <= set(STATUSES),
            "OK < answered": ok >= mine["answered"],
            "OK + CANCELLED + DEADLINE_EXCEEDED > sent": ok + cancelled + expired <= mine["sent"],
            "CANCELLED > given up": cancelled <= mine["cancelled"],
            "DEADLINE_EXCEEDED > expired at the client": expired <= mine["deadline_exceeded"],
            "cancelled by stage != CANCELLED": sum(stages.values()) == cancelled,
        }
        return [
            f"{protocol}: {what} (clients {mine}, server {theirs}, stages {stages})"
            for what, holds in checks.items()
            if not holds
        ]

    def _model_ran_what_it_should(self) -> list[str]:
        ok = sum(r.get("OK", 0) for r in self.server.requests.values())
        expired = sum(r.get("DEADLINE_EXCEEDED", 0) for r in self.server.requests.values())
        running = sum(c.get(RUNNING, 0) for c in self.server.cancelled.values())
        queue = sum(c.get(QUEUE, 0) for c in self.server.cancelled.values())
        batch = self.server.batch
        ran = batch.get("requests", 0)
        least, most = ok + running, ok + running + expired - batch.get("expired", 0)
        checks = {
            f"the model ran {ran} requests, not {least} to {most}": least <= ran <= most,
            "the model ran fewer rows than were answered": (
                batch.get("rows", 0) >= self.client()["answered_rows"]
            ),
            "the batcher dropped more than were cancelled in the queue": (
                batch.get("cancelled", 0) <= queue
            ),
            "the batcher expired more than DEADLINE_EXCEEDED": batch.get("expired", 0) <= expired,
            "the batcher turned requests away": not batch.get("rejected", 0),
        }
        return [f"{what} (batcher {batch})" for what, holds in checks.items() if not holds]

    def summary(self) -> dict[str, Any]:
        """The JSON summary `main` writes."""
        server = self.server
        statuses = Counter[str]()
        stages = Counter[str]()
        for protocol in PROTOCOLS:
            statuses.update(server.requests[protocol])
            stages.update(server.cancelled[protocol])
        batch = {k: int(server.batch.get(k, 0)) for k in _BATCH_FAMILIES.values()}
        mine = self.client()
        violations = self.violations()
        return {
            "environment": _environment(),
            "seed": self.seed,
            "server": {
                "grpc_front_end": self.front_end,
                "batching": {
                    "max_batch_size": BATCHING.max_batch_size,
                    "batch_timeout_ms": BATCHING.batch_timeout_micros / 1000,
                    "num_batch_threads": BATCHING.num_batch_threads,
                },
                "grpc_workers": GRPC_WORKERS,
                "rest_workers": REST_WORKERS,
            },
            "clients": {
                "grpc": GRPC_USERS,
                "rest": REST_USERS,
                "give_up_within_ms": GIVE_UP_S * 1000,
                "short_deadline_ms": [s * 1000 for s in SHORT_DEADLINE_S],
            },
            "sent": mine["sent"],
            "answered": mine["answered"],
            "wrong": mine["wrong"],
            "cancelled_by_client": mine["cancelled"],
            "deadline_exceeded_at_client": mine["deadline_exceeded"],
            "by_protocol": {p: self.client(p) for p in PROTOCOLS},
            "server_counts": {
                "requests": {s: int(statuses[s]) for s in STATUSES} | _ints(statuses),
                "requests_by_protocol": {p: _ints(server.requests[p]) for p in PROTOCOLS},
                "cancelled_by_stage": {s: int(stages[s]) for s in STAGES} | _ints(stages),
                "cancelled_by_protocol": {p: _ints(server.cancelled[p]) for p in PROTOCOLS},
                "batch": batch,
            },
            "not_run": {
                "cancelled_waiting_for_a_thread": int(stages[POOL]),
                "cancelled_before_the_model": int(stages[QUEUE]),
                "freed_from_the_batch_queue": batch["cancelled"] + batch["expired"],
                "total": int(stages[POOL] + stages[QUEUE]) + batch["expired"],
            },
            "rows": {
                "run": batch["rows"],
                "answered": mine["answered_rows"],
                "run_unread": batch["rows"] - mine["answered_rows"],
            },
            "crashes": int(self.crashed),
            "threads": _resource(self.baseline[0], self.after[0]),
            "fds": _resource(self.baseline[1], self.after[1]),
            "violation_count": len(violations),
            "violations": violations[:50],
            "seconds": round(self.seconds, 1),
            "passed": not violations,
        }


def _ints(counts: Mapping[str, float]) -> dict[str, int]:
    return {k: int(v) for k, v in sorted(counts.items())}


def _resource(baseline: int, after: int) -> dict[str, int]:
    return {"baseline": baseline, "after": after, "leaked": max(after - baseline, 0)}


def _user(server: CancelServer, inputs: Inputs, seed: int, until: float, tally: Tally) -> None:
    """One client of `tally.protocol`; what ends it early is a failure of the run."""
    try:
        if tally.protocol == "grpc":
            grpc_user(server.grpc, inputs, seed, until, tally)
        else:
            rest_user(server.rest, inputs, seed, until, tally)
    except Exception as exc:  # reported with the wrong answers
        tally.wrong.append(f"{tally.protocol} client stopped: {exc!r}")


def drive(server: CancelServer, inputs: Inputs, seconds: float, seed: int, front_end: str) -> Run:
    """The users against `server` for `seconds`, then its counts, its health and its threads
    and descriptors once idle."""
    started = time.monotonic()
    for _ in range(3):  # the first runs of the model and of every path, before the baseline
        if (failure := server.probe(inputs)) is not None:
            raise RuntimeError(f"the server does not answer: {failure}")
    time.sleep(1.0)
    baseline = server.resources()
    before = server.counts()
    until = time.monotonic() + seconds
    tallies = [Tally("grpc") for _ in range(GRPC_USERS)] + [
        Tally("rest") for _ in range(REST_USERS)
    ]
    users = [
        threading.Thread(
            target=_user,
            args=(server, inputs, seed * 1000 + i, until, tally),
            name=f"user-{i}",
        )
        for i, tally in enumerate(tallies)
    ]
    for user in users:
        user.start()
    for user in users:
        user.join(seconds + 60)
    if any(user.is_alive() for user in users):
        raise RuntimeError("a client is still waiting a minute after the run")
    crashed = not server.alive()
    counts = before.since(before) if crashed else server.settled_counts().since(before)
    probe = None if crashed else server.probe(inputs)
    after = baseline if crashed else server.settle(baseline, 15.0)
    return Run(
        tallies,
        counts,
        crashed,
        probe,
        baseline,
        after,
        time.monotonic() - started,
        seed,
        front_end,
    )


# ---------------------------------------------------------------------------------------------
# The command


def _duration(text: str) -> float:
    from graphserve.core.units import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=_duration, required=True, help="20s, 1m, ...")
    parser.add_argument("--seed", type=int, default=0, help="the clients' draws (default 0)")
    parser.add_argument("--out", type=Path, help="write the JSON summary here")
    parser.add_argument(
        "--grpc-front-end",
        choices=("auto", "threads", "asyncio"),
        default="auto",
        help="the server's (default auto: asyncio, as batching is on)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from graphserve.exporter import ExportSpec, export_model

    started = time.monotonic()
    inputs = Inputs(args.seed)
    with tempfile.TemporaryDirectory(prefix="fuzz-cancel-") as work:
        base = Path(work) / "models"
        export_model(ExportSpec(source=f"examples:{MODEL}", name=MODEL, base_path=base))
        batching_file = Path(work) / "batching.pbtxt"
        batching_file.write_text(BATCHING.to_text())
        log_path = Path(work) / "server.log"
        with CancelServer(base / MODEL, batching_file, log_path, args.grpc_front_end) as server:
            print(
                f"serving after {time.monotonic() - started:.0f} s; {args.duration:g} s of load",
                file=sys.stderr,
            )
            run = drive(server, inputs, args.duration, args.seed, args.grpc_front_end)
            log_tail = server.process.log_tail(40)
    summary = run.summary()
    if args.out is not None:
        write_summary("cancel", summary, args.out)
    _report(summary, log_tail)
    return 0 if summary["passed"] else 1


def _report(summary: dict[str, Any], log_tail: str) -> None:
    counts = summary["server_counts"]
    print(
        f"{summary['sent']} sent in {summary['seconds']:g} s: {summary['answered']} answered, "
        f"{summary['cancelled_by_client']} given up, {summary['deadline_exceeded_at_client']} "
        f"past their deadline, {summary['wrong']} wrong; server {counts['requests']}, cancelled "
        f"{counts['cancelled_by_stage']}, batcher {counts['batch']}; rows {summary['rows']}; "
        f"{summary['crashes']} crashes, threads {summary['threads']}, fds {summary['fds']}",
        file=sys.stderr,
    )
    for violation in summary["violations"]:
        print(f"VIOLATION {violation}", file=sys.stderr)
    if summary["violations"]:
        print(f"\nserver log:\n{log_tail}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
