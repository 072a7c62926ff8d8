"""What a many-models run is asked for (`ManySpec`) and where its load goes (`Target`): the
controller (manymodels.run) takes them, and the analysis reads them for the report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from graphserve.core.tls import ClientTls
from graphserve.loadtest.manymodels.popularity import Popularity

__all__ = ["ManySpec", "Target"]


@dataclass(frozen=True)
class Target:
    """Where the load goes: "grpc" to HOST:PORT (grpcs://HOST:PORT over TLS), or "rest" to
    http(s)://HOST:PORT; `tls` is what it is dialed with (None: plaintext)."""

    protocol: str
    address: str
    tls: ClientTls | None = None


@dataclass(frozen=True)
class ManySpec:
    """One many-models run. `rate` (open loop, req/s over all models, sent by `users` threads) or
    none (closed loop: `users` back to back). It ends after `duration_s`, or when `max_requests`
    are answered. Gates: `slo` (loadtest/results/slo.py's grammar, with all, warm or cold in
    place of an arm), `max_failure_ratio`, `min_hit_ratio`."""

    target: str
    popularity: Popularity
    rate: float | None = None
    users: int = 16
    duration_s: float = 30.0
    max_requests: int | None = None
    metrics_url: str | None = None
    rest_port: int | None = None
    scrape_every_s: float = 2.0
    seed: int = 0
    signature_name: str = "serving_default"
    batch_size: int = 1
    slo: tuple[str, ...] = ()
    max_failure_ratio: float | None = None
    min_hit_ratio: float | None = None
    top: int = 20  # model rows the pages show one by one
    tls: ClientTls | None = None  # how the target is dialed: the --tls-* options, or None
    # a traffic file's predict requests (of traffic_model; None: every model's), each group of
    # models sent those that fit its signature, in order, cycling, in place of one payload
    traffic: Path | None = None
    traffic_model: str | None = None
