"""From records to the report: `analysis` turns a run's records and scrapes into the typed
report, `render` writes it as markdown, JSON and HTML, `plots` draws its figures."""
