"""The many-models bench's servers, its requests and its readings of a server's metrics.

Every server is `graphserve serve graph --model-config-file F --load-on-demand --metrics`, a child
process on loopback (`serving`). Requests are REST Predict calls of the project's HTTP client
(`Client`); an answer is cold when it carries `x-graphserve-cold-load`. The server's own figures
are read from its Prometheus page (`scrape`: loads, load seconds, resident bytes and versions,
RSS).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from graphserve.core.defaults import DEFAULT_METRICS_PATH
from graphserve.core.httpclient import HttpConnection
from graphserve.core.processes import ServerProcess
from tools.bench.many.plan import DEFAULT_ENV
from tools.bench.timing import timing_of

__all__ = [
    "MB",
    "MODEL",
    "REQUEST_TIMEOUT_S",
    "Answer",
    "Client",
    "Scrape",
    "Server",
    "scrape",
    "scrape_sample",
    "serving",
    "timing",
    "wait_resident",
]

MODEL = "mlp"
INPUT, FEATURES = "images", 784  # the mlp's serving_default input
REQUEST_TIMEOUT_S = 60.0
MB = 1e6


class Server(ServerProcess):
    """`serve graph --model-config-file CONFIG --load-on-demand --metrics ...`, ready when
    `probe_model` answers a Predict with 200 (M1's clock: `ready_s`), or, without one, when the
    REST port serves the metrics page."""

    probe_model: str | None = None
    cold_load_s: float | None = None  # the first answer's x-graphserve-cold-load

    def is_ready(self) -> bool:
        assert self.rest_address is not None
        connection = HttpConnection(self.rest_address, REQUEST_TIMEOUT_S)
        try:
            if self.probe_model is None:
                return connection.request("GET", DEFAULT_METRICS_PATH, None, {}).status == 200
            reply = _predict_reply(connection, self.probe_model)
        except OSError:
            return False
        finally:
            connection.close()
        if reply.status == 200:
            cold = reply.headers.get("x-graphserve-cold-load")
            self.cold_load_s = None if cold is None else float(cold)
        return reply.status == 200


@contextmanager
def _environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    """os.environ with `changes` (None unsets) while the block runs: a server started in it
    inherits them (ServerProcess passes this process's environment on)."""
    saved = {name: os.environ.get(name) for name in changes}
    try:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def serving(
    config: Path,
    flags: Sequence[str],
    log: Path,
    *,
    probe_model: str | None = None,
    env: Mapping[str, str | None] = DEFAULT_ENV,
    record: list[dict[str, Any]] | None = None,
) -> Iterator[Server]:
    """A started server of `config` with `flags`, stopped after the block; its command and exit
    code appended to `record`."""
    args = ["graph", "--model-config-file", str(config), "--load-on-demand", "--metrics", *flags]
    server = cast(Server, Server.on_free_ports(args, probe_model or "", log))  # cls's own
    server.probe_model = probe_model
    with _environment(env):
        server.start(timeout=300.0, poll_s=0.05)
    entry = {"args": server.args[2:], "env": dict(env), "ready_s": round(server.ready_s or 0, 3)}
    try:
        yield server
    finally:
        entry["exit_code"] = server.stop()
        if record is not None:
            record.append(entry)


def _body() -> bytes:
    x = np.random.default_rng(7).normal(size=(1, FEATURES)).round(4)
    return json.dumps({"inputs": {INPUT: x.tolist()}}).encode()


_BODY = _body()
_HEADERS = {"Content-Type": "application/json"}


def _predict_reply(connection: HttpConnection, model: str) -> Any:
    return connection.request("POST", f"/v1/models/{model}:predict", _BODY, _HEADERS)


@dataclass(frozen=True)
class Answer:
    at: float  # time.monotonic() when sent
    ms: float
    cold_s: float | None  # the wait the server marked (x-graphserve-cold-load); None: warm
    problem: str  # "" when answered 200

    @property
    def cold(self) -> bool:
        return self.cold_s is not None


class Client:
    """One keep-alive REST connection sending Predict for the mlp's input."""

    def __init__(self, address: str) -> None:
        self.connection = HttpConnection(address, REQUEST_TIMEOUT_S)

    def predict(self, model: str) -> Answer:
        at = time.monotonic()
        started = time.perf_counter()
        try:
            reply = _predict_reply(self.connection, model)
        except OSError as exc:
            return Answer(at, (time.perf_counter() - started) * 1e3, None, f"{model}: {exc}")
        ms = (time.perf_counter() - started) * 1e3
        cold = reply.headers.get("x-graphserve-cold-load")
        problem = "" if reply.status == 200 else f"{model}: {reply.status} {reply.text[:200]}"
        return Answer(at, ms, None if cold is None else float(cold), problem)

    def close(self) -> None:
        self.connection.close()


@dataclass(frozen=True)
class Scrape:
    at: float  # time.monotonic()
    rss: float  # process_resident_memory_bytes
    resident_bytes: float
    resident_versions: float
    loads: float  # graphserve_model_loads_total{outcome="ok"}, all models
    load_seconds: float
    evictions: float
    model_bytes: dict[str, float]  # graphserve_model_resident_bytes by model


def scrape(address: str) -> Scrape:
    """The server's metrics page, read; OSError when it does not answer 200."""
    from prometheus_client.parser import text_string_to_metric_families

    connection = HttpConnection(address, 10.0)
    try:
        reply = connection.request("GET", DEFAULT_METRICS_PATH, None, {})
    finally:
        connection.close()
    if reply.status != 200:
        raise OSError(f"{address}{DEFAULT_METRICS_PATH}: {reply.status}")
    total: dict[str, float] = {}
    model_bytes: dict[str, float] = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            if sample.labels.get("outcome") == "failed":
                continue
            if sample.name == "graphserve_model_resident_bytes":
                model_bytes[sample.labels["model"]] = sample.value
            total[sample.name] = total.get(sample.name, 0.0) + sample.value
    return Scrape(
        at=time.monotonic(),
        rss=total.get("process_resident_memory_bytes", 0.0),
        resident_bytes=total.get("graphserve_resident_bytes", 0.0),
        resident_versions=total.get("graphserve_resident_versions", 0.0),
        loads=total.get("graphserve_model_loads_total", 0.0),
        load_seconds=total.get("graphserve_model_load_seconds_total", 0.0),
        evictions=total.get("graphserve_model_evictions_total", 0.0),
        model_bytes=model_bytes,
    )


def scrape_sample(address: str, t0: float) -> dict[str, float] | None:
    """One scrape as a sample: RSS, resident bytes and versions, loads and evictions, by
    seconds since `t0`; None when the server did not answer."""
    started = time.perf_counter()
    try:
        s = scrape(address)
    except OSError:
        return None
    return {
        "t_s": round(s.at - t0, 2),
        "rss_mb": round(s.rss / MB, 2),
        "resident_mb": round(s.resident_bytes / MB, 2),
        "resident_versions": s.resident_versions,
        "loads": s.loads,
        "evictions": s.evictions,
        "scrape_ms": round((time.perf_counter() - started) * 1e3, 1),
    }


def wait_resident(address: str, versions: float, timeout: float, settle: float = 2.0) -> Scrape:
    """Wait until the server holds `versions` resident versions, then `settle` s more; the
    scrape after. RuntimeError past `timeout`."""
    deadline = time.monotonic() + timeout
    while (s := scrape(address)).resident_versions != versions:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{address}: {s.resident_versions:g} versions resident after {timeout:g} s, "
                f"expected {versions:g}"
            )
        time.sleep(0.25)
    time.sleep(settle)
    return scrape(address)


def timing(values: Sequence[float]) -> dict[str, Any] | None:
    return timing_of(list(values)).to_json() if values else None
