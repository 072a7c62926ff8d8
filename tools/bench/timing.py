"""Timing calls side by side on a noisy machine: interleaved rounds, raw samples, percentiles.

Every benchmark goal is a ratio of two measurements taken in the same run. To keep drift on a
shared machine (other processes, frequency changes, a noisy neighbour) from favouring one side,
`interleave` times the candidates in rounds, a few calls each, reversing the order every round
(A B C, C B A, ...), so each sees the same conditions. Samples are kept raw (ms) and summarised
with nearest-rank percentiles, as the load test does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from graphserve.core.results import JsonResult
from graphserve.loadtest.results.stats import percentile

__all__ = ["Timing", "interleave", "timing_of"]


@dataclass(frozen=True)
class Timing(JsonResult):
    """Per-call latencies of one candidate: p50, p99, mean (ms) and how many calls."""

    p50_ms: float
    p99_ms: float
    mean_ms: float
    samples: int


def timing_of(samples_ms: np.ndarray | list[float]) -> Timing:
    """Summarise raw samples (ms); raises ValueError when there are none."""
    values = np.sort(np.asarray(samples_ms, dtype=np.float64))
    if values.size == 0:
        raise ValueError("no samples: nothing was timed")
    return Timing(
        p50_ms=percentile(values, 0.50),
        p99_ms=percentile(values, 0.99),
        mean_ms=float(values.mean()),
        samples=int(values.size),
    )


def interleave(
    calls: Mapping[str, Callable[[], object]],
    *,
    budget_s: float,
    round_s: float = 0.05,
    warmup: int = 20,
    min_samples: int = 30,
    max_samples: int = 100_000,
) -> dict[str, Timing]:
    """Time every call in `calls` in alternating rounds, each call about `round_s` per round.

    Each call first runs `warmup` times untimed (first calls pay for tracing, allocation and
    cold caches, which steady-state numbers must not include); the warm-up also sizes its share
    of a round, so a 0.1 ms call gets as much wall time as a 40 ms one. Rounds continue until
    `budget_s` of wall time has passed and every call has `min_samples`, or until every call
    has `max_samples`. A call that raises stops the benchmark: a failing path has no speed.
    """
    if not calls:
        raise ValueError("nothing to time")
    order = list(calls)
    clock = time.perf_counter
    per_round: dict[str, int] = {}
    for name in order:
        started = clock()
        for _ in range(warmup):
            calls[name]()
        each_s = (clock() - started) / max(warmup, 1)
        per_round[name] = max(1, min(1000, int(round_s / max(each_s, 1e-6))))
    samples: dict[str, list[float]] = {name: [] for name in order}
    deadline = clock() + budget_s
    while True:
        for name in order:
            call, times = calls[name], samples[name]
            for _ in range(per_round[name]):
                started = clock()
                call()
                times.append((clock() - started) * 1000.0)
        order.reverse()
        counts = [len(v) for v in samples.values()]
        if min(counts) >= max_samples:
            break
        if clock() >= deadline and min(counts) >= min_samples:
            break
    return {name: timing_of(values) for name, values in samples.items()}
