"""The manual as built: `mkdocs build --strict` of the real mkdocs.yml (a broken link or anchor,
or a page left out of the navigation, fails it), and the generated reference pages checked
against what they describe: every command and option of the typer apps, every definition of
docs/report.schema.json, every exit code.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import typer

from graphserve.cli import app
from graphserve.core.errors import EXIT_CODES, EXIT_MISSED, exit_epilog
from tests.test_report_browser import _MEASURE
from tools.docsgen.cli import cli_reference, epilog_exit_codes, walk
from tools.docsgen.markdown import inline, slug

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "docs" / "report.schema.json"


def _commands() -> list[tuple[str, list[str]]]:
    """(command path, its option and argument names) for every command of the graphserve app."""
    found = []
    for node in walk(typer.main.get_command(app), "graphserve"):
        names = []
        for param in node.command.params:
            if param.param_type_name == "argument":
                names.append(param.display_name_raw)
            else:
                names += [*param.opts, *param.secondary_opts]
        found.append((node.path, names))
    return found


class _Sections(HTMLParser):
    """A page cut at its <h2>s, by id (what comes before the first is under ""): each one's
    heading text, its text, and the first cells of its tables' rows."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, list[str]] = {"": []}
        self.headings: dict[str, str] = {}
        self.first_cells: dict[str, list[str]] = {"": []}
        self._current = ""
        self._in: str | None = None  # "h2", or "td" for a row's first cell

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "h2":
            self._current = dict(attrs).get("id") or ""
            self.sections[self._current] = []
            self.headings[self._current] = ""
            self.first_cells[self._current] = []
            self._in = "h2"
        elif tag == "tr":
            self._in = "tr"
        elif tag == "td" and self._in == "tr":
            self.first_cells[self._current].append("")
            self._in = "td"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("h2", "td"):
            self._in = None

    def handle_data(self, data: str) -> None:
        self.sections[self._current].append(data)
        if self._in == "h2":
            self.headings[self._current] += data.replace("¶", "").strip()
        elif self._in == "td":
            self.first_cells[self._current][-1] += data.strip()

    def text(self, section: str) -> str:
        return "".join(self.sections[section])


def _page(site: Path, page: str) -> _Sections:
    parsed = _Sections()
    parsed.feed((site / page / "index.html").read_text())
    return parsed


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    return out


# -- the built site -------------------------------------------------------------------------------


def test_cli_page_has_every_command_and_option(site: Path) -> None:
    page = _page(site, "reference/cli")
    for path, names in _commands():
        anchor = slug(path)
        assert anchor in page.sections, f"no heading for {path}"
        assert page.headings[anchor] == path
        text = page.text(anchor)
        missing = [name for name in names if name not in text]
        assert missing == [], f"{path}: options not on the page: {missing}"


def test_cli_page_lists_every_exit_code(site: Path) -> None:
    page = _page(site, "reference/cli")
    assert set(EXIT_CODES) == {0, 1, 2, 3}
    assert page.first_cells["exit-codes"][:4] == ["0", "1", "2", "3"]
    text = page.text("exit-codes")
    for meaning in EXIT_CODES.values():
        assert " ".join(meaning.split()[:4]) in " ".join(text.split())
    compare = " ".join(page.text("graphserve-loadtest-compare").split())
    assert "--find-max, an arm held none of the loads" in compare


def test_schema_page_has_every_definition(site: Path) -> None:
    schema = json.loads(SCHEMA.read_text())
    page = _page(site, "reference/report-schema")
    by_name = {text: anchor for anchor, text in page.headings.items()}
    assert sorted(set(schema["$defs"]) - set(by_name)) == []
    for name, definition in schema["$defs"].items():
        fields = page.first_cells[by_name[name]]
        assert fields == list(definition.get("properties", {})), name
    assert page.first_cells["top-level"] == list(schema["properties"])


def test_schema_page_links_the_raw_schema(site: Path) -> None:
    html = (site / "reference" / "report-schema" / "index.html").read_text()
    assert 'href="../../report.schema.json"' in html
    assert json.loads((site / "report.schema.json").read_text()) == json.loads(SCHEMA.read_text())


# -- the generator, without building ---------------------------------------------------------------


@pytest.fixture(scope="module")
def reference() -> str:
    return cli_reference()


def test_cli_reference_has_every_command(reference: str) -> None:
    headings = [line for line in reference.splitlines() if line.startswith("## ")]
    for path, _names in _commands():
        assert f"## {path} {{#{slug(path)}}}" in headings
    for path in (
        "python -m tools.bench",
        "python -m tools.bench soak",
        "python -m tools.bench peers",
    ):
        assert f"## {path} {{#{slug(path)}}}" in headings


def _section(reference: str, path: str) -> str:
    start = reference.index(f"## {path} {{#")
    end = reference.find("\n## ", start + 1)
    return reference[start : end if end > 0 else None]


def test_cli_reference_shows_aliases_and_defaults(reference: str) -> None:
    graph = _section(reference, "graphserve serve graph")
    assert "`--model_base_path`" in graph  # TF Serving's spelling, an option of its own
    assert "alias `--model_name`" in graph
    assert "| `127.0.0.1` |" in graph  # --host's default
    compare = _section(reference, "graphserve loadtest compare")
    assert "`--calibrate`" in compare and "`--no-calibrate`" in compare  # a flag's two forms
    assert "| `5s` |" in compare  # --window
    assert "| **required** |" in _section(reference, "graphserve export")  # SOURCE, --name


def test_cli_reference_exit_codes(reference: str) -> None:
    def codes(path: str) -> str:  # the command's exit-code table
        section = _section(reference, path)
        return section[section.index("**Exit codes**") :]

    for path in (
        "graphserve loadtest compare",
        "graphserve tune batching",
        "python -m tools.bench",
    ):
        assert "| `3` |" in codes(path), path
    for path in ("graphserve export", "graphserve serve graph", "python -m tools.bench generator"):
        assert "| `2` |" in codes(path) and "| `3` |" not in codes(path), path


def test_exit_epilog_round_trip() -> None:
    codes = {EXIT_MISSED: "a gate was missed; see --slo."}
    assert epilog_exit_codes(exit_epilog(codes)) == codes


def test_inline_escapes_what_markdown_would_read() -> None:
    assert inline("a|b `x|y` --opt_name <path> [default: 1] {md} *x*") == (
        "a\\|b `x|y` `--opt_name` &lt;path&gt; \\[default: 1\\] \\{md\\} \\*x\\*"
    )


# -- the site in a browser ----------------------------------------------------------------------


class _QuietHandler(SimpleHTTPRequestHandler):
    """The standard library's static file handler, without a log line per request."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served_site(site: Path) -> Iterator[str]:
    """The built site over HTTP on loopback, as `mkdocs serve` or any static host serves it
    (search fetches its index, which a file:// page may not)."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_address[1]}/"
        server.shutdown()


@pytest.mark.browser
def test_every_page_opens_cleanly_in_chromium(site: Path, served_site: str, browser: Any) -> None:
    """Every page of the site at 1280 px, offline but for the site itself: no console error,
    page error or failed request, nothing asked of another host, every image decoded and
    visible, and the page does not scroll sideways (a wide table scrolls in its own box)."""
    pages = sorted(p.parent.relative_to(site).as_posix() for p in site.rglob("index.html"))
    assert len(pages) > 25, pages
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.route(
        "**/*",
        lambda route: (
            route.continue_() if route.request.url.startswith(served_site) else route.abort()
        ),
    )
    problems: list[str] = []
    try:
        for name in pages:
            url = served_site + ("" if name == "." else f"{name}/")
            page = context.new_page()
            page.on("console", lambda m, u=url: problems.append(f"{u}: console {m.text}")
                    if m.type == "error" else None)  # fmt: skip
            page.on("pageerror", lambda e, u=url: problems.append(f"{u}: page error {e}"))
            page.on("requestfailed", lambda r, u=url: problems.append(
                f"{u}: request failed {r.url} {r.failure}"))  # fmt: skip
            response = page.goto(url, wait_until="load")
            assert response is not None and response.ok, url
            measured = page.evaluate(_MEASURE)
            if measured["scrollWidth"] > measured["viewport"]:
                problems.append(f"{url}: scrolls sideways ({measured['scrollWidth']} px)")
            for image in measured["images"]:
                if not (image["decoded"] and image["naturalWidth"] > 0 and image["visible"]):
                    problems.append(f"{url}: image {image['alt']!r} does not show")
            page.close()
    finally:
        context.close()
    assert problems == []


def test_the_search_index_has_every_page(site: Path) -> None:
    index = json.loads((site / "search" / "search_index.json").read_text())
    locations = {doc["location"].split("#")[0] for doc in index["docs"]}
    for page in ("", "guides/export/", "reference/cli/", "reference/api/", "method/"):
        assert page in locations, page


# -- the error tree, drawn twice: in graphserve.core.errors' docstring and on the API page -------


def _drawn_tree(text: str) -> list[str]:
    """The lines of the tree drawn in `text`, from its root to its last branch."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GraphserveError "))
    end = start + 1
    while end < len(lines) and lines[end][:1] in ("├", "│", "└", " ") and lines[end].strip():
        end += 1
    return lines[start:end]


def test_the_error_tree_is_the_class_tree() -> None:
    """Every GraphserveError subclass of graphserve.core.errors is drawn under its real parent,
    and the API page draws the same tree."""
    from graphserve.core import errors

    assert errors.__doc__ is not None
    drawn = _drawn_tree(errors.__doc__)
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in drawn:
        name = line.lstrip("├│└─ ").split()[0]
        depth = (len(line) - len(line.lstrip("├│└─ "))) // 4
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    classes = {
        name: cls
        for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, errors.GraphserveError)
    }
    real = {
        name: cls.__bases__[0].__name__
        for name, cls in classes.items()
        if name != "GraphserveError"
    }
    assert parents == real
    api = (ROOT / "docs" / "reference" / "api.md").read_text()
    assert _drawn_tree(api) == drawn
