"""MkDocs hooks: the pages made from the code and the repository's own result files, so the
reference cannot drift from what it describes.

- reference/cli.md: every command, option, default and exit code, from the typer app;
- reference/report-schema.md: from docs/report.schema.json, which the tests check the report
  models against;
- benchmarks/{notes,results,peers-results,generator,soak,containers,families}.md and the plots
  beside them: bench/README.md and the results `make bench`, `make bench-peers` and friends
  write, as they are.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # mkdocs loads this file by path; docsgen is imported from the clone
    sys.path.insert(0, str(ROOT))

# bench/NAME -> the site's benchmarks/NAME (README.md is the benchmark notes)
BENCH_PAGES = {
    "README.md": "notes.md",
    "results.md": "results.md",
    "peers.md": "peers-results.md",
    "generator.md": "generator.md",
    "soak.md": "soak.md",
    "containers.md": "containers.md",
    "families.md": "families.md",
}


def on_files(files: Files, config: Any) -> Files:
    from docsgen.cli import cli_reference
    from docsgen.schema import schema_reference

    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    schema = ROOT / "docs" / "report.schema.json"
    files.append(
        File.generated(config, "reference/report-schema.md", content=schema_reference(schema))
    )
    bench = ROOT / "bench"
    for name, page in BENCH_PAGES.items():
        source = bench / name if name == "README.md" else bench / "results" / name
        files.append(File.generated(config, f"benchmarks/{page}", abs_src_path=str(source)))
    for image in sorted((bench / "results").glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{image.name}", abs_src_path=str(image)))
    return files
