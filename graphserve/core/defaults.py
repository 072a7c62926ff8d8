"""Server defaults in one TensorFlow-free place, so the CLI can show them without importing TF."""

from __future__ import annotations

import os

__all__ = [
    "DEFAULT_GRPC_WORKERS",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_JSON_DEPTH",
    "DEFAULT_METRICS_PATH",
]

DEFAULT_METRICS_PATH = "/monitoring/prometheus/metrics"  # TF Serving's
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024  # the largest gRPC message and REST body accepted
# How deeply a REST body's arrays and objects may nest: a rank-R tensor in the row format with
# {"b64": ...} leaves needs R + 4, so 100 leaves room for any real tensor and refuses a body
# built to exhaust the parser's stack.
DEFAULT_MAX_JSON_DEPTH = 100
DEFAULT_GRPC_WORKERS = max(4, 2 * (os.cpu_count() or 1))
