"""The project's own tooling, apart from the product: the benchmarks (`python -m tools.bench`),
the fuzzers (`python -m tools.fuzz.http_raw`, ...) and the manual's generators (`tools.docsgen`).
None of it is in the wheel; the product (exporter/ serving/ loadtest/ deploy/ conformance/ and
graphserve/) never imports it."""
