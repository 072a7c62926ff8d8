from graphserve.cli import app

app(prog_name="graphserve")
