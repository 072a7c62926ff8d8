"""Every figure the project publishes, the command that writes it, and how to check it is current.

A published result is a JSON file written by one command of `python -m tools.bench` and a markdown
page rendered from that JSON alone (plus plots). `PUBLISHED` lists them; `python -m tools.bench
figures` (`make figures`) runs their commands one after the other; `tests/test_published.py` checks
that each committed page is what the current renderer makes of its committed JSON and that its goals
are the current goals, re-evaluated from the same measurements, so a figure written by older code
fails CI instead of being read as today's.

The sample load-test report (docs/loadtest/) is one too: `python -m tools.bench sample-report` runs
the `loadtest compare` command the load-test guide shows and copies its report into the manual.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PUBLISHED", "SAMPLE_REPORT", "Published", "run_figures", "sample_report"]

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tools" / "bench" / "results"

Results = dict[str, Any]


def _suite_md(results: Results) -> str:
    from tools.bench.render import render_markdown

    return render_markdown(results)


def _suite_goals(results: Results) -> list[dict[str, Any]]:
    from tools.bench.goals import GOALS, evaluate

    return [g.to_json() for g in evaluate(results, GOALS)]


def _http_md(results: Results) -> str:
    from tools.bench.render import render_http

    return render_http(results)


def _http_goals(results: Results) -> list[dict[str, Any]]:
    from tools.bench.goals import HTTP_GOALS, evaluate

    return [g.to_json() for g in evaluate(results, HTTP_GOALS)]


def _generator_md(results: Results) -> str:
    from tools.bench.render import render_generator

    return render_generator(results)


def _peers_md(results: Results) -> str:
    from tools.bench.peers.report import render_peers

    return render_peers(results)


def _peers_goals(results: Results) -> list[dict[str, Any]]:
    from tools.bench.goals import PEER_GOALS, evaluate

    return [g.to_json() for g in evaluate(results, PEER_GOALS)]


def _soak_md(results: Results) -> str:
    from tools.bench.soak import render_soak

    return render_soak(results)


def _soak_goals(results: Results) -> list[dict[str, Any]]:
    from tools.bench.soak import soak_goals

    return soak_goals(results)


def _many_md(results: Results) -> str:
    from tools.bench.many import render_many

    return render_many(results)


def _many_goals(results: Results) -> list[dict[str, Any]]:
    from tools.bench.many import many_goals

    return many_goals(results)


def _containers_md(results: Results) -> str:
    from tools.bench.containers import render

    return render(results)


def _tls_md(results: Results) -> str:
    from tools.bench.tls import render_tls

    return render_tls(results)


def _families_md(results: Results) -> str:
    from tools.bench.families import render_families

    return render_families(results)


def _frontend_md(results: Results) -> str:
    from tools.bench.render import render_frontend

    return render_frontend(results)


def _frontend_goals(results: Results) -> list[dict[str, Any]]:
    from tools.bench.goals import FRONTEND_GOALS, evaluate

    return [g.to_json() for g in evaluate(results, FRONTEND_GOALS)]


# The server as it was before issue 42, measured by today's benchmark beside today's server in
# one run: a checkout of that commit, e.g. `git worktree add /tmp/graphserve-before eb7fdb9`.
BEFORE_42 = "/tmp/graphserve-before"


@dataclass(frozen=True)
class Published:
    """One result: tools/bench/results/NAME.json and NAME.md, and the command that writes both."""

    name: str
    command: tuple[str, ...]  # arguments of `python -m tools.bench`
    render: Callable[[Results], str]  # the page, from the JSON alone
    goals: Callable[[Results], list[dict[str, Any]]] | None = None  # re-evaluated, if any
    needs: str = ""  # what the command needs beyond the project's install

    @property
    def json_path(self) -> Path:
        return RESULTS / f"{self.name}.json"

    @property
    def md_path(self) -> Path:
        return RESULTS / f"{self.name}.md"


PUBLISHED: tuple[Published, ...] = (
    Published("results", (), _suite_md, _suite_goals),
    Published("frontend", ("frontend",), _frontend_md, _frontend_goals),
    Published(
        "frontend-42",
        ("frontend", "--name", "42", "--baseline", BEFORE_42),
        _frontend_md,
        _frontend_goals,
        f"a checkout of eb7fdb9 at {BEFORE_42} (git worktree add {BEFORE_42} eb7fdb9)",
    ),
    Published("generator", ("generator",), _generator_md),
    Published("families", ("families",), _families_md),
    Published("soak", ("soak",), _soak_md, _soak_goals),
    Published("many", ("many",), _many_md, _many_goals),  # about 15 minutes
    Published("tls", ("tls",), _tls_md),  # no goals: tools/bench/tls.py's NO_GOALS says why
    Published("peers", ("peers",), _peers_md, _peers_goals, "five peer venvs (~12 GB)"),
    Published("containers", ("containers",), _containers_md, None, "a Docker engine, root"),
    Published("http", ("http",), _http_md, _http_goals, "the HTTP servers it compares"),
)

# docs/loadtest: the load-test guide's command, on the example mlp
SAMPLE_REPORT = ROOT / "docs" / "loadtest"
SAMPLE_COMMAND = (
    "loadtest", "compare", "--source", "examples:mlp", "--users", "1,4,16", "--calibrate",
    "--cold-start", "--window", "2s", "--min-windows", "3", "--max-windows", "6",
)  # fmt: skip


def _report_files(report_json: Path) -> list[str]:
    """The files a report.json lists (itself included), relative to its folder; none if absent."""
    if not report_json.is_file():
        return []
    files = json.loads(report_json.read_text())["files"]
    return [files["json"], files["markdown"], files["html"], *files["plots"],
            *files["locust_csv"], *([files["raw"]] if files["raw"] else [])]  # fmt: skip


def sample_report(out: Path = SAMPLE_REPORT, work_dir: Path | None = None) -> list[Path]:
    """Export the example mlp, run SAMPLE_COMMAND against it (self-managed graph, null and
    eager servers), and copy the report with every file it links to (plots, locust's CSVs, the
    raw records) into `out`, in place of what was there."""
    graphserve = [sys.executable, "-m", "graphserve"]
    with tempfile.TemporaryDirectory(prefix="graphserve-sample-report-") as tmp:
        where = work_dir or Path(tmp)
        models, run = where / "models", where / "run"
        subprocess.run([*graphserve, "export", "examples:mlp", "--name", "mlp",
                        "--base-path", str(models)], check=True)  # fmt: skip
        subprocess.run([*graphserve, *SAMPLE_COMMAND, "--model-base-path", str(models / "mlp"),
                        "--out", str(run)], check=True)  # fmt: skip
        names = _report_files(run / "report.json")
        for old in _report_files(out / "report.json"):  # the last sample's, and nothing else
            (out / old).unlink(missing_ok=True)
        copied = []
        for name in names:  # every file the report links to, as it wrote them
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run / name, out / name)
            copied.append(out / name)
    return copied


def run_figures(
    skip: Sequence[str], soak_duration: str, say: Callable[[str], None] = print
) -> dict[str, float]:
    """Every command of PUBLISHED not in `skip`, then the sample report (unless skipped as
    "sample-report"), one after the other in child processes; the seconds each took. Raises
    CalledProcessError on the first that fails."""
    took: dict[str, float] = {}
    for item in PUBLISHED:
        if item.name in skip:
            continue
        if item.name == "frontend-42" and not Path(BEFORE_42).is_dir():
            say(f"{item.name}: skipped, it needs {item.needs}")
            continue
        command = [sys.executable, "-m", "tools.bench", *item.command, "--out", str(RESULTS)]
        if item.name == "soak":
            command += ["--duration", soak_duration]
        say(f"{item.name}: {' '.join(command[1:])}")
        started = time.perf_counter()
        subprocess.run(command, check=True, cwd=ROOT)
        took[item.name] = time.perf_counter() - started
    if "sample-report" not in skip:
        say("sample-report: docs/loadtest")
        started = time.perf_counter()
        sample_report()
        took["sample-report"] = time.perf_counter() - started
    return took
