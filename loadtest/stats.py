"""One arm's numbers from a locust run: request and failure counts, throughput and latencies.

They come from locust's `--json-file` output, written once from the final statistics at shutdown.
Locust's `_stats.csv` is rewritten by a background greenlet once a second and not again at exit,
so it can miss the last requests of a run (a 5 s run lost 2 of 3398 requests when we measured); the
CSVs stay beside the report for people, the numbers come from the JSON.

Latencies are locust's response-time buckets: whole milliseconds below 100 ms, then rounded to two
significant digits; percentiles are computed the way locust computes them from those buckets.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadtest.errors import LocustRunError
from loadtest.report import ArmResult

__all__ = ["arm_result", "percentile", "read_locust_json"]


def read_locust_json(path: Path) -> list[dict[str, Any]]:
    """The stats entries of a locust `--json-file` (one per request name).

    Raises LocustRunError when the file is missing or is not locust's list of entries.
    """
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        raise LocustRunError(f"locust wrote no statistics to {str(path)!r}") from None
    except json.JSONDecodeError as exc:
        raise LocustRunError(f"locust statistics {str(path)!r} are not JSON: {exc}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise LocustRunError(f"locust statistics {str(path)!r}: expected a list of stats entries")
    return entries


def percentile(response_times: Mapping[int, int], fraction: float) -> int | None:
    """The bucket (ms) within which `fraction` of the requests finished; None without requests.

    Locust's `calculate_response_time_percentile`: walk the buckets from the slowest down until
    no more than `fraction` of the requests are left.
    """
    total = sum(response_times.values())
    if not total:
        return None
    allowed_below = int(total * fraction)
    seen = 0
    for bucket in sorted(response_times, reverse=True):
        seen += response_times[bucket]
        if total - seen <= allowed_below:
            return bucket
    return 0


def arm_result(name: str, address: str, entries: Sequence[Mapping[str, Any]]) -> ArmResult:
    """Sum locust's stats entries (every request name) into one ArmResult.

    Throughput is requests over the time from the first to the last request (None for fewer than
    two distinct times).
    Raises LocustRunError when an entry lacks locust's fields.
    """
    try:
        requests = sum(int(e["num_requests"]) for e in entries)
        failures = sum(int(e["num_failures"]) for e in entries)
        timed = requests - sum(int(e["num_none_requests"]) for e in entries)
        total_ms = sum(float(e["total_response_time"]) for e in entries)
        buckets: Counter[int] = Counter()
        for e in entries:
            buckets.update({int(k): int(v) for k, v in e["response_times"].items()})
        starts = [float(e["start_time"]) for e in entries]
        lasts = [float(e["last_request_timestamp"]) for e in entries if e["last_request_timestamp"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise LocustRunError(f"locust statistics have a missing or bad field: {exc!r}") from None
    elapsed = max(lasts) - min(starts) if lasts and starts else 0.0
    return ArmResult(
        name=name,
        address=address,
        requests=requests,
        failures=failures,
        rps=requests / elapsed if elapsed > 0 else None,
        p50_ms=percentile(buckets, 0.50),
        p90_ms=percentile(buckets, 0.90),
        p99_ms=percentile(buckets, 0.99),
        mean_ms=total_ms / timed if timed else None,
    )
