"""Every published figure says where it came from, and it is current (issue 49).

Each file under tools/bench/results/ belongs to a result of tools/bench/published.py's PUBLISHED,
and each result's JSON carries its provenance (its PNGs the same, in their text; its page in its
last lines): the commit, a clean tree, the command that regenerates it, the machine and the date.
A result fails here when it was measured on a tree with uncommitted changes, or on a commit older
than the last change to the code it declares it measures: `python -m tools.bench figures` (or the
one command its page names) writes it again. The sample report (docs/loadtest/) is held to the
same, through the provenance.json beside it. Dated pages of history live elsewhere
(docs/benchmarks/history/) and are not held to it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tools.bench.published import (
    PNG_KEY,
    PROVENANCE,
    PUBLISHED,
    RESULTS,
    ROOT,
    SAMPLE,
    SAMPLE_REPORT,
    Published,
    footer,
    png_text,
    png_with_text,
)

FIELDS = {"commit", "clean", "command", "ran", "machine", "date", "measures"}


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def _stale(stamp: dict[str, Any], item: Published) -> list[str]:
    """Why `stamp` is not current for `item`'s declared paths; empty when it is."""
    assert set(stamp) >= FIELDS, f"{item.name}: provenance lacks {FIELDS - set(stamp)}"
    assert stamp["command"] == item.command_line, f"{item.name}: written by another command"
    assert stamp["measures"] == list(item.measures), f"{item.name}: measured other paths"
    problems = []
    if not stamp["clean"]:
        problems.append(f"measured on a tree with uncommitted changes: {stamp.get('changes')}")
    commit = stamp["commit"]
    if _git("merge-base", "--is-ancestor", commit, "HEAD").returncode != 0:
        problems.append(f"its commit {commit} is not in this branch's history")
        return problems
    since = _git("log", "--format=%h %s", f"{commit}..HEAD", "--", *item.measures).stdout
    if since.strip():
        problems.append(f"what it measures changed since {commit[:12]}:\n{since[:2000]}")
    return problems


def test_the_history_is_whole() -> None:
    """Staleness is read from git: a shallow clone cannot tell, so it must fail, not pass."""
    shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip()
    assert shallow == "false", "a shallow clone: `git fetch --unshallow` to check provenance"


def test_every_declared_path_exists() -> None:
    for item in (*PUBLISHED, SAMPLE):
        missing = [p for p in item.measures if not (ROOT / p).exists()]
        assert missing == [], f"{item.name} declares paths that are not there: {missing}"


def test_every_result_file_belongs_to_a_published_result() -> None:
    owned = {f"{i.name}.json" for i in PUBLISHED}
    owned |= {f"{i.name}.md" for i in PUBLISHED if i.render} | {
        p for i in PUBLISHED for p in i.plots
    }
    stray = sorted(p.name for p in RESULTS.iterdir() if p.name not in owned)
    assert stray == [], (
        f"no command regenerates {stray}: list it in PUBLISHED, retire it, or move it to "
        "docs/benchmarks/history/ as a dated page"
    )


@pytest.mark.parametrize("item", PUBLISHED, ids=lambda p: f"{p.name}.json")
def test_each_result_was_measured_on_a_clean_tree_at_the_code_it_measures(item: Published) -> None:
    results = json.loads(item.json_path.read_text())
    assert "provenance" in results, f"{item.json_path.name} records no provenance: regenerate it"
    problems = _stale(results["provenance"], item)
    assert problems == [], f"{item.name}: regenerate with {item.command_line}\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize(
    ("item", "plot"), [pytest.param(i, p, id=p) for i in PUBLISHED for p in i.plots]
)
def test_each_plot_carries_its_results_provenance(item: Published, plot: str) -> None:
    stamp = json.loads(item.json_path.read_text()).get("provenance")
    if not (RESULTS / plot).exists():  # written only when the run has data for it
        assert stamp is not None
        return
    text = png_text((RESULTS / plot).read_bytes())
    assert PNG_KEY in text, f"{plot} carries no provenance"
    assert json.loads(text[PNG_KEY]) == stamp


def test_the_sample_report_was_measured_on_a_clean_tree_at_the_code_it_measures() -> None:
    path = SAMPLE_REPORT / PROVENANCE
    assert path.is_file(), f"{path} is missing: python -m tools.bench sample-report"
    problems = _stale(json.loads(path.read_text()), SAMPLE)
    assert problems == [], "\n".join(problems)


# -- the helpers --------------------------------------------------------------------------------


def test_a_png_keeps_its_image_and_gains_the_text(tmp_path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    figure = Figure(figsize=(2, 1))
    figure.add_subplot().plot([0, 1], [1, 0])
    plain, stamped = tmp_path / "plain.png", tmp_path / "stamped.png"
    FigureCanvasAgg(figure).print_png(str(plain))
    stamped.write_bytes(png_with_text(plain.read_bytes(), PNG_KEY, '{"commit": "abc"}'))
    assert png_text(stamped.read_bytes())[PNG_KEY] == '{"commit": "abc"}'
    assert (imread(stamped) == imread(plain)).all()  # the pixels, unchanged
    with pytest.raises(ValueError, match="not a PNG"):
        png_with_text(b"GIF89a", PNG_KEY, "x")


def test_the_footer_says_where_the_page_came_from() -> None:
    stamp = {
        "commit": "0123456789abcdef", "clean": False, "command": "python -m tools.bench tls",
        "ran": "python -m tools.bench tls --quick", "date": "2026-11-29T09:00:00+00:00",
        "machine": {"hostname": "vm", "cpus": 2, "platform": "Linux"}, "measures": ["serving/"],
    }  # fmt: skip
    text = footer(stamp)
    ran, command = "by `python -m tools.bench tls --quick`", "with `python -m tools.bench tls`"
    for part in ("`0123456789ab`", "uncommitted changes", "2026-11-29", "`serving/`", ran, command):
        assert part in text, part
    assert "not recorded" in footer(None)
