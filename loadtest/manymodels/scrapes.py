"""What a server loading models on demand says about itself, scraped from its Prometheus text.

    graphserve_model_loads_total{model, outcome="ok"|"failed"}      counters
    graphserve_model_evictions_total{model, reason="bytes"|"models"|"idle"}
    graphserve_cold_requests_total{model}
    graphserve_resident_bytes, graphserve_resident_versions         gauges
    process_resident_memory_bytes                                   (prometheus_client's)

A series the server does not expose is not reported (None), never 0: a server without loading on
demand exposes none of graphserve's, and a counter's series appear once they count something.
A counter's delta over a run is its last value minus its first (0 before its series appeared).
`Scrapes` keeps a run's: its first and last scrapes and every scrape's gauges and totals.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.scrape import fetch, samples

__all__ = ["FAMILIES", "Scrapes", "ServerScrape", "read_scrape", "scrape_server"]

_LOADS, _EVICTIONS, _COLD = (
    "graphserve_model_loads",
    "graphserve_model_evictions",
    "graphserve_cold_requests",
)
_RESIDENT, _VERSIONS = "graphserve_resident_bytes", "graphserve_resident_versions"
_RSS = "process_resident_memory_bytes"
FAMILIES = (_LOADS, _EVICTIONS, _COLD, _RESIDENT, _VERSIONS, _RSS)


@dataclass(frozen=True)
class ServerScrape:
    """One scrape: the families the server exposed, its gauges, and its counters by label."""

    at: float  # time.time() when it was asked for
    took_s: float  # how long the server took to answer (writing every family's text)
    present: frozenset[str]
    gauges: Mapping[str, float]  # family -> value, the families exposed
    loads: Mapping[tuple[str, str], float]  # (model, outcome) -> loads
    evictions: Mapping[tuple[str, str], float]  # (model, reason) -> evictions
    cold: Mapping[str, float]  # model -> cold requests

    def gauge(self, family: str) -> float | None:
        return self.gauges.get(family)

    @property
    def rss_bytes(self) -> float | None:
        return self.gauge(_RSS)

    @property
    def resident_bytes(self) -> float | None:
        return self.gauge(_RESIDENT)

    @property
    def resident_versions(self) -> float | None:
        return self.gauge(_VERSIONS)

    def loads_since(self, first: ServerScrape) -> float | None:
        """Loads (ok and failed) since `first`; None when the server does not count them."""
        return _delta_total(self.loads, first.loads) if _LOADS in self.present else None

    def evictions_since(self, first: ServerScrape) -> float | None:
        return _delta_total(self.evictions, first.evictions) if _EVICTIONS in self.present else None

    def has(self, family: str) -> bool:
        return family in self.present


def _delta_total(last: Mapping[Any, float], first: Mapping[Any, float]) -> float:
    return sum(value - first.get(key, 0.0) for key, value in last.items())


def read_scrape(text: str, at: float, took_s: float = 0.0) -> ServerScrape:
    """The families of FAMILIES in an exposition text; ValueError when it is not one."""
    present, found = samples(text, FAMILIES)
    gauges: dict[str, float] = {}
    loads: dict[tuple[str, str], float] = {}
    evictions: dict[tuple[str, str], float] = {}
    cold: dict[str, float] = {}
    for name, labels, value in found:
        model = labels.get("model", "")
        if name == f"{_LOADS}_total":
            loads[(model, labels.get("outcome", ""))] = value
        elif name == f"{_EVICTIONS}_total":
            evictions[(model, labels.get("reason", ""))] = value
        elif name == f"{_COLD}_total":
            cold[model] = value
        elif name in (_RESIDENT, _VERSIONS, _RSS):
            gauges[name] = gauges.get(name, 0.0) + value
    return ServerScrape(at, took_s, frozenset(present), gauges, loads, evictions, cold)


def scrape_server(
    url: str, timeout_s: float = 2.0, tls: ClientTls | None = None
) -> ServerScrape | None:
    """GET `url` (over TLS with `tls` when it is https://) and read it; None when it does not
    answer or answers something else."""
    at = time.time()
    text = fetch(url, timeout_s, tls)
    if text is None:
        return None
    try:
        return read_scrape(text, at, time.time() - at)
    except ValueError:
        return None


class Scrapes:
    """The server's metrics over the run: the first and last scrapes (whose counters' difference
    is the run's) and every scrape's gauges and totals, appended to OUT/raw/scrapes.jsonl too."""

    def __init__(
        self, url: str | None, log: Path | None = None, tls: ClientTls | None = None
    ) -> None:
        self.url, self.log, self.tls = url, log, tls
        self.first: ServerScrape | None = None
        self.last: ServerScrape | None = None
        self.series: list[tuple[float, dict[str, float | None]]] = []  # (at, values)

    def take(self) -> None:
        if self.url is None:
            return
        scrape = scrape_server(self.url, tls=self.tls)
        if scrape is None:
            return
        self.first = self.first or scrape
        self.last = scrape
        point = {
            "rss_bytes": scrape.rss_bytes,
            "resident_bytes": scrape.resident_bytes,
            "resident_versions": scrape.resident_versions,
            "loads": scrape.loads_since(self.first),
            "evictions": scrape.evictions_since(self.first),
            "scrape_ms": round(scrape.took_s * 1000, 1),
        }
        self.series.append((scrape.at, point))
        if self.log is not None:
            with self.log.open("a") as f:
                f.write(json.dumps({"at": scrape.at, **point}) + "\n")
