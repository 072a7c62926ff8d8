"""`loadtest many` and `loadtest copies`: one server, many models, requests spread by popularity.
The copies of a SavedModel and their model config (`copies`), the models and their weights
(`popularity`), what a run is asked for (`spec`), the controller (`run`), its locustfile, the
server's counters (`scrapes`), the analysis and the report."""
