"""The manual's generated parts (`mkdocs.yml` runs `tools/docsgen/hooks.py`): the CLI reference from
the typer app, the report schema's page from docs/report.schema.json, and the benchmark results
under tools/bench/ mounted into the site. Not in the wheel."""
