"""Exact latency statistics, bootstrap intervals, stability, windows, and the --slo gates."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from graphserve.core.errors import SloError
from graphserve.loadtest.report.analysis import generator_load
from graphserve.loadtest.results.run import RatioValue, Report, SloResult, Window
from graphserve.loadtest.results.slo import (
    Gate,
    describe,
    evaluate,
    every_request_failed,
    parse_gate,
)
from graphserve.loadtest.results.stats import (
    PERCENTILES,
    mean_draws,
    percentile,
    percentile_cis,
    percentile_draws,
    ratio_summary,
    stability,
    summarize,
    window_summary,
)
from tests.test_loadtest_report import make_report_document

KEYS = [name for name, _ in PERCENTILES]


def lognormal(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(mean=0.0, sigma=1.0, size=n)


# ---------------------------------------------------------------------------------------------
# Percentiles and summaries


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 100, 999, 1000, 1001, 12345])
def test_percentile_is_numpys_inverted_cdf(n: int) -> None:
    values = np.sort(lognormal(n, seed=n))
    # np.quantile, not np.percentile: percentile(a, 99.9) divides by 100 to 0.9990000000000001,
    # and for n = 1000 takes the maximum instead of the 999th value.
    for _, q in PERCENTILES:
        assert percentile(values, q) == np.quantile(values, q, method="inverted_cdf")


def test_percentile_is_nearest_rank() -> None:
    values = np.arange(1.0, 11.0)  # 1 .. 10
    assert [percentile(values, q) for _, q in PERCENTILES] == [5.0, 9.0, 10.0, 10.0, 10.0]
    assert percentile(np.arange(1.0, 1001.0), 0.999) == 999.0


def test_percentile_of_nothing_raises() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile(np.array([]), 0.5)


def test_summarize() -> None:
    summary = summarize([4.0, 1.0, 3.0, 2.0])
    assert summary == {
        "p50": 2.0,
        "p90": 4.0,
        "p95": 4.0,
        "p99": 4.0,
        "p99.9": 4.0,
        "mean": 2.5,
        "min": 1.0,
        "max": 4.0,
    }


def test_summarize_of_nothing_is_all_none() -> None:
    summary = summarize([])
    assert list(summary) == [*KEYS, "mean", "min", "max"]
    assert set(summary.values()) == {None}


# ---------------------------------------------------------------------------------------------
# Bootstrap intervals


@pytest.mark.parametrize("n", [1, 2, 5, 30, 100, 10_000])
@pytest.mark.parametrize(
    "sample",
    [lognormal, lambda n, seed=0: np.random.default_rng(seed).exponential(2.0, n), np.ones],
    ids=["lognormal", "exponential", "constant"],
)
def test_intervals_contain_the_point_estimate(n: int, sample: Any) -> None:
    values = sample(n)
    point = summarize(values)
    for key, interval in percentile_cis(values).items():
        assert interval is not None
        estimate = point[key]
        assert estimate is not None
        assert interval[0] <= estimate <= interval[1], (key, interval, estimate)


def test_intervals_shrink_with_more_requests() -> None:
    small = percentile_cis(lognormal(100, seed=1))
    large = percentile_cis(lognormal(100_000, seed=2))
    for key in ("p50", "p90", "p99"):
        small_low, small_high = small[key] or (0.0, 0.0)
        large_low, large_high = large[key] or (0.0, 0.0)
        assert large_high - large_low < (small_high - small_low) / 5, key


def test_intervals_cover_the_true_median() -> None:
    # lognormal(0, 1) has median exp(0) = 1; a 95% interval should hold it about 95% of the time.
    rng = np.random.default_rng(7)
    hits = 0
    for i in range(200):
        interval = percentile_cis(rng.lognormal(0.0, 1.0, 2000), seed=i)["p50"]
        assert interval is not None
        hits += interval[0] <= 1.0 <= interval[1]
    assert 0.85 <= hits / 200 <= 1.0


def test_intervals_are_seeded_and_none_without_data() -> None:
    values = lognormal(500)
    assert percentile_cis(values, seed=3) == percentile_cis(values, seed=3)
    assert percentile_cis(values, seed=3) != percentile_cis(values, seed=4)
    assert percentile_cis([]) == dict.fromkeys(KEYS, None)


def test_wider_confidence_gives_wider_intervals() -> None:
    values = lognormal(1000)
    narrow, wide = percentile_cis(values, confidence=0.5), percentile_cis(values, confidence=0.99)
    for key in KEYS:
        narrow_interval, wide_interval = narrow[key], wide[key]
        assert narrow_interval is not None and wide_interval is not None
        assert wide_interval[0] <= narrow_interval[0] <= narrow_interval[1] <= wide_interval[1]


@pytest.mark.parametrize("kwargs", [{"confidence": 0.0}, {"confidence": 1.0}, {"draws": 0}])
def test_bad_bootstrap_settings_raise(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        percentile_cis([1.0, 2.0], **kwargs)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_order_statistic_draws_match_brute_force_resampling(q: float) -> None:
    # The Beta shortcut must give the same distribution as resampling n values with replacement.
    values = np.sort(lognormal(40, seed=5))
    rng = np.random.default_rng(0)
    shortcut = percentile_draws(values, q, draws=20_000, rng=rng)
    resamples = np.sort(values[rng.integers(0, values.size, size=(20_000, values.size))], axis=1)
    brute = resamples[:, int(np.ceil(q * values.size)) - 1]
    shortcut_cdf = np.searchsorted(np.sort(shortcut), values, side="right") / shortcut.size
    brute_cdf = np.searchsorted(np.sort(brute), values, side="right") / brute.size
    assert np.abs(shortcut_cdf - brute_cdf).max() < 0.02
    assert set(np.unique(shortcut)) <= set(values)


def test_percentile_draws_of_nothing_raise() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile_draws([], 0.5, draws=10, rng=np.random.default_rng(0))


@pytest.mark.parametrize("n", [50, 5000])  # a real resample below 200, the normal law above
def test_mean_draws_spread_like_the_standard_error(n: int) -> None:
    values = lognormal(n, seed=n)
    draws = mean_draws(values, draws=20_000, rng=np.random.default_rng(0))
    standard_error = values.std() / np.sqrt(n)
    assert draws.mean() == pytest.approx(values.mean(), abs=0.05 * standard_error * 10)
    assert draws.std() == pytest.approx(standard_error, rel=0.05)


# ---------------------------------------------------------------------------------------------
# Ratios


def test_ratio_of_identical_samples_is_one() -> None:
    values = lognormal(3000)
    ratios = ratio_summary(values, values)
    assert list(ratios) == [*KEYS, "mean"]
    for key, ratio in ratios.items():
        assert ratio.value == 1.0, key
        assert ratio.ci95 is not None
        assert ratio.ci95[0] <= 1.0 <= ratio.ci95[1], key


def test_ratio_of_half_the_latency_is_a_half() -> None:
    values = lognormal(3000)
    for key, ratio in ratio_summary(values, 2 * values).items():
        assert ratio.value == pytest.approx(0.5), key
        assert ratio.ci95 is not None
        assert ratio.ci95[0] <= 0.5 <= ratio.ci95[1], key
    # With 3000 requests the central ratios are known to a few percent.
    for key in ("p50", "mean"):
        low, high = ratio_summary(values, 2 * values)[key].ci95 or (0.0, 1.0)
        assert high - low < 0.1, key


def test_ratio_without_data_or_of_a_zero_base_is_none() -> None:
    nothing = RatioValue(value=None, ci95=None)
    empty = ratio_summary([], [1.0, 2.0])
    assert empty == ratio_summary([1.0, 2.0], []) == dict.fromkeys(empty, nothing)
    assert ratio_summary([1.0, 2.0], [0.0, 0.0])["p50"] == nothing


def test_ratio_is_seeded() -> None:
    arm, base = lognormal(1000, seed=1), lognormal(1000, seed=2)
    assert ratio_summary(arm, base, seed=9) == ratio_summary(arm, base, seed=9)


# ---------------------------------------------------------------------------------------------
# Stability and windows


def window(
    rps: float | None = 100.0,
    p50: float | None = 1.0,
    cpu: float | None = None,
    machine: float | None = None,
) -> Window:
    return Window(
        index=0, requests=100, failures=0, throughput_rps=rps, p50_ms=p50, p99_ms=p50,
        mean_ms=p50, start=0.0, end=1.0, generator_cpu_pct=cpu, machine_cpu_pct=machine,
    )  # fmt: skip


def windows(*pairs: tuple[float | None, float | None]) -> list[Window]:
    return [window(rps, p50) for rps, p50 in pairs]


def test_stable_when_the_last_windows_agree() -> None:
    stable, spread = stability(
        windows((50.0, 9.0), (100.0, 1.0), (102.0, 1.02), (98.0, 1.0)), last=3, tolerance_pct=5.0
    )
    assert stable
    assert spread["throughput"] == pytest.approx(4.0)
    assert spread["p50"] == pytest.approx(0.02 / (3.02 / 3) * 100)


def test_unstable_when_a_spread_is_too_wide() -> None:
    stable, spread = stability(
        windows((100.0, 1.0), (100.0, 1.5), (100.0, 1.0)), last=3, tolerance_pct=10.0
    )
    assert not stable
    assert spread["throughput"] == 0.0
    assert spread["p50"] == pytest.approx(0.5 / (3.5 / 3) * 100)


@pytest.mark.parametrize(
    ("history", "spread"),
    [
        (windows((100.0, 1.0), (100.0, 1.0)), {"throughput": None, "p50": None}),
        (windows((100.0, 1.0), (100.0, None), (100.0, 1.0)), {"throughput": 0.0, "p50": None}),
        (windows((0.0, 1.0), (0.0, 1.0), (0.0, 1.0)), {"throughput": None, "p50": 0.0}),
    ],
    ids=["too-few-windows", "a-window-without-latency", "no-throughput"],
)
def test_stability_not_computable(history: list[Window], spread: dict[str, float | None]) -> None:
    assert stability(history, last=3, tolerance_pct=10.0) == (False, spread)


def test_window_summary() -> None:
    latencies = [1.0, 2.0, 3.0, 4.0, 100.0]
    ok = [True, True, True, True, False]
    summary = window_summary(latencies, ok, start=10.0, end=12.0, index=2, cpu_pct=40.0)
    assert summary.model_dump() == {
        "index": 2,
        "requests": 5,
        "failures": 1,
        "throughput_rps": 2.0,
        "p50_ms": 2.0,
        "p99_ms": 4.0,
        "mean_ms": 2.5,
        "start": 10.0,
        "end": 12.0,
        "generator_cpu_pct": 40.0,
        "machine_cpu_pct": None,
    }


def test_window_summary_without_successes() -> None:
    summary = window_summary([5.0, 6.0], [False, False], start=0.0, end=1.0)
    assert (summary.requests, summary.failures, summary.throughput_rps) == (2, 2, 0.0)
    assert summary.p50_ms is summary.p99_ms is summary.mean_ms is None
    assert summary.generator_cpu_pct is None


def test_window_summary_rejects_bad_windows() -> None:
    with pytest.raises(ValueError, match="before it starts"):
        window_summary([1.0], [True], start=5.0, end=5.0)
    with pytest.raises(ValueError, match="ok flags"):
        window_summary([1.0, 2.0], [True], start=0.0, end=1.0)


# ---------------------------------------------------------------------------------------------
# SLO gates: parsing


@pytest.mark.parametrize(
    ("text", "gate"),
    [
        ("p99<50ms", Gate("p99<50ms", None, False, "p99", "<", 50.0)),
        ("p99.9<10ms", Gate("p99.9<10ms", None, False, "p99.9", "<", 10.0)),
        ("graph.p99.9 <= 2.5ms", Gate("graph.p99.9 <= 2.5ms", "graph", False, "p99.9", "<=", 2.5)),
        ("ratio.p50<0.6", Gate("ratio.p50<0.6", None, True, "p50", "<", 0.6)),
        ("ratio.graph.p99<0.7", Gate("ratio.graph.p99<0.7", "graph", True, "p99", "<", 0.7)),
        ("ratio.throughput>1.5", Gate("ratio.throughput>1.5", None, True, "throughput", ">", 1.5)),
        ("throughput>500", Gate("throughput>500", None, False, "throughput", ">", 500.0)),
        ("eager.rps >= 20/s", Gate("eager.rps >= 20/s", "eager", False, "throughput", ">=", 20)),
        ("throughput>500rps", Gate("throughput>500rps", None, False, "throughput", ">", 500.0)),
        ("p50<0.5s", Gate("p50<0.5s", None, False, "p50", "<", 500.0)),
        ("p50<300us", Gate("p50<300us", None, False, "p50", "<", 0.3)),
        ("mean<2", Gate("mean<2", None, False, "mean", "<", 2.0)),
        (" arm_2-b.max > 1 ms ", Gate("arm_2-b.max > 1 ms", "arm_2-b", False, "max", ">", 1.0)),
        ("min>=.5ms", Gate("min>=.5ms", None, False, "min", ">=", 0.5)),
    ],
)
def test_parse_gate(text: str, gate: Gate) -> None:
    assert parse_gate(text) == gate


@pytest.mark.parametrize(
    "text",
    [
        "p99<<5",
        "p98<5ms",
        "p99",
        "p99<",
        "<5ms",
        "p99=5ms",
        "p99<-5ms",
        "p99<5kb",
        "p99<5rps",
        "throughput>500ms",
        "ratio.p50<0.6ms",
        "ratio.max<2",
        "ratio.min<2",
        "graph..p99<5",
        "gr aph.p99<5",
        "",
    ],
)
def test_parse_gate_rejects(text: str) -> None:
    with pytest.raises(SloError, match="expected") as caught:
        parse_gate(text)
    assert f"--slo {text!r}" in str(caught.value)
    assert caught.value.exit_code == 2


# ---------------------------------------------------------------------------------------------
# SLO gates: evaluation


def report(mode: str = "closed") -> Report:
    """Two steps of graph vs eager; at 16 users graph's p99 is 61.2 ms and eager has no data;
    the only ratio measured is the p50's."""
    document = make_report_document(loads=(1, 16))
    document["settings"]["mode"] = mode
    measured = [
        {"graph": (2.0, 500.0, 0), "eager": (4.0, 250.0, 1)},
        {"graph": (61.2, 800.0, 0), "eager": (None, 0.0, 2)},
    ]
    for step, arms, p50_ratio in zip(
        document["steps"], measured, [{"value": 0.5, "ci95": [0.4, 0.6]}, None], strict=True
    ):
        for name, (latency, rps, errors) in arms.items():
            arm = step["arms"][name]
            arm["latency_ms"] = dict.fromkeys(arm["latency_ms"], latency)
            arm["throughput_rps"], arm["errors"] = rps, {"UNAVAILABLE": errors}
        ratio = step["ratios"]["graph/eager"]
        for key in ratio:
            ratio[key] = {"value": None, "ci95": None}
        ratio["p50"] = p50_ratio or ratio["p50"]
    return Report.model_validate(document)


def rows(result: SloResult) -> list[tuple[str, str | None, float | None, float | None, bool]]:
    return [(r.expression, r.arm, r.load, r.value, r.passed) for r in result.gates]


def test_evaluate_passing_gates() -> None:
    gates = [parse_gate("p99<100ms"), parse_gate("throughput>=500")]
    result = evaluate(gates, report(), max_failures=None)
    assert rows(result) == [
        ("p99<100ms", "graph", 1, 2.0, True),
        ("throughput>=500", "graph", 1, 500.0, True),
        ("p99<100ms", "graph", 16, 61.2, True),
        ("throughput>=500", "graph", 16, 800.0, True),
    ]
    assert result.gates[0].threshold == 100.0 and result.gates[0].step == 0
    assert (result.passed, result.failures, result.max_failures) == (True, 3, None)


def test_evaluate_missed_gate() -> None:
    result = evaluate([parse_gate("graph.p99<50ms")], report(), max_failures=None)
    assert [r.passed for r in result.gates] == [True, False]
    assert not result.passed
    assert describe(result, mode="closed") == [
        "graph.p99<50ms missed on graph at 16 users: 61.2 ms"
    ]


def test_evaluate_missing_value_fails() -> None:
    result = evaluate(
        [parse_gate("eager.p99<1s"), parse_gate("ratio.p50<0.6")], report(), max_failures=None
    )
    assert rows(result) == [
        ("eager.p99<1s", "eager", 1, 4.0, True),
        ("ratio.p50<0.6", "graph", 1, 0.5, True),
        ("eager.p99<1s", "eager", 16, None, False),
        ("ratio.p50<0.6", "graph", 16, None, False),
    ]
    assert not result.passed
    assert describe(result, mode="open") == [
        "eager.p99<1s missed on eager at 16 req/s: no value (no successful request)",
        "ratio.p50<0.6 missed on graph at 16 req/s: no value (no successful request)",
    ]


def test_evaluate_ratio_metric_the_report_lacks_fails() -> None:
    result = evaluate([parse_gate("ratio.p99<0.9")], report(), max_failures=None)
    assert [r.value for r in result.gates] == [None, None]
    assert not result.passed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cpu.p99<5ms", "'graph', 'eager'"),
        ("ratio.cpu.p50<0.5", "'graph', 'eager'"),
        ("ratio.eager.p50<0.5", "baseline"),
    ],
)
def test_evaluate_unknown_arm_raises(text: str, message: str) -> None:
    with pytest.raises(SloError, match=message) as caught:
        evaluate([parse_gate(text)], report(), max_failures=None)
    assert text in str(caught.value)


def test_evaluate_max_failures() -> None:
    assert evaluate([], report(), max_failures=3).passed
    result = evaluate([], report(), max_failures=2)
    assert (result.passed, result.failures, result.gates) == (False, 3, [])
    assert describe(result, mode="closed") == ["3 failed requests, more than --max-failures 2"]


def test_a_run_in_which_every_request_failed_is_not_judged() -> None:
    from rich.console import Console

    from graphserve.loadtest.report.render import render_markdown, render_table

    failed = report()
    for step in failed.steps:
        for arm in step.arms.values():
            arm.latency_ms.p50 = None  # no successful measured request
    assert every_request_failed(failed) and not every_request_failed(report())
    # Gates or none, a bound on failures that holds or no bound: never passed.
    for gates, bound in (([], None), ([], 10), ([parse_gate("errors<=10")], None)):
        result = evaluate(gates, failed, max_failures=bound)
        assert not result.passed, (gates, bound)
        assert describe(result, mode="closed") == ["the SLO was not judged: every request failed"]
        assert evaluate(gates, report(), max_failures=bound).passed  # the same, measured
    failed.slo = evaluate([], failed, max_failures=None)
    console = Console(record=True, width=160)
    console.print(render_table(failed))
    text = console.export_text()
    assert "SLO: not judged: every request failed" in text and "passed" not in text
    markdown = render_markdown(failed)
    assert "**SLO not judged: every request failed ✗**" in markdown
    assert "passed" not in markdown


def test_gates_on_a_report_without_steps_fail() -> None:
    empty = report().model_copy(update={"steps": []})
    result = evaluate([parse_gate("p99<5ms")], empty, max_failures=None)
    assert not result.passed
    assert describe(result, mode="closed") == [
        "the gates were not checked: the report has no steps"
    ]
    assert evaluate([], empty, max_failures=0).passed


def test_describe_throughput_and_ratio() -> None:
    result = evaluate(
        [parse_gate("throughput>600"), parse_gate("ratio.p50<0.4")], report(), max_failures=None
    )
    assert describe(result, mode="closed") == [
        "throughput>600 missed on graph at 1 user: 500 req/s",
        "ratio.p50<0.4 missed on graph at 1 user: 0.5",
        "ratio.p50<0.4 missed on graph at 16 users: no value (no successful request)",
    ]


@pytest.mark.parametrize(
    ("windows", "bound", "says"),
    [
        ([window(cpu=40.0, machine=60.0)], False, None),
        ([window(cpu=None, machine=None)], False, None),
        (
            [window(cpu=40.0, machine=50.0), window(cpu=93.0, machine=70.0)],
            True,
            "a locust process used 93% CPU (limit 90%)",
        ),
        (
            [window(cpu=45.0, machine=98.5)],
            True,
            "the machine's CPUs were 98% busy (limit 95%)",
        ),
        (
            [window(cpu=91.0, machine=99.0)],
            True,
            "a locust process used 91% CPU (limit 90%); the machine's CPUs were 99% busy",
        ),
    ],
)  # fmt: skip
def test_the_generator_is_bound_by_its_own_cpu_or_the_whole_machines(
    windows: list[Window], bound: bool, says: str | None
) -> None:
    verdict = generator_load(windows)
    assert verdict.bound is bound
    if says is None:
        assert verdict.reason is None
    else:
        assert verdict.reason is not None and says in verdict.reason
    highest = [w.generator_cpu_pct for w in windows if w.generator_cpu_pct is not None]
    assert verdict.cpu_pct == (max(highest) if highest else None)
