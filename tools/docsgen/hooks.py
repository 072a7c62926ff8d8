"""MkDocs hooks: the pages made from the code and the repository's own result files, so the
reference cannot drift from what it describes.

- reference/cli.md: every command, option, default and exit code, from the typer app;
- reference/report-schema.md: from docs/report.schema.json, which the tests check the report
  models against;
- benchmarks/{notes,results,peers-results,generator,soak,containers,families,many,tls,
  frontend,traffic,traffic-shapes}.md and the plots beside them: tools/bench/README.md and the
  results `make bench`, `make bench-peers` and friends write, as they are; the notes' links to
  tools/bench/results/ and docs/ point at those pages here;
- on every page, the figures and tables that prose names with `{{ figure ... }}` and
  `{{ include ... }}`, read from the committed result files (tools/docsgen/figures.py): one that
  does not resolve is a warning naming the page, so the strict build fails.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # mkdocs loads this file by path; docsgen is imported from the clone
    sys.path.insert(0, str(ROOT))

log = logging.getLogger(f"mkdocs.plugins.{__name__}")

# tools/bench/NAME -> the site's benchmarks/NAME (README.md is the benchmark notes)
BENCH_PAGES = {
    "README.md": "notes.md",
    "results.md": "results.md",
    "peers.md": "peers-results.md",
    "generator.md": "generator.md",
    "soak.md": "soak.md",
    "containers.md": "containers.md",
    "families.md": "families.md",
    "many.md": "many.md",
    "tls.md": "tls.md",
    "frontend.md": "frontend.md",
    "traffic.md": "traffic.md",
    "traffic-shapes.md": "traffic-shapes.md",
}


def on_files(files: Files, config: Any) -> Files:
    from tools.docsgen.cli import cli_reference
    from tools.docsgen.schema import schema_reference

    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    schema = ROOT / "docs" / "report.schema.json"
    files.append(
        File.generated(config, "reference/report-schema.md", content=schema_reference(schema))
    )
    bench = ROOT / "tools" / "bench"
    for name, page in BENCH_PAGES.items():
        source = bench / name if name == "README.md" else bench / "results" / name
        files.append(File.generated(config, f"benchmarks/{page}", abs_src_path=str(source)))
    for image in sorted((bench / "results").glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{image.name}", abs_src_path=str(image)))
    return files


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    from tools.docsgen.figures import render

    rendered = render(markdown, ROOT)
    # the page as the repository names it: docs/guides/x.md, or tools/bench/README.md for the notes
    base = Path(config["docs_dir"]).parent if config else ROOT
    source = page.file.abs_src_path
    name = os.path.relpath(source, base) if source else f"docs/{page.file.src_uri}"
    for error in rendered.errors:
        log.warning("%s: %s", name, error)
    if page.file.src_uri == f"benchmarks/{BENCH_PAGES['README.md']}":
        return _notes_links(rendered.text)
    return rendered.text


_LINK = re.compile(r"(\]\()([^)\s#]+)")


def _notes_links(markdown: str) -> str:
    """tools/bench/README.md's links, written for the repository (GitHub shows it there), as links
    of the site's benchmarks/notes.md: results/NAME.md to its page, results/*.png beside it, and
    ../docs/PAGE to the manual's page."""

    def site(match: re.Match[str]) -> str:
        target = match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            return match.group(0)
        path = Path(os.path.relpath(ROOT / "tools" / "bench" / target, ROOT))
        if path.parent == Path("tools/bench/results") and path.name in BENCH_PAGES:
            return match.group(1) + BENCH_PAGES[path.name]
        if path.parent == Path("tools/bench/results") and path.suffix == ".png":
            return match.group(1) + path.name
        if path.parts[0] == "docs":
            return match.group(1) + os.path.relpath(path.relative_to("docs"), "benchmarks")
        return match.group(0)

    return _LINK.sub(site, markdown)
