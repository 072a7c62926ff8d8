"""Server defaults in one TensorFlow-free place, so the CLI can show them without importing TF."""

from __future__ import annotations

import os

__all__ = [
    "COLD_LOAD_HEADER",
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_GRPC_WORKERS",
    "DEFAULT_HEADER_TIMEOUT_S",
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_JSON_DEPTH",
    "DEFAULT_METRICS_PATH",
]

DEFAULT_METRICS_PATH = "/monitoring/prometheus/metrics"  # TF Serving's
# On an answer that waited for its model to load on demand (REST header, gRPC trailing
# metadata): the seconds it waited. Ours; no TF Serving client looks for it.
COLD_LOAD_HEADER = "x-graphserve-cold-load"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024  # the largest gRPC message and REST body accepted
# How deeply a REST body's arrays and objects may nest: a rank-R tensor in the row format with
# {"b64": ...} leaves needs R + 4, so 100 leaves room for any real tensor and refuses a body
# built to exhaust the parser's stack.
DEFAULT_MAX_JSON_DEPTH = 100
DEFAULT_GRPC_WORKERS = max(4, 2 * (os.cpu_count() or 1))
# The REST server's connection limits (serving.rest_api.RestOptions, the --rest-* flags).
DEFAULT_IDLE_TIMEOUT_S = 30.0  # a keep-alive connection with no request for this long is closed
DEFAULT_HEADER_TIMEOUT_S = 10.0  # a request's first byte to the end of its headers
DEFAULT_BODY_TIMEOUT_S = 60.0  # the end of the headers to the end of the body (64 MiB at 10 Mbit/s)
DEFAULT_MAX_CONNECTIONS = 1024  # connections open at once; one more is answered 503
