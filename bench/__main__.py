"""`python -m bench`: see bench.cli."""

from bench.cli import app

app(prog_name="python -m bench")
