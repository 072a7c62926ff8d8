"""Exact statistics of raw per-request latencies (ms), with bootstrap confidence intervals.

Percentiles are nearest-rank (numpy's "inverted_cdf"): every reported latency is one a request
really took. Confidence intervals come from the bootstrap distribution of each statistic, drawn
exactly and cheaply (see `percentile_draws`), so they cost the same for a thousand requests as for
a million. Pure numpy: no TensorFlow, no locust.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from graphserve.loadtest.results.run import RatioValue, Window

__all__ = [
    "PERCENTILES",
    "mean_draws",
    "percentile",
    "percentile_cis",
    "percentile_draws",
    "ratio_summary",
    "stability",
    "summarize",
    "window_summary",
]

PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 0.50),
    ("p90", 0.90),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p99.9", 0.999),
)

# Below this many requests the normal approximation of the mean's spread is not trusted.
_MIN_NORMAL_MEAN_N = 200


def _as_ms(latencies_ms: ArrayLike) -> np.ndarray:
    return np.asarray(latencies_ms, dtype=np.float64).ravel()


def _require_data(values: np.ndarray) -> None:
    if values.size == 0:
        raise ValueError("no latencies: a statistic of an empty sample is undefined")


def percentile(sorted_ms: np.ndarray, q: float) -> float:
    """The nearest-rank `q`-quantile (0 < q <= 1) of an ascending array.

    The element at index ceil(q*n)-1, clamped to [0, n-1]; the same as
    `np.quantile(a, q, method="inverted_cdf")`. Raises ValueError on an empty array.
    """
    _require_data(sorted_ms)
    n = sorted_ms.size
    index = min(max(math.ceil(q * n) - 1, 0), n - 1)
    return float(sorted_ms[index])


def summarize(latencies_ms: ArrayLike) -> dict[str, float | None]:
    """p50, p90, p95, p99, p99.9, mean, min and max of the latencies; all None when empty."""
    values = np.sort(_as_ms(latencies_ms))
    keys = [name for name, _ in PERCENTILES] + ["mean", "min", "max"]
    if values.size == 0:
        return dict.fromkeys(keys, None)
    summary: dict[str, float | None] = {name: percentile(values, q) for name, q in PERCENTILES}
    summary.update(mean=float(values.mean()), min=float(values[0]), max=float(values[-1]))
    return summary


def _order_statistic_draws(
    sorted_ms: np.ndarray, q: float, draws: int, rng: np.random.Generator
) -> np.ndarray:
    n = sorted_ms.size
    k = min(max(math.ceil(q * n), 1), n)
    u = rng.beta(k, n - k + 1, size=draws)
    # F_n^{-1}(u) = sorted[ceil(n*u) - 1]; u can come out as 0.0 in floating point, hence the clamp.
    index = np.clip(np.ceil(n * u).astype(np.int64) - 1, 0, n - 1)
    return sorted_ms[index]


def percentile_draws(
    latencies_ms: ArrayLike, q: float, *, draws: int, rng: np.random.Generator
) -> np.ndarray:
    """`draws` values of the nearest-rank `q`-quantile from the bootstrap distribution.

    Resampling n latencies with replacement and taking the k-th smallest (k = ceil(q*n)) is the
    same as drawing n uniforms U, taking their k-th smallest U_(k), and mapping it through the
    empirical quantile function F_n^{-1}(u) = sorted[ceil(n*u) - 1]. U_(k) follows
    Beta(k, n-k+1), so one Beta variate per draw gives exactly the bootstrap distribution,
    without resampling n values `draws` times. Raises ValueError on an empty sample.
    """
    values = np.sort(_as_ms(latencies_ms))
    _require_data(values)
    return _order_statistic_draws(values, q, draws, rng)


def mean_draws(latencies_ms: ArrayLike, *, draws: int, rng: np.random.Generator) -> np.ndarray:
    """`draws` values of the mean from its bootstrap distribution.

    From 200 requests up, Normal(mean, sd/sqrt(n)): by the central limit theorem that is the
    bootstrap distribution of the mean for the thousands of requests a step records, without
    resampling them. Below that, a real resample. Raises ValueError on an empty sample.
    """
    values = _as_ms(latencies_ms)
    _require_data(values)
    n = values.size
    if n < _MIN_NORMAL_MEAN_N:
        resampled: np.ndarray = values[rng.integers(0, n, size=(draws, n))].mean(axis=1)
        return resampled
    # ddof=0: the bootstrap resamples the empirical distribution, whose spread is the plug-in sd.
    return rng.normal(values.mean(), values.std() / math.sqrt(n), size=draws)


def _interval(draws: np.ndarray, confidence: float) -> tuple[float, float] | None:
    low, high = np.quantile(draws, [(1 - confidence) / 2, (1 + confidence) / 2])
    # A zero in a denominator draw gives inf or nan, which JSON cannot carry: no interval then.
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    return float(low), float(high)


def _check_bootstrap(confidence: float, draws: int) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if draws < 1:
        raise ValueError(f"draws must be at least 1, got {draws}")


def percentile_cis(
    latencies_ms: ArrayLike, *, confidence: float = 0.95, draws: int = 2000, seed: int = 0
) -> dict[str, tuple[float, float] | None]:
    """A bootstrap confidence interval (low, high) for each of PERCENTILES; None when empty.

    The interval holds the central `confidence` of `draws` values from `percentile_draws`.
    The same seed gives the same intervals. Raises ValueError for a confidence outside (0, 1)
    or draws < 1.
    """
    _check_bootstrap(confidence, draws)
    values = np.sort(_as_ms(latencies_ms))
    if values.size == 0:
        return dict.fromkeys((name for name, _ in PERCENTILES), None)
    rng = np.random.default_rng(seed)
    return {
        name: _interval(_order_statistic_draws(values, q, draws, rng), confidence)
        for name, q in PERCENTILES
    }


def ratio_summary(
    arm_ms: ArrayLike,
    base_ms: ArrayLike,
    *,
    confidence: float = 0.95,
    draws: int = 2000,
    seed: int = 0,
) -> dict[str, RatioValue]:
    """arm/base for each of PERCENTILES and "mean": RatioValue(value=ratio, ci95=(low, high)).

    The interval comes from independent bootstrap draws of each side, one ratio per pair of
    draws, then the central `confidence` of those ratios. The key stays "ci95" whatever the
    confidence (the report schema names it so; the default is 0.95). value and ci95 are None
    when either side is empty or the base statistic is 0; ci95 alone is None when a draw of the
    base is 0. Raises ValueError for a confidence outside (0, 1) or draws < 1.
    """
    _check_bootstrap(confidence, draws)
    arm, base = np.sort(_as_ms(arm_ms)), np.sort(_as_ms(base_ms))
    keys = [name for name, _ in PERCENTILES] + ["mean"]
    if arm.size == 0 or base.size == 0:
        return {key: RatioValue(value=None, ci95=None) for key in keys}
    rng = np.random.default_rng(seed)
    result: dict[str, RatioValue] = {}
    for name, q in PERCENTILES:
        arm_draws = _order_statistic_draws(arm, q, draws, rng)
        base_draws = _order_statistic_draws(base, q, draws, rng)
        result[name] = _ratio(
            percentile(arm, q), percentile(base, q), arm_draws, base_draws, confidence
        )
    arm_means = mean_draws(arm, draws=draws, rng=rng)
    base_means = mean_draws(base, draws=draws, rng=rng)
    result["mean"] = _ratio(
        float(arm.mean()), float(base.mean()), arm_means, base_means, confidence
    )
    return result


def _ratio(
    arm_point: float,
    base_point: float,
    arm_draws: np.ndarray,
    base_draws: np.ndarray,
    confidence: float,
) -> RatioValue:
    if base_point == 0:
        return RatioValue(value=None, ci95=None)
    with np.errstate(divide="ignore", invalid="ignore"):
        interval = _interval(arm_draws / base_draws, confidence)
    return RatioValue(value=arm_point / base_point, ci95=interval)


def _spread_pct(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    numbers = np.asarray(values, dtype=np.float64)
    mean = float(numbers.mean())
    if mean == 0:
        return None
    return float((numbers.max() - numbers.min()) / mean * 100)


def stability(
    windows: Sequence[Window], *, last: int, tolerance_pct: float
) -> tuple[bool, dict[str, float | None]]:
    """perf_analyzer's criterion: are the last `last` windows within `tolerance_pct` of each other?

    For throughput (`throughput_rps`) and p50 (`p50_ms`) of those windows, the spread is
    (max - min) / mean * 100. Stable when there are at least `last` windows and both spreads are
    at most `tolerance_pct`. Returns (stable, {"throughput": spread, "p50": spread}), a spread
    None when it cannot be computed (too few windows, a None value, a mean of 0).
    Raises ValueError when `last` < 1.
    """
    if last < 1:
        raise ValueError(f"stability needs at least 1 window, got last={last}")
    recent = windows[-last:] if len(windows) >= last else []
    spreads = {
        "throughput": _spread_pct([w.throughput_rps for w in recent]),
        "p50": _spread_pct([w.p50_ms for w in recent]),
    }
    stable = all(s is not None and s <= tolerance_pct for s in spreads.values())
    return stable, spreads


def window_summary(
    latencies_ms: ArrayLike,
    ok: ArrayLike,
    start: float,
    end: float,
    *,
    index: int = 0,
    cpu_pct: float | None = None,
    machine_cpu_pct: float | None = None,
) -> Window:
    """Measurement window `index`: counts, throughput and latencies of the requests started in it.

    Throughput counts successful requests over end - start (Unix seconds). Latency statistics use
    successful requests only: a failed request's time says nothing about the model. They are None
    when no request succeeded. `cpu_pct` and `machine_cpu_pct` are the generator's and its
    machine's CPU over the window, as measured. Raises ValueError when end <= start or the arrays
    differ in length.
    """
    if end <= start:
        raise ValueError(f"window ends ({end}) at or before it starts ({start})")
    latencies = _as_ms(latencies_ms)
    succeeded = np.asarray(ok, dtype=bool).ravel()
    if latencies.shape != succeeded.shape:
        raise ValueError(f"{latencies.size} latencies but {succeeded.size} ok flags")
    good = np.sort(latencies[succeeded])
    has_data = good.size > 0
    return Window(
        index=index,
        requests=latencies.size,
        failures=int(latencies.size - good.size),
        throughput_rps=good.size / (end - start),
        p50_ms=percentile(good, 0.50) if has_data else None,
        p99_ms=percentile(good, 0.99) if has_data else None,
        mean_ms=float(good.mean()) if has_data else None,
        start=start,
        end=end,
        generator_cpu_pct=cpu_pct,
        machine_cpu_pct=machine_cpu_pct,
    )
