"""Every figure the project publishes, the command that writes it, and how to check it is current.

A published result is a JSON file written by one command (`python -m tools.bench ...`, or a
fuzzer's) and a markdown page rendered from that JSON alone (plus plots). `PUBLISHED` lists them;
`python -m tools.bench figures` (`make figures`) runs their commands one after the other;
`tests/test_published.py` checks that each committed page is what the current renderer makes of its
committed JSON and that its goals are the current goals, re-evaluated from the same measurements,
so a figure written by older code fails CI instead of being read as today's.

The sample load-test report (docs/loadtest/) is one too: `python -m tools.bench sample-report` runs
the `loadtest compare` command the load-test guide shows and copies its report into the manual.

Every result carries its provenance (`write` puts it in the JSON, the page's last lines and each
PNG's text; the sample report has it in docs/loadtest/provenance.json): the commit, whether the
tree was clean, the command that regenerates it, the machine and the date, and the paths whose
code it measures. `tests/test_provenance.py` fails a result measured on a dirty tree, or on a
commit older than the last change to what it measures.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BY_NAME", "PUBLISHED", "SAMPLE", "SAMPLE_REPORT", "Published", "changes", "footer",
    "png_text", "png_with_text", "provenance", "run_figures", "sample_report", "write",
]  # fmt: skip

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tools" / "bench" / "results"

Results = dict[str, Any]


def _suite_md(results: Results) -> str:
    from tools.bench.render import render_markdown

    return render_markdown(results)


def _suite_goals(results: Results) -> list[dict[str, Any]]:
    from tools.bench.goals import GOALS, evaluate

    return [g.to_json() for g in evaluate(results, GOALS)]


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


def _demo_md(results: Results) -> str:
    from tools.bench.demo import render_demo

    return render_demo(results)


def _frontend_md(results: Results) -> str:
    from tools.bench.render import render_frontend

    return render_frontend(results)


def _traffic_md(results: Results) -> str:
    from tools.bench.traffic import render_traffic

    return render_traffic(results)


def _traffic_goals(results: Results) -> list[dict[str, Any]]:
    from tools.bench.traffic import traffic_goals

    return traffic_goals(results)


def _shapes_md(results: Results) -> str:
    from tools.bench.shapes import render_shapes

    return render_shapes(results)


def _frontend_goals(results: Results) -> list[dict[str, Any]]:
    from tools.bench.goals import FRONTEND_GOALS, evaluate

    return [g.to_json() for g in evaluate(results, FRONTEND_GOALS)]


# What a result measures: the product's code it runs (a change there makes the figure stale) and
# the benchmark's own modules that drive and time it.
SERVER = ("serving/", "graphserve/core/", "graphserve/model/", "graphserve/clikit/")
EXPORT = ("exporter/",)
GENERATOR = ("loadtest/generator/",)
MEASURE = ("tools/bench/measure.py", "tools/bench/clients.py", "tools/bench/served.py",
           "tools/bench/timing.py", "tools/bench/tools.py")  # fmt: skip


@dataclass(frozen=True)
class Published:
    """One result: tools/bench/results/NAME.json, NAME.md (and NAME.png where it plots), the
    command that writes them, and the paths of the code it measures."""

    name: str
    command: tuple[str, ...]  # the arguments of `python` that regenerate it, from the root
    render: Callable[[Results], str] | None  # the page, from the JSON alone (None: no page)
    measures: tuple[str, ...]  # files and folders whose code the figures depend on
    goals: Callable[[Results], list[dict[str, Any]]] | None = None  # re-evaluated, if any
    needs: str = ""  # what the command needs beyond the project's install
    plots: tuple[str, ...] = ()  # the PNGs it writes beside its page, when it has data for them

    @property
    def json_path(self) -> Path:
        return RESULTS / f"{self.name}.json"

    @property
    def md_path(self) -> Path:
        return RESULTS / f"{self.name}.md"

    @property
    def command_line(self) -> str:
        return " ".join(("python", *self.command))

    def page(self, results: Results) -> str | None:
        """NAME.md: the renderer's page, then where its figures came from; None without one."""
        return self.render(results) + footer(results.get("provenance")) if self.render else None


def _bench(*args: str) -> tuple[str, ...]:
    return ("-m", "tools.bench", *args, "--out", "tools/bench/results")


PUBLISHED: tuple[Published, ...] = (
    Published("results", _bench(), _suite_md,
              (*SERVER, *EXPORT, *GENERATOR, *MEASURE, "tools/bench/run.py",
               "tools/bench/inprocess.py", "tools/bench/wire.py", "tools/bench/mobilenet.py",
               "tools/bench/models.py", "tools/bench/generator.py"), _suite_goals),
    Published("frontend", _bench("frontend"), _frontend_md,
              (*SERVER, *MEASURE, "tools/bench/frontend.py", "tools/bench/generator.py",
               "tools/bench/peers/"), _frontend_goals),
    Published("generator", _bench("generator"), _generator_md,
              (*SERVER, *GENERATOR, *MEASURE, "tools/bench/generator.py")),
    Published("families", _bench("families"), _families_md,
              (*SERVER, *EXPORT, *GENERATOR, "loadtest/comparison/", "tools/bench/families.py",
               "docs_src/byom/")),
    Published("soak", _bench("soak", "--duration", "15m"), _soak_md,
              (*SERVER, *GENERATOR, *MEASURE, "loadtest/comparison/", "tools/bench/soak.py"),
              _soak_goals,
              plots=("soak.png",)),
    Published("many", _bench("many"), _many_md,
              (*SERVER, *GENERATOR, "loadtest/manymodels/", *MEASURE, "tools/bench/many/"),
              _many_goals, plots=("many.png",)),  # about 15 minutes
    Published("traffic", _bench("traffic"), _traffic_md,
              (*SERVER, *EXPORT, "loadtest/replay/", "loadtest/traffic/", "loadtest/results/",
               *MEASURE, "tools/bench/traffic.py"), _traffic_goals),
    Published("traffic-shapes", _bench("shapes"), _shapes_md,
              (*SERVER, *EXPORT, "loadtest/replay/", "loadtest/traffic/", "loadtest/results/",
               "tools/bench/shapes.py", "tools/bench/mobilenet.py")),
    Published("tls", _bench("tls"), _tls_md,  # no goals: tools/bench/tls.py's NO_GOALS says why
              (*SERVER, *MEASURE, "tools/bench/tls.py")),
    Published("peers", _bench("peers"), _peers_md,
              (*SERVER, *GENERATOR, *MEASURE, "tools/bench/peers/", "tools/bench/mobilenet.py"),
              _peers_goals, "five peer venvs (~12 GB)", plots=("peers.png",)),
    Published("containers", _bench("containers"), _containers_md,
              (*SERVER, *EXPORT, "loadtest/", "deploy/", "docker/", "tools/bench/containers.py"),
              None,
              "a Docker engine, root"),
    Published("demo", _bench("demo"), _demo_md,
              (*SERVER, *EXPORT, "loadtest/", "graphserve/demo.py", "Makefile",
               "tools/bench/demo.py")),
    Published("fuzz-http", ("-m", "tools.fuzz.http_raw", "--cases", "5000", "--seed", "0",
                            "--out", "tools/bench/results/fuzz-http.json"), None,
              (*SERVER, "tools/fuzz/http_raw.py")),
    Published("cancel", ("-m", "tools.fuzz.cancel", "--duration", "20s", "--seed", "0",
                         "--out", "tools/bench/results/cancel.json"), None,
              (*SERVER, "tools/fuzz/cancel.py", "tools/fuzz/http_raw.py")),
)  # fmt: skip
BY_NAME = {item.name: item for item in PUBLISHED}


# -- provenance ---------------------------------------------------------------------------------

# What a run writes, not the code it measures: a change here leaves the tree clean for a result
# (README.md: `bench demo` writes its figure there).
OUTPUTS = ("tools/bench/results/", "docs/loadtest/", "README.md")
PNG_KEY = "graphserve-provenance"  # the PNG text chunk that carries it


def _git(*args: str) -> str | None:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else None


def changes() -> list[str]:
    """The work tree's changes (untracked files too) outside OUTPUTS, as `git status` names
    them; ["(not a git checkout)"] when git cannot tell."""
    status = _git("status", "--porcelain", "--untracked-files=all")
    if status is None:
        return ["(not a git checkout)"]
    paths = [line[3:] for line in status.splitlines() if line.strip()]
    return [p for p in paths if not p.split(" -> ")[-1].startswith(OUTPUTS)]


def provenance(item: Published) -> dict[str, Any]:
    """Where `item`'s figures come from, now: the commit, whether the tree was clean, the
    command that regenerates them (and the one that ran), the machine, the date and the paths
    it measures."""
    import os
    import platform
    from datetime import UTC, datetime

    head = _git("rev-parse", "HEAD")
    dirty = changes()
    return {
        "commit": head.strip() if head else None,
        "clean": not dirty,
        "changes": dirty[:20],
        "command": item.command_line,
        "ran": " ".join(("python", *sys.orig_argv[1:])),
        "machine": {"hostname": platform.node(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "python": platform.python_version()},
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "measures": list(item.measures),
    }  # fmt: skip


def footer(stamp: Mapping[str, Any] | None) -> str:
    """The page's last lines: where its figures came from."""
    if not stamp:
        return "\n---\n\n*Provenance: not recorded (written before results carried it).*\n"
    tree = "a clean tree" if stamp["clean"] else "a tree with uncommitted changes"
    machine = stamp["machine"]
    return (
        f"\n---\n\n*Measured at commit `{str(stamp['commit'])[:12]}` ({tree}) on "
        f"{stamp['date'][:10]}, on {machine['hostname']} ({machine['cpus']} CPUs, "
        f"{machine['platform']}), by `{stamp['ran']}`; regenerate with `{stamp['command']}`. "
        f"It measures {', '.join(f'`{p}`' for p in stamp['measures'])}.*\n"
    )


def png_with_text(png: bytes, key: str, text: str) -> bytes:
    """`png` with a tEXt chunk `key`=`text` before its end (PNG's own metadata, which any
    reader of PNG text shows)."""
    if not png.startswith(b"\x89PNG\r\n\x1a\n") or png[-12:-8] != b"\x00\x00\x00\x00":
        raise ValueError("not a PNG ending in IEND")
    data = key.encode("latin-1") + b"\x00" + text.encode("latin-1", "backslashreplace")
    chunk = b"tEXt" + data
    packed = struct.pack(">I", len(data)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    return png[:-12] + packed + png[-12:]


def png_text(png: bytes) -> dict[str, str]:
    """The tEXt chunks of `png`."""
    found, at = {}, 8
    while at < len(png):
        (length,), kind = struct.unpack(">I", png[at : at + 4]), png[at + 4 : at + 8]
        if kind == b"tEXt":
            key, _, value = png[at + 8 : at + 8 + length].partition(b"\x00")
            found[key.decode("latin-1")] = value.decode("latin-1")
        at += 12 + length
    return found


def write(
    item: Published | str, results: Results, out: Path, plots: Mapping[str, bytes] | None = None
) -> list[Path]:
    """OUT/NAME.json with its provenance, NAME.md (its page) and each plot (a PNG carrying the
    same provenance); the paths written. `results` gains its "provenance"."""
    item = BY_NAME[item] if isinstance(item, str) else item
    results["provenance"] = provenance(item)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{item.name}.json"]
    paths[0].write_text(json.dumps(results, indent=2) + "\n")
    page = item.page(results)
    if page is not None:
        paths.append(out / f"{item.name}.md")
        paths[-1].write_text(page)
    stamp = json.dumps(results["provenance"], sort_keys=True)
    for name, png in (plots or {}).items():
        paths.append(out / name)
        paths[-1].write_bytes(png_with_text(png, PNG_KEY, stamp))
    return paths


# docs/loadtest: the load-test guide's command, on the example mlp
SAMPLE_REPORT = ROOT / "docs" / "loadtest"
SAMPLE_COMMAND = (
    "loadtest", "compare", "--source", "examples:mlp", "--users", "1,4,16", "--calibrate",
    "--cold-start", "--window", "2s", "--min-windows", "3", "--max-windows", "6",
)  # fmt: skip
SAMPLE = Published("sample-report", ("-m", "tools.bench", "sample-report"), None,
                   (*SERVER, *EXPORT, "loadtest/"))  # fmt: skip
PROVENANCE = "provenance.json"  # beside the sample report's files


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
    # the report's own files keep the product's format; where they came from is written beside
    (out / PROVENANCE).write_text(json.dumps(provenance(SAMPLE), indent=2) + "\n")
    return [*copied, out / PROVENANCE]


def run_figures(
    skip: Sequence[str], soak_duration: str = "15m", say: Callable[[str], None] = print
) -> dict[str, float]:
    """Every command of PUBLISHED not in `skip`, then the sample report (unless skipped as
    "sample-report"), one after the other in child processes; the seconds each took. Raises
    CalledProcessError on the first that fails."""
    took: dict[str, float] = {}
    for item in (*PUBLISHED, SAMPLE):
        if item.name in skip:
            continue
        command = [sys.executable, *item.command]
        if item.name == "soak":
            command[command.index("--duration") + 1] = soak_duration
        say(f"{item.name}: python {' '.join(command[1:])}")
        started = time.perf_counter()
        subprocess.run(command, check=True, cwd=ROOT)
        took[item.name] = time.perf_counter() - started
    return took
