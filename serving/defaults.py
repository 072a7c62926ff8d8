"""Server defaults in one TensorFlow-free place, so the CLI can show them without importing TF."""

from __future__ import annotations

import os

__all__ = ["DEFAULT_GRPC_WORKERS", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_METRICS_PATH"]

DEFAULT_METRICS_PATH = "/monitoring/prometheus/metrics"  # TF Serving's
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024  # the largest gRPC message and REST body accepted
DEFAULT_GRPC_WORKERS = max(4, 2 * (os.cpu_count() or 1))
