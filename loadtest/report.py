"""The comparison report: per-arm results, ratios against the baseline arm, JSON and markdown.

Ratios are arm / baseline (graph / eager by default). For latencies a ratio below 1 means the arm is
faster; for throughput a ratio above 1 does. A ratio is None, never a crash or an infinity, when
either side has no value or no successful request (locust times failed requests too, and the time
it takes to be refused says nothing about a model), or the baseline's value is zero.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "METRICS",
    "ArmResult",
    "ComparisonReport",
    "RunSettings",
    "render_markdown",
    "render_table",
    "write_report",
]

# (attribute, label, digits) of every metric that has a ratio, in display order.
METRICS: tuple[tuple[str, str, int], ...] = (
    ("rps", "throughput (req/s)", 1),
    ("p50_ms", "p50 latency (ms)", 0),
    ("p90_ms", "p90 latency (ms)", 0),
    ("p99_ms", "p99 latency (ms)", 0),
    ("mean_ms", "mean latency (ms)", 2),
)


@dataclass(frozen=True)
class ArmResult:
    """One arm's load-test numbers; latencies in ms, None when the arm made no timed requests."""

    name: str
    address: str
    requests: int
    failures: int
    rps: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    mean_ms: float | None

    @property
    def successes(self) -> int:
        return self.requests - self.failures


@dataclass(frozen=True)
class RunSettings:
    """How the arms were driven; identical for every arm by construction."""

    protocol: str
    users: int
    duration_s: int
    model_name: str
    signature_name: str
    batch_size: int
    max_requests: int | None
    seed: int
    payload_file: str
    timestamp: str
    versions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ComparisonReport:
    """Results of every arm, in run order, compared with `baseline` (the last arm by default)."""

    arms: list[ArmResult]
    settings: RunSettings
    baseline: str = ""

    def __post_init__(self) -> None:
        if not self.arms:
            raise ValueError("a comparison needs at least one arm")
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be unique, got {names}")
        if not self.baseline:
            object.__setattr__(self, "baseline", names[-1])
        elif self.baseline not in names:
            raise ValueError(f"baseline {self.baseline!r} is not one of the arms {names}")

    def arm(self, name: str) -> ArmResult:
        return next(a for a in self.arms if a.name == name)

    @property
    def ratios(self) -> dict[str, dict[str, float | None]]:
        """`{"graph/eager": {"rps": 2.1, "p50_ms": 0.4, ...}}` for every arm but the baseline."""
        base = self.arm(self.baseline)
        return {
            f"{arm.name}/{base.name}": {
                attr: ratio(getattr(arm, attr), getattr(base, attr))
                if arm.successes > 0 and base.successes > 0
                else None
                for attr, _, _ in METRICS
            }
            for arm in self.arms
            if arm.name != base.name
        }

    def arms_without_successes(self) -> list[str]:
        """Names of the arms that got no successful request (the run says nothing about them)."""
        return [a.name for a in self.arms if a.successes <= 0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": asdict(self.settings),
            "baseline": self.baseline,
            "arms": {a.name: {**asdict(a), "successes": a.successes} for a in self.arms},
            "ratios": self.ratios,
        }


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base, or None when either is missing or base is zero."""
    if value is None or base is None or base == 0:
        return None
    return value / base


def render_markdown(report: ComparisonReport) -> str:
    """The report as markdown: the settings, then one row per metric and one column per arm."""
    s = report.settings
    ratio_names = list(report.ratios)
    header = ["metric", *(a.name for a in report.arms), *ratio_names]
    lines = [
        "# graphserve load-test comparison",
        "",
        f"- model: `{s.model_name}` (signature `{s.signature_name}`), batch size {s.batch_size}",
        f"- protocol: {s.protocol}; {s.users} user(s) per arm; {s.duration_s} s per arm"
        + (f", at most {s.max_requests} requests" if s.max_requests else ""),
        "- arms: " + ", ".join(f"{a.name} `{a.address}`" for a in report.arms),
        f"- same payload for every arm: `{s.payload_file}` (seed {s.seed})",
        f"- run at {s.timestamp}; " + ", ".join(f"{k} {v}" for k, v in s.versions.items()),
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |",
    ]
    for row in _rows(report):
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Ratios are arm / baseline: below 1 is faster for latency, above 1 is faster for "
        "throughput. Latencies are locust's response-time buckets (whole milliseconds below "
        "100 ms).",
        "",
    ]
    return "\n".join(lines)


def render_table(report: ComparisonReport) -> Table:
    """The same rows as `render_markdown`, as a rich Table for the terminal."""
    from rich.table import Table

    table = Table(title=f"{report.settings.model_name} over {report.settings.protocol}")
    table.add_column("metric")
    for name in [*(a.name for a in report.arms), *report.ratios]:
        table.add_column(name, justify="right")
    for row in _rows(report):
        table.add_row(*row)
    return table


def write_report(report: ComparisonReport, out_dir: Path) -> tuple[Path, Path]:
    """Write `report.json` and `report.md` into `out_dir`; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "report.json", out_dir / "report.md"
    json_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    md_path.write_text(render_markdown(report))
    return json_path, md_path


def _rows(report: ComparisonReport) -> list[list[str]]:
    ratios = list(report.ratios.values())
    rows = [
        ["requests", *(str(a.requests) for a in report.arms), *("" for _ in ratios)],
        ["failures", *(str(a.failures) for a in report.arms), *("" for _ in ratios)],
    ]
    for attr, label, digits in METRICS:
        rows.append(
            [
                label,
                *(_number(getattr(a, attr), digits) for a in report.arms),
                *(_ratio_text(r[attr]) for r in ratios),
            ]
        )
    return rows


def _number(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _ratio_text(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}\u00d7"  # multiplication sign
