"""Numbers in the manual's prose come from the committed result files, not typed twice (issue 39).

Every `{{ figure ... }}` and `{{ include ... }}` of the manual and of tools/bench/README.md resolves
against the committed files (tools/docsgen/figures.py), one that does not fails the strict build
naming the page, and the pages about the benchmarks type no figure of their own: a number with a
unit of the results (ms, µs, ×, req/s, rows/s, MB/h) in their prose is a placeholder's, a code
block's (a command's printed output), a bound (`≤ 100 MB/h`), or one of the few settings ALLOWED
names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tools.docsgen.figures import PLACEHOLDER, render

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GENERATED = ("docs/loadtest/", "docs/reference/")  # written by commands, not by hand

# the pages about results: the benchmarks, the method, and the guides that quote a run
BENCHMARK_PAGES = (
    "README.md",
    "tools/bench/README.md",
    "docs/index.md",
    "docs/benchmarks/index.md",
    "docs/benchmarks/peers.md",
    "docs/method.md",
    "docs/reliability.md",
    "docs/security.md",
    "docs/guides/containers.md",
    "docs/guides/export.md",
    "docs/guides/loadtest.md",
    "docs/guides/rollout.md",
    "docs/guides/serve.md",
    "docs/guides/tune.md",
)

# literals a benchmark page may type, and why: settings, not measurements
ALLOWED: dict[str, dict[str, str]] = {
    "tools/bench/README.md": {
        "40 ms": "Linux's minimum delayed-ACK time, which the REST fix removed from every request",
        **dict.fromkeys(
            ("1 ms", "3 ms", "4 ms", "6 ms", "8 ms", "10 ms", "20 ms"),
            "batch timeouts: the settings tried, and `make bench`'s own",
        ),
    },
    "docs/guides/rollout.md": {"50 ms": "how often rollout asks GetModelStatus: a setting"},
    "docs/guides/tune.md": {"0\u201310 ms": "the range of timeouts the search tries"},
    "docs/guides/export.md": {"10×": "the parity check's tolerance factor, a setting"},
}

_FIGURE = re.compile(
    r"(?<![\w.,])\d[\d,]*(?:\.\d+)?(?:\s?[\u2013-]\s?\d[\d,]*(?:\.\d+)?)?"
    r"\s?(?:×(?!\w)|ms\b|µs\b|req/s|rows/s|MB/h\b)"
)
_BOUND = re.compile(r"(?:[<>≤≥=]|<=|>=)\s*$")  # a goal's or a gate's bound, not a result
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def _hand_written() -> list[str]:
    pages = [p.relative_to(ROOT).as_posix() for p in sorted(DOCS.rglob("*.md"))]
    return [p for p in pages if not p.startswith(GENERATED)] + [
        "tools/bench/README.md",
        "README.md",
    ]


def _prose(text: str) -> str:
    """`text` without fenced code, code spans, comments and placeholders (line count kept)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    kept = "\n".join(lines)
    for pattern in (_COMMENT, PLACEHOLDER, _CODE_SPAN):
        kept = pattern.sub(lambda m: " " + "\n" * m.group(0).count("\n"), kept)
    return kept


def typed_figures(page: str, text: str) -> list[str]:
    """Every figure `text` types in its prose that ALLOWED does not name for `page`."""
    allowed = ALLOWED.get(page, {})
    found = []
    for number, line in enumerate(_prose(text).splitlines(), 1):
        for match in _FIGURE.finditer(line):
            if _BOUND.search(line[: match.start()]) or match.group(0) in allowed:
                continue
            found.append(f"{page}:{number}: {match.group(0)!r} in {line.strip()!r}")
    return found


# -- the committed pages ------------------------------------------------------------------------


@pytest.mark.parametrize("page", _hand_written())
def test_every_placeholder_resolves_against_the_committed_files(page: str) -> None:
    rendered = render((ROOT / page).read_text(), ROOT)
    assert rendered.errors == [], f"{page}:\n" + "\n".join(rendered.errors)


@pytest.mark.parametrize(
    "page",
    [
        "docs/benchmarks/index.md",
        "docs/benchmarks/peers.md",
        "docs/method.md",
        "docs/reliability.md",
        "docs/guides/containers.md",
        "docs/guides/loadtest.md",
    ],
)
def test_the_pages_about_results_read_them_from_the_files(page: str) -> None:
    assert render((ROOT / page).read_text(), ROOT).count > 0, f"{page} reads no figure"


@pytest.mark.parametrize("page", BENCHMARK_PAGES)
def test_no_benchmark_page_types_a_figure_of_its_own(page: str) -> None:
    found = typed_figures(page, (ROOT / page).read_text())
    assert found == [], "typed, not read from a result file:\n" + "\n".join(found)


def test_every_allowed_literal_is_still_there() -> None:
    """The allow-list shrinks with the pages: a literal no page types any more is dropped."""
    for page, allowed in ALLOWED.items():
        prose = _prose((ROOT / page).read_text())
        stale = [literal for literal in allowed if literal not in prose]
        assert stale == [], f"{page}: {stale} no longer typed; drop them from ALLOWED"


_BENCH_COMMAND = re.compile(r"make bench(?![\w-])|python -m tools.bench(?![\w.-]| (?!-)\w)")
_DURATION = re.compile(r"(?<![\w.])\d[\d,.]*\s?(?:s|sec|seconds|min|minutes)\b|\d\s?[\u2013-]\s?\d")


def test_make_bench_duration_is_stated_once_from_results_json() -> None:
    seconds = re.compile(r"(?<!\\)\{\{\s+figure\s+tools/bench/results/results\.json\s+seconds\b")
    stated = [p for p in _hand_written() if seconds.search((ROOT / p).read_text())]
    assert stated == ["docs/benchmarks/index.md"]
    for page in _hand_written():
        for number, line in enumerate((ROOT / page).read_text().splitlines(), 1):
            line = PLACEHOLDER.sub(" ", line)
            if _BENCH_COMMAND.search(line) and _DURATION.search(line):
                pytest.fail(f"{page}:{number} states how long `make bench` runs: {line.strip()}")
    make_help = re.search(r"^bench:.*##(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert make_help is not None
    assert not re.search(r"\d", make_help.group(1)), make_help.group(1)


# -- the placeholders ---------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> Path:
    results = {
        "seconds": 349.41,
        "environment": {"timestamp": "2026-11-24T12:08:55+00:00", "cpus": 2},
        "goals": [
            {"key": "G1", "value": 0.39527, "passed": True},
            {"key": "G9", "value": 6.305, "passed": False},
        ],
        "steps": [{"users": 1.0, "rps": 703.6}, {"users": 16.0, "rps": 1336.2}],
        "servers": {"stdlib": {"300 idle + slow header": "255.4 ms"}},
        "rss": {"end_mb": None},
        "requests": 90000,
    }
    (tmp_path / "r.json").write_text(json.dumps(results))
    (tmp_path / "r.md").write_text(
        "# Title\n\nintro\n\n## Goals\n\n| goal |\n| --- |\n| G1 |\n\n## Goals, again\n\nmore\n"
        "\n### sub\n\nsub text\n\n## Plots\n\n![a plot](plot.png)\n"
    )
    return tmp_path


@pytest.mark.parametrize(
    ("placeholder", "expected"),
    [
        ("{{ figure r.json goals.G1.value .3g }}×", "0.395×"),
        ("{{ figure r.json goals.0.value .2f }}", "0.40"),
        ("{{ figure r.json seconds ,.0f }} s", "349 s"),
        ("{{ figure r.json environment.timestamp .10 }}", "2026-11-24"),
        ("{{ figure r.json goals.G9.passed }}, {{ figure r.json goals.G1.passed }}", "miss, pass"),
        ("{{ figure r.json requests }}", "90,000"),
        ("{{ figure r.json steps.users=16.rps ,.0f }}", "1,336"),
        ('{{ figure r.json "servers.stdlib.300 idle + slow header" }}', "255.4 ms"),
        ("{{ figure r.json\n    goals.G1.value .1% }}", "39.5%"),
        ("\\{{ figure FILE PATH }} and docker's {{.Names}}", "{{ figure FILE PATH }} and docker's"),
    ],
)
def test_a_figure_is_the_value_at_its_path_formatted(
    files: Path, placeholder: str, expected: str
) -> None:
    rendered = render(placeholder, files)
    assert rendered.errors == []
    assert rendered.text.startswith(expected)


@pytest.mark.parametrize(
    ("placeholder", "message"),
    [
        ("{{ figure nope.json seconds }}", "no file nope.json"),
        ("{{ figure r.json secs }}", "no key 'secs' in r.json (keys: seconds, environment, "),
        ("{{ figure r.json goals.G13.value }}", "no item 'G13' in r.json: goals (G1, G9)"),
        ("{{ figure r.json steps.users=4.rps }}", "no item 'users=4' in r.json: steps"),
        ("{{ figure r.json rss.end_mb }}", "r.json: rss: end_mb is null (not measured"),
        ("{{ figure r.json goals }}", "the value is a list, not a figure"),
        ("{{ figure r.json environment.timestamp .2f }}", "format spec '.2f' does not fit"),
        ("{{ figure r.md seconds }}", "r.md is not JSON"),
        ("{{ figur r.json seconds }}", "unknown placeholder 'figur'"),
        ("{{ include r.md Plots }}", "links to 'plot.png', relative to that page"),
        ("{{ include r.md Goal }}", "more than one heading starting 'Goal' in r.md"),
        ("{{ include r.md Results }}", "no heading starting 'Results' in r.md (headings: Title;"),
        ("{{ figure ../r.json seconds }}", "../r.json is outside the repository"),
    ],
)
def test_what_does_not_resolve_is_named(files: Path, placeholder: str, message: str) -> None:
    root = files / "docs" if "../" in placeholder else files  # r.json is then one level up
    rendered = render(f"before {placeholder} after", root)
    assert len(rendered.errors) == 1
    assert rendered.errors[0].startswith(" ".join(placeholder.split()) + ": ")
    assert message in rendered.errors[0]
    assert "**[figure missing: " in rendered.text and rendered.text.endswith(" after")


def test_an_include_is_a_section_without_its_heading(files: Path) -> None:
    assert render("{{ include r.md Goals }}", files).text == "| goal |\n| --- |\n| G1 |"
    again = render('{{ include r.md "Goals, again" }}', files).text
    assert again == "more\n\n### sub\n\nsub text"  # down to the next heading of its level
    whole = render("{{ include r.md }}", files)
    assert whole.errors and "plot.png" in whole.errors[0]  # the whole file, with its plot


# -- the build ----------------------------------------------------------------------------------


def test_the_hook_warns_naming_the_page(files: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tools.docsgen import hooks

    page: Any = SimpleNamespace(
        file=SimpleNamespace(abs_src_path=str(ROOT / "docs" / "x.md"), src_uri="x.md")
    )
    text = "G1 is {{ figure tools/bench/results/results.json goals.G99.value }}."
    with caplog.at_level("WARNING"):
        out = hooks.on_page_markdown(text, page, config=None, files=None)  # type: ignore[arg-type]
    assert "**[figure missing:" in out
    assert [r.name for r in caplog.records] == ["mkdocs.plugins.tools.docsgen.hooks"]
    message = caplog.records[0].getMessage()
    assert message.startswith(
        "docs/x.md: {{ figure tools/bench/results/results.json goals.G99.value }}"
    )
    assert "no item 'G99' in tools/bench/results/results.json: goals" in message


def test_the_strict_build_fails_on_a_missing_figure(tmp_path: Path) -> None:
    """A site built with the hook, strictly: the placeholder that does not resolve stops it."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(
        "# Home\n\nRan in {{ figure tools/bench/results/results.json seconds ,.0f }} s, G13 "
        "{{ figure tools/bench/results/results.json goals.G13x.value }}.\n"
    )
    (tmp_path / "hooks.py").write_text(
        textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(ROOT)!r})
            from tools.docsgen.hooks import on_page_markdown
        """)
    )
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nhooks: [hooks.py]\nnav: [index.md]\n")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "s")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode != 0
    assert (
        "docs/index.md: {{ figure tools/bench/results/results.json goals.G13x.value }}: "
        "no item 'G13x' in tools/bench/results/results.json: goals (G1, G2" in built.stderr
    )
