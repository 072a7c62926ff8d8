"""The report's figures as PNG bytes: latency CDF, percentiles and throughput against load, and
the p50 of every measurement window over time; a rollout's timeline around its swap; and a
many-models run's memory and its cold and warm latencies over time.

Figures are `matplotlib.figure.Figure` objects saved through the Agg canvas, never pyplot: no
global state, no display, safe to call from any thread. A None in the report is a gap in a line,
never an error; a report with a single step still gives a readable figure (markers, not lines).
Each arm keeps its colour in every figure (its place in the arm order).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from graphserve.loadtest.results.labels import load_label
from graphserve.loadtest.results.many import ManyReport
from graphserve.loadtest.results.rollout import RolloutReport
from graphserve.loadtest.results.run import ArmStep, Report, Step, Window

__all__ = [
    "latency_cdf",
    "many_latency",
    "many_memory",
    "percentiles_vs_load",
    "rollout_timeline",
    "throughput_vs_load",
    "windows_over_time",
]

Records = Mapping[str, npt.NDArray[Any]]

_DPI = 100
_CDF_POINTS = 1000  # per half (body, tail) of a downsampled CDF line
_LOG_SPAN = 10.0  # a log axis once values span more than this factor
_CEILING_SPAN = 3.0  # draw the calibration ceiling only within this factor of the arms


def latency_cdf(records: Records, report: Report) -> bytes | None:
    """One CDF line per arm of the measured (window >= 0) successful requests, log-x in ms
    (open loop: latency_ms + lag_ms, as in the report).

    One panel per step, titled with its load. None when no step has such a request.
    """
    names = [str(n) for n in records["arms"]]
    measured = (records["window"] >= 0) & records["ok"].astype(bool)
    latency = records["latency_ms"].astype(np.float64)
    mode = report.settings.mode
    if mode == "open" and "lag_ms" in records:
        # As the report's percentiles: open-loop latency counts from the scheduled send, so a
        # late generator cannot hide queueing (coordinated omission).
        latency = latency + records["lag_ms"]
    panels = [(s.index, load_label(s.load, mode)) for s in report.steps]
    if not panels:
        panels = [(int(i), f"step {int(i) + 1}") for i in np.unique(records["step"])]
    known = report.arm_order()
    order = [n for n in known if n in names] + [n for n in names if n not in known]
    colours = _colours(report, extra=order)

    ncols = 2 if len(panels) == 4 else min(len(panels), 3)
    nrows = -(-len(panels) // ncols)
    size = (max(7.0, 4.6 * ncols), 0.6 + 3.8 * nrows)
    fig = Figure(figsize=size, dpi=_DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel()
    drawn = False
    for ax, (step, title) in zip(axes, panels, strict=False):
        in_step = measured & (records["step"] == step)
        lines = 0
        for name in order:
            values = np.sort(latency[in_step & (records["arm"] == names.index(name))])
            values = values[values > 0]  # a log axis has no room for 0 ms
            if values.size:
                x, y = _cdf_points(values)
                ax.plot(x, y, color=colours[name], label=name, drawstyle="steps-post")
                lines += 1
        for q in (0.5, 0.99):
            ax.axhline(q, color="0.6", linewidth=0.8, linestyle=":")
            ax.text(
                1.0,
                q,
                f" p{q * 100:g}",
                transform=ax.get_yaxis_transform(),
                va="center",
                ha="left",
                fontsize=8,
                color="0.4",
            )
        ax.set_title(title)
        ax.set_xlabel("latency (ms)")
        ax.set_ylim(0, 1.0)
        ax.grid(True, which="both", alpha=0.3)
        if lines:
            _log_scale(ax, "x")
            ax.legend(loc="lower right", fontsize=9)
            drawn = True
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[::ncols]:
        ax.set_ylabel("fraction of requests")
    fig.suptitle("Latency CDF: measured, successful requests")
    return _png(fig) if drawn else None


def percentiles_vs_load(report: Report) -> bytes:
    """p50 (solid, circles) and p99 (dashed, squares) of every arm against the load."""
    fig, ax = _figure()
    loads = _loads(report)
    colours = _colours(report)
    values: list[float] = []
    for name in report.arm_order():
        for key, style, marker in (("p50", "-", "o"), ("p99", "--", "s")):
            xs, ys = _arm_series(report, name, _latency(key))
            ax.plot(
                xs,
                ys,
                linestyle=style,
                marker=marker,
                color=colours[name],
                label=f"{name} {key}",
            )
            values += [y for y in ys if np.isfinite(y)]
    _load_axis(ax, report, loads)
    if not _log_if_wide(ax, values, axis="y"):
        _from_zero(ax)
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency against load: p50 solid, p99 dashed")
    _legend(ax)
    return _png(fig)


def throughput_vs_load(report: Report) -> bytes:
    """Successful req/s of every arm against the load; the open-loop target and the calibration
    (null endpoint) throughput as grey reference lines when present.

    A calibration ceiling far above every arm is named in a corner instead of drawn: a line at
    5,000 req/s would flatten arms at 300 into the x axis.
    """
    fig, ax = _figure()
    loads = _loads(report)
    colours = _colours(report)
    highest = 0.0
    for name in report.arm_order():
        xs, ys = _arm_series(report, name, lambda arm: arm.throughput_rps)
        ax.plot(xs, ys, marker="o", color=colours[name], label=name)
        highest = max([highest, *(y for y in ys if np.isfinite(y))])
    if report.settings.mode == "open" and loads:
        # The "_" marker keeps a single-step target visible as a tick at its level.
        ax.plot(loads, loads, linestyle=":", marker="_", markersize=16, color="0.5", label="target")
    calibration = report.calibration.steps if report.calibration else []
    calibration = sorted(calibration, key=lambda c: c.load)
    ceiling = max((_number(c.throughput_rps) for c in calibration), default=float("nan"))
    if np.isfinite(ceiling) and highest > 0 and ceiling > _CEILING_SPAN * highest:
        ax.text(
            0.99,
            0.98,
            f"null endpoint ceiling: {ceiling:,.0f} req/s (off the chart)",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=9,
            color="0.35",
        )
    elif calibration:
        ax.plot(
            [c.load for c in calibration],
            [_number(c.throughput_rps) for c in calibration],
            linestyle="--",
            marker="x",
            color="0.4",
            label="null endpoint (ceiling)",
        )
    _load_axis(ax, report, loads)
    _from_zero(ax)
    ax.set_ylabel("successful req/s")
    ax.set_title("Throughput against load")
    _legend(ax)
    return _png(fig)


def windows_over_time(report: Report) -> bytes:
    """The p50 of every measurement window against time since the first window, per arm.

    Each window is a bar over its time span, so alternating arms interleave; steps are shaded in
    turn and labelled with their load. Drift shows as a slope within a step.
    """
    fig, ax = _figure(width=10.0)
    colours = _colours(report)
    mode = report.settings.mode
    steps = report.steps
    spans = [(w.start, w.end) for s in steps for _, w in _windows(s)]
    if not spans:
        ax.text(
            0.5, 0.5, "no measurement windows", ha="center", va="center", transform=ax.transAxes
        )
        return _png(fig)
    t0 = min(start for start, _ in spans)
    labelled: set[str] = set()
    values: list[float] = []
    for i, step in enumerate(steps):
        windows = list(_windows(step))
        if not windows:
            continue
        first = min(w.start for _, w in windows) - t0
        last = max(w.end for _, w in windows) - t0
        if i % 2:
            ax.axvspan(first, last, color="0.93", zorder=0)
        ax.text(
            first,
            1.0,
            f" {load_label(step.load, mode)}",
            fontsize=8,
            color="0.35",
            transform=ax.get_xaxis_transform(),
            va="bottom",
            ha="left",
        )
        for name in report.arm_order():
            mine = sorted((w for arm, w in windows if arm == name), key=lambda w: w.start)
            starts = np.array([w.start - t0 for w in mine])
            ends = np.array([w.end - t0 for w in mine])
            p50 = np.array([_number(w.p50_ms) for w in mine])
            label = name if name not in labelled else "_nolegend_"
            labelled.add(name)
            ax.hlines(p50, starts, ends, color=colours[name], linewidth=3, label=label)
            ax.plot(
                (starts + ends) / 2, p50, color=colours[name], linewidth=0.8, alpha=0.6, marker="."
            )
            values += [v for v in p50 if np.isfinite(v)]
    if not _log_if_wide(ax, values, axis="y"):
        _from_zero(ax)  # drift in proportion to the latency, not magnified by a tight axis
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("window p50 (ms)")
    ax.set_title("p50 per measurement window", pad=16)
    ax.grid(True, alpha=0.3)
    _legend(ax, outside=True)  # the bars fill the plot; a legend inside would hide some
    return _png(fig)


def rollout_timeline(report: RolloutReport) -> bytes:
    """A rollout, second by second: p50 and p99 of the answered requests (top), and who
    answered, stacked by version, with the failed requests in red (bottom). The swap is shaded;
    its moments (push, new version AVAILABLE, old one unloaded) are dashed lines."""
    fig, top, bottom = _over_time()
    seconds = report.timeline
    x = np.array([s.t_s + 0.5 for s in seconds])  # a second's values at its middle
    values: list[float] = []
    for key, style in (("p50_ms", "-"), ("p99_ms", "--")):
        ys = np.array([_number(getattr(s, key)) for s in seconds])
        top.plot(x, ys, linestyle=style, marker=".", color="C0", label=key.split("_")[0])
        values += [y for y in ys if np.isfinite(y)]
    if not _log_if_wide(top, values, axis="y"):
        _from_zero(top)
    top.set_ylabel("latency (ms)")
    top.set_title(f"{report.title}: per second")
    swap = report.swap
    # Each version keeps one colour, in the bars and in the lines of its moments.
    named = {str(v) for v in (swap.old_version, swap.new_version) if v is not None}
    versions = sorted(named | {v for s in seconds for v in s.versions}, key=int)
    colour = {v: f"C{(i + 1) % 10}" for i, v in enumerate(versions)}
    per_s = np.array([s.duration_s for s in seconds])  # the last second may be cut short
    base = np.zeros(len(seconds))
    for version in versions:
        counts = np.array([s.versions.get(version, 0) for s in seconds]) / per_s
        bottom.bar(x, counts, width=1.0, bottom=base, color=colour[version], alpha=0.8,
                   label=f"v{version}")  # fmt: skip
        base += counts
    errors = np.array([s.errors for s in seconds]) / per_s
    if errors.any():
        bottom.bar(x, errors, width=1.0, bottom=base, color="#d62728", label="failed")
    bottom.set_ylabel("requests per second")
    bottom.set_xlabel("time since the load began (s)")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        if swap.swap_start_s is not None:
            end = swap.swap_end_s if swap.swap_end_s is not None else swap.load_end_s
            end = max(end, swap.swap_start_s + 0.05)
            ax.axvspan(swap.swap_start_s, end, color="0.85", zorder=0, label="_nolegend_")
        for at, label, line in (
            (swap.swap_start_s, "swap starts", "0.2"),
            (
                swap.new_available_s,
                f"v{swap.new_version} AVAILABLE",
                colour.get(str(swap.new_version)),
            ),
            (
                swap.old_unloaded_s,
                f"v{swap.old_version} unloaded",
                colour.get(str(swap.old_version)),
            ),
        ):
            if at is not None:
                shown = label if ax is top else "_nolegend_"
                ax.axvline(at, color=line, linestyle="--", linewidth=1.4, label=shown, zorder=3)
    _legend(top, outside=True)
    _legend(bottom, outside=True)
    return _png(fig)


# A many-models run's series: (field, label, colour, line style).
_MANY_BYTES = (
    ("rss_bytes", "process RSS", "C0", "-"),
    ("resident_bytes", "resident versions' bytes", "C1", "-"),
)
_MANY_COUNTS = (
    ("resident_versions", "resident versions", "C2", "-"),
    ("loads", "loads since the start", "C3", "--"),
    ("evictions", "evictions since the start", "C4", ":"),
)
_MANY_LATENCIES = (
    ("warm_p50_ms", "warm p50", "C0", "-"),
    ("warm_p99_ms", "warm p99", "C0", "--"),
    ("cold_p50_ms", "cold p50", "C3", "-"),
    ("cold_max_ms", "cold max", "C3", ":"),
)


def many_memory(report: ManyReport) -> bytes:
    """The server's memory over a many-models run, from its scrapes: RSS and the resident
    versions' bytes (top, MB), the resident versions (bottom, with loads and evictions since
    the start). A series the server did not report is left out and named as such."""
    fig, top, bottom = _over_time()
    x = [s.t_s for s in report.memory]
    _, missing = _lines(top, x, report.memory, _MANY_BYTES, scale=1e-6)
    _, more = _lines(bottom, x, report.memory, _MANY_COUNTS)
    if missing + more:
        top.text(
            0.01, 0.98, "not reported: " + ", ".join(missing + more), transform=top.transAxes,
            ha="left", va="top", fontsize=8, color="0.35",
        )  # fmt: skip
    _from_zero(top)
    _from_zero(bottom)
    top.set_ylabel("MB")
    top.set_title(f"{report.title}: the server's memory")
    bottom.set_ylabel("versions")
    return _over_time_png(fig, top, bottom)


def many_latency(report: ManyReport) -> bytes:
    """Per second of a many-models run: the warm requests' p50 and p99 and the cold ones' p50
    and max (top, ms), and the requests, cold ones apart, per second (bottom)."""
    fig, top, bottom = _over_time()
    ticks = report.timeline
    x = [t.t_s + 0.5 for t in ticks]  # a second's values at its middle
    values, _ = _lines(top, x, ticks, _MANY_LATENCIES)
    if not _log_if_wide(top, values, axis="y"):
        _from_zero(top)
    top.set_ylabel("latency (ms)")
    top.set_title(f"{report.title}: cold and warm latency")
    base = np.zeros(len(ticks))
    for label, counts, colour in (
        ("warm", [t.requests - t.cold - t.failures for t in ticks], "C0"),
        ("cold", [t.cold for t in ticks], "C3"),
        ("failed", [t.failures for t in ticks], "0.3"),
    ):
        heights = np.asarray(counts, dtype=np.float64)
        if heights.any():
            bottom.bar(x, heights, width=1.0, bottom=base, color=colour, alpha=0.8, label=label)
            base += heights
    bottom.set_ylabel("requests per second")
    return _over_time_png(fig, top, bottom)


def _over_time() -> tuple[Figure, Axes, Axes]:
    """A figure of two panels over the same time axis, the top one taller."""
    fig = Figure(figsize=(10.0, 6.4), dpi=_DPI, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    return fig, top, bottom


def _over_time_png(fig: Figure, top: Axes, bottom: Axes) -> bytes:
    bottom.set_xlabel("time since the load began (s)")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        _legend(ax, outside=True)
    return _png(fig)


def _lines(
    ax: Axes,
    x: Sequence[float],
    points: Sequence[Any],
    series: Sequence[tuple[str, str, str, str]],
    scale: float = 1.0,
) -> tuple[list[float], list[str]]:
    """One line per series (a field of each point) that has a value somewhere: the values
    drawn, and the labels of the series with none."""
    drawn: list[float] = []
    missing: list[str] = []
    for key, label, colour, style in series:
        ys = np.array([_number(getattr(p, key)) for p in points]) * scale
        if np.isfinite(ys).any():
            ax.plot(x, ys, linestyle=style, marker=".", color=colour, label=label)
            drawn += [float(y) for y in ys if np.isfinite(y)]
        else:
            missing.append(label)
    return drawn, missing


# --- helpers ---------------------------------------------------------------------------------


def _figure(width: float = 8.0) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(width, 5.0), dpi=_DPI, layout="constrained")
    return fig, fig.add_subplot()


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    FigureCanvasAgg(fig)  # attaches itself: Agg, whatever pyplot backend is configured
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _colours(report: Report, extra: Sequence[str] = ()) -> dict[str, str]:
    known = report.arm_order()
    names = known + [n for n in extra if n not in known]
    return {name: f"C{i % 10}" for i, name in enumerate(names)}


def _loads(report: Report) -> list[float]:
    """Every load the run measured, ascending (an arm may have been measured at some only)."""
    return sorted({step.load for step in report.steps})


def _number(value: Any) -> float:
    """A plottable float: None (no data) becomes NaN, a gap in the line."""
    return float("nan") if value is None else float(value)


def _arm_series(
    report: Report, arm: str, value: Callable[[ArmStep], float | None]
) -> tuple[list[float], list[float]]:
    """(loads, values) of one arm over the steps that measured it, by load: a find-max search
    probes each arm at loads of its own. A value not measured is NaN, a gap in the line."""
    steps = sorted((s for s in report.steps if arm in s.arms), key=lambda s: s.load)
    return [s.load for s in steps], [_number(value(s.arms[arm])) for s in steps]


def _latency(key: str) -> Callable[[ArmStep], float | None]:
    def value(arm: ArmStep) -> float | None:
        latency: float | None = arm.latency_ms.of(key)
        return latency

    return value


def _windows(step: Step) -> list[tuple[str, Window]]:
    """(arm, window) of every measurement window of a step."""
    return [(name, w) for name, arm in step.arms.items() for w in arm.windows]


def _cdf_points(values: npt.NDArray[np.float64]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """(latency, fraction) of sorted values; at most 2 * _CDF_POINTS points, dense in the tail,
    so a million requests draw as fast as a thousand and p99.9 keeps its shape."""
    n = values.size
    fraction = np.arange(1, n + 1) / n
    if n <= 2 * _CDF_POINTS:
        return values, fraction
    body = np.linspace(0, n - 1, _CDF_POINTS)
    tail = n - np.geomspace(1, n, _CDF_POINTS)
    index = np.unique(np.clip(np.round(np.concatenate([body, tail])), 0, n - 1).astype(np.int64))
    return values[index], fraction[index]


def _load_axis(ax: Axes, report: Report, loads: Sequence[float]) -> None:
    ax.set_xlabel("target req/s" if report.settings.mode == "open" else "concurrent users")
    ax.grid(True, alpha=0.3)
    if not loads:
        return
    _log_if_wide(ax, loads, axis="x")
    ax.set_xticks(loads, labels=[f"{x:g}" for x in loads])
    ax.set_xticks([], minor=True)


def _log_if_wide(ax: Axes, values: Sequence[float], axis: str) -> bool:
    """Make the axis logarithmic when the values span more than _LOG_SPAN; True if it did."""
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > _LOG_SPAN:
        _log_scale(ax, axis)
        return True
    return False


def _from_zero(ax: Axes) -> None:
    """A linear y axis from 0 with headroom, also around a single point (autoscale gives none)."""
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top * 1.08 if top > 0 else 1.0)


def _log_scale(ax: Axes, axis: str) -> None:
    """Log axis ticked at 1-2-5 steps with plain numbers (0.2, 0.5, 1, 2), not as powers of 10."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    target.set_minor_formatter(NullFormatter())


def _legend(ax: Axes, outside: bool = False) -> None:
    handles, _ = ax.get_legend_handles_labels()
    if handles and outside:
        ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    elif handles:
        ax.legend(fontsize=9)
