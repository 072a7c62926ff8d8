"""Numbers in the manual's prose come from the committed result files, not typed twice (issue 39).

Every `{{ figure ... }}` and `{{ include ... }}` of the manual and of tools/bench/README.md resolves
against the committed files (tools/docsgen/figures.py), one that does not fails the strict build
naming the page, and no hand-written page (every one, found, not listed) types a figure of its
own: a number with a unit the results carry (ms, s, ×, %, MB, req/s, loads a second, ...) in its
prose is a placeholder's, a code block's (a command's printed output), a bound (`≤ 100 MB/h`), a
setting ALLOWED names with its reason, or a figure measured once by hand that its paragraph dates
(MEASURED_ONCE). A count, a version, a date or an issue number has no unit and is not a figure.
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
# written by commands, not by hand: the sample report, the API reference, the benchmarks' results
# and the dated history pages (a retired command's last results, kept as they were rendered)
GENERATED = (
    "docs/loadtest/",
    "docs/reference/",
    "docs/benchmarks/history/",
    "tools/bench/results/",
)

_SOAK_RATE = "`make soak`'s rate (soak.json's plan.rate): a setting"
_GOOGLE = "Google's published cost of TLS (Gmail's front ends): an outside figure, cited, not ours"

# literals a page may type, and why: settings, bounds and inputs, not measurements
ALLOWED: dict[str, dict[str, str]] = {
    "docs/benchmarks/index.md": {
        "64 KiB": "the largest body REST runs on its event loop (HERE_MAX_BODY_BYTES): a setting",
    },
    "docs/benchmarks/peers.md": {"60 s": "BentoML's default latency budget, which its app keeps"},
    "docs/guides/deploy.md": {
        "10 minutes": "the startup probe's allowance for loading (deploy/k8s.py): a setting",
        "1 MiB": "Kubernetes' limit on a ConfigMap: a bound",
        "1 h": "`--loadtest-linger`'s default",
    },
    "docs/guides/export.md": {
        "10×": "the parity check's tolerance factor, a setting",
        "3 s": "the time box of the zoo's timed calls (tests/test_zoo.py's TIME_BOX_S)",
    },
    "docs/guides/loadtest-many.md": {
        "2 s": "`--scrape-every`'s default",
        "5%": "the share of the time between scrapes past which the report warns: a threshold",
    },
    "docs/guides/loadtest.md": {
        "95%": "the intervals' confidence level; the share of the rate an open-loop probe sends",
        "10%": "`--precision`'s default",
        "60 s": "`--workers-timeout`'s default, and the message that quotes it",
        "5 minutes": "how long a worker waits for its master: locust's own limit",
        "3\u20134 s": "locust's heartbeat timeout: its setting",
        "90%": "the generator-bound threshold of a locust process (a machine's is 95%)",
    },
    "docs/guides/many.md": {
        "10 s": "the scrape interval the guide advises: a setting",
        "10 %": "M2d's bound: base + budget + 10 %",
    },
    "docs/guides/rollout.md": {"50 ms": "how often rollout asks GetModelStatus: a setting"},
    "docs/guides/traffic.md": {
        "2 ms": "replay's on-time bound (loadtest/replay/plan.py ON_TIME_S): a setting",
    },
    "docs/guides/serve.md": {
        "64 MiB": "the request size limit's default, and the request log file size's",
        "1 GiB": "the request log's disk cap default (serving.requestlog.DEFAULT_TOTAL_BYTES)",
        "25 ms": "how often the request log writer wakes (requestlog._DRAIN_S): a setting",
        "10 s": "the REST head timeout's default",
        "60 s": "the REST body timeout's default",
        "0.2 s": "a dead worker's first back-off (serving/workers.py _BACK_OFF): a setting",
        "30 s": "a dead worker's longest back-off (serving/workers.py _BACK_OFF): a setting",
    },
    "docs/guides/tune.md": {
        "0\u201310 ms": "the range of timeouts the search tries",
        "5%": "the gain a pass must make for the search to go on (tune/search.py's _GAIN)",
        "2%": "the throughputs the search calls a tie (tune/search.py's _TIE)",
        "1 s": "a trial's warm-up: a setting",
        "2 s": "a trial's window: a setting",
    },
    "docs/index.md": {
        "5 s": "`make demo`'s window",
        "20 s": "`make demo`'s measured time per arm",
        "2 s": "`make demo`'s warm-up",
        "95%": "the confidence level of the headline's interval",
    },
    "docs/method.md": {
        **dict.fromkeys(
            ("95%", "95 %"), "the intervals' confidence level; the machine's generator-bound share"
        ),
        "90%": "a locust process's CPU share that marks a window generator-bound",
        "10%": "how close to the null server's throughput an arm measured the stack, not the model",
    },
    "docs/reliability.md": {
        "64 MiB": "the request size limit (DEFAULT_MAX_BODY_BYTES)",
        "64 KiB": "the cap on a request's head (MAX_HEAD_BYTES)",
        "70,000 bytes": "a fuzz case's method: an input",
        "0.02 s": "DEADLINE_SLACK, serving/deadline.py's setting",
        "16 MB": "the stress test's bound on RSS growth (MAX_RSS_GROWTH_KB)",
        "100 requests/s": _SOAK_RATE,
    },
    "docs/security.md": {"1%": _GOOGLE},
    "tests/fixtures/README.md": {
        "2 s": "the benchmark's window, which set the captured commands' flags",
        "10 %": "perf_analyzer's stability threshold (`-s 10`)",
    },
    "tools/bench/README.md": {
        "40 ms": "Linux's minimum delayed-ACK time, which the REST fix removed from every request",
        "25 %": "perf_analyzer's second stability criterion, when 10 % never holds: a setting",
        **dict.fromkeys(
            ("1 ms", "3 ms", "4 ms", "6 ms", "8 ms", "10 ms"),
            "batch timeouts: the settings tried, and `make bench`'s own",
        ),
        "20 ms": "a batch timeout tried; M2c's margin over the mean load time",
        "1 s": "the prototype's measurement windows: a setting",
        "110 KB": "one MobileNetV2 gRPC request (a 96×96×3 float32 image): the input's size",
        "100 requests/s": _SOAK_RATE,
        "5 s": "the soak's sampling interval (plan.sample_every_s); M1's margin",
        "200 requests a second": "M2's rate: the goal's setting",
        "5 min": "M2's duration: the goal's setting",
        "10 %": "M2d's and M4's bounds: base + budget + 10 %, before + max(10 %, 50 MB)",
        "50 MB": "M4's bound: before + max(10 %, 50 MB)",
        "1%": _GOOGLE,
    },
}

# figures measured once by hand that no result file holds, with the date the paragraph typing
# them gives: no run will update them, so the reader is told which day they are from
MEASURED_ONCE: dict[str, dict[str, str]] = {
    "docs/benchmarks/peers.md": {"12 GB": "2026-11-26"},
    "docs/guides/containers.md": dict.fromkeys(("2.5 GB", "2.3 GB", "169 MB"), "2026-11-25"),
    "docs/guides/export.md": {"70 s": "2026-11-23"},
    "docs/guides/loadtest-many.md": dict.fromkeys(("100 ms", "1.1 MB", "0.3 s"), "2026-11-27"),
    "docs/guides/tune.md": {"174 s": "2026-11-24"},
    "docs/reliability.md": dict.fromkeys(
        ("2.3 MB", "0.7 MB", "3-4 minutes", "112 s"), "2026-11-26"
    ),
    "tools/bench/README.md": dict.fromkeys(  # the py-spy profile of issue 30
        ("81 %", "56 %", "40 %", "18 %", "13 %", "9 %", "3\u20134 %"), "2026-11-26"
    ),
}

# a number (or a range) with a unit the result files carry: a time, a size, a share, a ratio, a
# rate (its noun may come between: `48 loads a second`, `3,000 gRPC requests/s`); a count, a
# version, a date or an issue number has none
_FIGURE = re.compile(
    r"(?<![\w.,])\d[\d,]*(?:\.\d+)?(?:\s?[\u2013-]\s?\d[\d,]*(?:\.\d+)?)?"
    r"(?:\s?(?:×(?!\w)|%|[mµn]s\b|s\b|sec\b|seconds?\b|min\b|minutes?\b|h\b|hours?\b"
    r"|[kKMGT]i?B(?:/[sh])?\b|bytes\b)"
    r"|x(?![\w.])"
    r"|(?:\s[A-Za-z]+)?\s?[a-z]+/s\b"
    r"|(?:\s(?!and\b|or\b)[A-Za-z]+){0,2}\s(?:a|per)\ssecond\b)"
)
_BOUND = re.compile(r"(?:[<>≤≥=]|<=|>=)\s*$")  # a goal's or a gate's bound, not a result
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def _hand_written() -> list[str]:
    """Every markdown page written by hand, found, not listed, so that a new one is read too: the
    manual's, the README, and those beside the code (the benchmark notes, the fixtures')."""
    found = [ROOT / "README.md", *DOCS.rglob("*.md")]
    found += [*(ROOT / "tools").rglob("*.md"), *(ROOT / "tests").rglob("*.md")]
    pages = sorted(p.relative_to(ROOT).as_posix() for p in found)
    return [p for p in pages if not p.startswith(GENERATED) and "/." not in f"/{p}"]


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


def _typed(page: str, text: str) -> list[tuple[int, str, str]]:
    """(line number, figure, line) of every figure `text` types in its prose that is no bound and
    that neither ALLOWED nor MEASURED_ONCE names for `page`."""
    allowed = ALLOWED.get(page, {}) | MEASURED_ONCE.get(page, {})
    found = []
    for number, line in enumerate(_prose(text).splitlines(), 1):
        for match in _FIGURE.finditer(line):
            if _BOUND.search(line[: match.start()]) or match.group(0) in allowed:
                continue
            found.append((number, match.group(0), line.strip()))
    return found


def typed_figures(page: str, text: str) -> list[str]:
    """Every figure `text` types in its prose of its own, as `page:line: figure in line`."""
    return [
        f"{page}:{number}: {figure!r} in {line!r}" for number, figure, line in _typed(page, text)
    ]


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


@pytest.mark.parametrize("page", _hand_written())
def test_no_page_types_a_figure_of_its_own(page: str) -> None:
    found = typed_figures(page, (ROOT / page).read_text())
    assert found == [], "typed, not read from a result file:\n" + "\n".join(found)


def _figures(prose: str) -> set[str]:
    return {match.group(0) for match in _FIGURE.finditer(prose)}


def test_every_allowed_literal_is_still_there() -> None:
    """The lists shrink with the pages: a literal no page types any more is dropped."""
    for page in {**ALLOWED, **MEASURED_ONCE}:
        typed = _figures(_prose((ROOT / page).read_text()))
        listed = {**ALLOWED.get(page, {}), **MEASURED_ONCE.get(page, {})}
        stale = [literal for literal in listed if literal not in typed]
        assert stale == [], f"{page}: {stale} no longer typed; drop them from the lists"


def test_a_figure_measured_once_is_dated_where_it_is_typed() -> None:
    for page, dates in MEASURED_ONCE.items():
        for paragraph in re.split(r"\n[ \t]*\n", _prose((ROOT / page).read_text())):
            typed = _figures(paragraph)
            undated = [f for f, date in dates.items() if f in typed and date not in paragraph]
            assert undated == [], f"{page}: {undated} typed without their date in {paragraph!r}"


@pytest.mark.parametrize(
    ("prose", "typed"),
    [
        (
            "at 200 req/s the rest ask for about 48 loads a second",
            ["200 req/s", "48 loads a second"],
        ),
        (
            "19 loads/s, 3,000 gRPC requests/s, 1.3 MB, 250 ms, 2.5x, 27.5% sent",
            ["19 loads/s", "3,000 gRPC requests/s", "1.3 MB", "250 ms", "2.5x", "27.5%"],
        ),
        (
            "RSS grew 2.3 MB in 0.3 s: 1.82× the 3\u20134 s before",
            ["2.3 MB", "0.3 s", "1.82×", "3\u20134 s"],
        ),
        ("G1 ≤ 100 MB/h, p99 < 5 ms, ≥ 1.5×", []),  # bounds
        ("`--rate 50 --duration 30s` and {{ figure r.json seconds ,.0f }} s", []),
        ("```\n35.6 req/s answered\n```", []),  # a command's printed output
        ("TensorFlow 2.21 on 2026-11-27, 2 cores, 1,000 models, #1664, issue 49, HTTP/1.1", []),
        ("96×96×3, 2×cores, (0.5 x + 2), one model and a second one", []),
    ],
)
def test_what_counts_as_a_typed_figure(prose: str, typed: list[str]) -> None:
    assert [figure for _, figure, _ in _typed("x.md", prose)] == typed


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
