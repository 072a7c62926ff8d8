"""Server-side time from Prometheus: scrape a target before and after a window, subtract.

Two metric dialects are read, each for one model:

    graphserve      graphserve_requests_total{model=...}              (counter)
                    graphserve_request_latency_seconds{model=...}     (histogram, seconds)
                    graphserve_runtime_latency_seconds{model=...}     (histogram, seconds)
    TF Serving      :tensorflow:serving:request_count{model_name=...} (counter)
    (--monitoring_config_file)
                    :tensorflow:serving:request_latency{model_name=...} (histogram, microseconds)
                    :tensorflow:serving:runtime_latency{model_name=...} (histogram, microseconds)

Only sums and counts are used: mean request time and mean model time over a window, and the
request count of a step (which a test compares with the client's). `fetch` and `samples` read any
other family (the many-models load test's counters and gauges).

An `https://` URL is scraped over TLS with the options given (`tls`; the system's CAs without):
the servers serve their metrics on the REST port, with its certificate.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from graphserve.core.httpclient import HttpConnection
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.targets import scheme_tls

__all__ = ["Sample", "Snapshot", "fetch", "get_text", "samples", "scrape", "snapshot_from_text"]

Sample = tuple[str, dict[str, str], float]  # sample name, labels, value

# family name -> (field of Snapshot, model label, unit in seconds)
_FAMILIES: dict[str, tuple[str, str, float]] = {
    "graphserve_requests": ("requests", "model", 1.0),
    "graphserve_request_latency_seconds": ("request", "model", 1.0),
    "graphserve_runtime_latency_seconds": ("runtime", "model", 1.0),
    ":tensorflow:serving:request_count": ("requests", "model_name", 1.0),
    ":tensorflow:serving:request_latency": ("request", "model_name", 1e-6),
    ":tensorflow:serving:runtime_latency": ("runtime", "model_name", 1e-6),
}


@dataclass(frozen=True)
class Snapshot:
    """Cumulative counters of one model at one moment; `minus` gives a window's share."""

    requests: float = 0.0
    request_count: float = 0.0
    request_sum_s: float = 0.0
    runtime_count: float = 0.0
    runtime_sum_s: float = 0.0

    def minus(self, before: Snapshot) -> Snapshot:
        return Snapshot(*(getattr(self, f) - getattr(before, f) for f in self.__dataclass_fields__))

    def plus(self, other: Snapshot) -> Snapshot:
        return Snapshot(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))


def snapshot_from_text(text: str, model_name: str) -> Snapshot:
    """Sum the known families' samples for `model_name` in a Prometheus exposition text."""
    totals = dict.fromkeys(Snapshot.__dataclass_fields__, 0.0)
    for family in text_string_to_metric_families(text):
        known = _FAMILIES.get(family.name)
        if known is None:
            continue
        kind, label, unit = known
        for sample in family.samples:
            if sample.labels.get(label) != model_name:
                continue
            if kind == "requests" and sample.name.endswith("_total"):
                totals["requests"] += sample.value
            elif (
                kind == "requests"
                and family.type == "counter"
                and not sample.name.endswith("_created")
            ):
                totals["requests"] += sample.value  # TF Serving's counters have no _total
            elif kind != "requests" and sample.name.endswith("_count"):
                totals[f"{kind}_count"] += sample.value
            elif kind != "requests" and sample.name.endswith("_sum"):
                totals[f"{kind}_sum_s"] += sample.value * unit
    return Snapshot(**totals)


def get_text(url: str, timeout_s: float = 2.0, tls: ClientTls | None = None) -> str | None:
    """GET `url` (http:// or https://, over TLS with `tls`): its text, None for an answer that
    is not a 200. OSError when no answer comes (TlsError saying why, when TLS is why);
    ValueError for a URL that is not http(s)://HOST:PORT/PATH."""
    parts = urlsplit(url.strip())
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection = HttpConnection(
        f"{parts.scheme}://{parts.netloc}", timeout_s, tls=scheme_tls(url, tls)
    )
    try:
        reply = connection.request("GET", path, None, {})
    finally:
        connection.close()
    return reply.body.decode("utf-8", errors="replace") if reply.status == 200 else None


def fetch(url: str, timeout_s: float = 2.0, tls: ClientTls | None = None) -> str | None:
    """GET `url`'s exposition text (see `get_text`); None when the endpoint does not answer."""
    try:
        return get_text(url, timeout_s, tls)
    except (OSError, ValueError):
        return None


def samples(text: str, families: Collection[str]) -> tuple[set[str], list[Sample]]:
    """The families among `families` that `text` exposes (by family name: a counter's without
    `_total`), and their samples but the `_created` ones. ValueError when it is not Prometheus
    text."""
    wanted = tuple(families)
    # Only the lines of those families are parsed: a server of a thousand models writes
    # megabytes of others (every model's request histograms).
    kept = "\n".join(line for line in text.splitlines() if _metric_name(line).startswith(wanted))
    present: set[str] = set()
    found: list[Sample] = []
    for family in text_string_to_metric_families(kept):
        if family.name not in families:
            continue
        present.add(family.name)
        found += [
            (s.name, dict(s.labels), float(s.value))
            for s in family.samples
            if not s.name.endswith("_created")
        ]
    return present, found


def _metric_name(line: str) -> str:
    """The metric name a line starts with (after `# HELP ` or `# TYPE ` on a comment line)."""
    if line.startswith("#"):
        parts = line.split(" ", 3)
        return parts[2] if len(parts) > 2 else ""
    return line


def scrape(
    url: str, model_name: str, timeout_s: float = 2.0, tls: ClientTls | None = None
) -> Snapshot | None:
    """GET `url` (over TLS with `tls` when it is https://) and read `model_name`'s counters;
    None when the endpoint does not answer."""
    text = fetch(url, timeout_s, tls)
    if text is None:
        return None
    try:
        return snapshot_from_text(text, model_name)
    except ValueError:  # not Prometheus text
        return None
