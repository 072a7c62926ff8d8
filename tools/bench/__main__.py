"""`python -m tools.bench`: see bench.cli."""

from tools.bench.cli import app

app(prog_name="python -m tools.bench")
