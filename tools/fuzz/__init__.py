"""The fuzzers: raw HTTP/1.x requests at a real `serve graph` (`python -m tools.fuzz.http_raw`),
clients that give up on their requests under load (`python -m tools.fuzz.cancel`), and the REST
JSON decoder under atheris (`python -m tools.fuzz.rest_json`). `make fuzz` runs all three."""
