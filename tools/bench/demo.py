"""The README's demo figure: `make demo DURATION=10s` run from the clone, its headline and table
kept in tools/bench/results/demo.json (with provenance) and written into README.md between the
two DEMO markers, so the front page shows what the command beside it printed, at a known commit.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

__all__ = [
    "COMMAND",
    "README",
    "readme_block",
    "render_demo",
    "report_warnings",
    "run_demo",
    "write_readme",
]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
COMMAND = ("make", "demo", "DURATION=10s")
START, END = "<!-- demo figure: python -m tools.bench demo -->", "<!-- end of the demo figure -->"


def run_demo() -> dict[str, Any]:
    """`make demo DURATION=10s`, as a user runs it from the clone (models/ and reports/demo,
    both ignored by git); the report's headline, settings and per-arm figures."""
    from graphserve.loadtest.comparison.run import environment

    subprocess.run(COMMAND, cwd=ROOT, check=True)
    report = json.loads((ROOT / "reports" / "demo" / "report.json").read_text())
    markdown = (ROOT / "reports" / "demo" / "report.md").read_text()
    (step,) = report["steps"]
    return {
        "environment": environment().to_json(),
        "command": " ".join(COMMAND),
        "headline": report["headline"],
        "warnings": report_warnings(markdown),
        "settings": {k: report["settings"][k] for k in ("protocol", "loads", "window_s")},
        "arms": {arm: _figures(a) for arm, a in step["arms"].items()},
    }


def report_warnings(markdown: str) -> list[str]:
    """The report's own warnings, as its report.md words them (the headline's "read with the
    warnings below" points at them)."""
    _, found, rest = markdown.partition("## Warnings\n\n")
    warnings = []
    for line in rest.splitlines() if found else []:
        if not line.startswith(_WARNING):
            break
        warnings.append(line.removeprefix(_WARNING))
    return warnings


_WARNING = "- \N{WARNING SIGN} "


def _figures(arm: dict[str, Any]) -> dict[str, Any]:
    latency = {k: arm["latency_ms"][k] for k in ("p50", "p99", "p99.9")}
    return {"rps": arm["throughput_rps"], "failures": arm["failures"], **latency}


def readme_block(results: dict[str, Any]) -> str:
    """What the README shows between its markers."""
    env = results["environment"]
    lines = [
        f"On this project's {env['cpus']}-core, no-GPU machine ({env['timestamp'][:10]}, "
        f"TensorFlow {env['versions'].get('tensorflow')}), `{results['command']}` printed:",
        "",
        "```",
        *results["headline"],
        # the report's warnings, which the headline asks to read with it, as printed beside it
        *(f"{_WARNING.strip(' -')} {w}" for w in results.get("warnings", [])),
        "```",
        "",
        "| arm | req/s | p50 ms | p99 ms | p99.9 ms | failures |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm, a in results["arms"].items():
        lines.append(f"| {arm} | {a['rps']:.1f} | {a['p50']:.3g} | {a['p99']:.3g} | "
                     f"{a['p99.9']:.3g} | {a['failures']} |")  # fmt: skip
    stamp = results.get("provenance") or {}
    commit = str(stamp.get("commit"))[:12]
    lines += ["", f"(commit `{commit}`; `python -m tools.bench demo` runs it again and rewrites "
              "this block.)"]  # fmt: skip
    return "\n".join(lines)


def render_demo(results: dict[str, Any]) -> str:
    """demo.md, from demo.json alone."""
    return "# The README's demo figure\n\n" + readme_block(results) + "\n"


def write_readme(results: dict[str, Any], readme: Path = README) -> None:
    """README.md with the block between its markers replaced by this run's."""
    text = readme.read_text()
    head, _, rest = text.partition(START)
    _, found, tail = rest.partition(END)
    if not found:
        raise ValueError(f"{readme} has no demo markers ({START} ... {END})")
    readme.write_text(f"{head}{START}\n{readme_block(results)}\n{END}{tail}")
