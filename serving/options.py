"""What to serve and how: ServeConfig, its ServerOptions and the parts they hold.

Plain data, and light: the supervisor of `serve --workers N` (serving.workers) builds and hands
these to its workers without importing TensorFlow. serving.build, serving.server, serving.ondemand
and serving.requestlog re-export what they take from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from graphserve.core.batchingparams import BatchingParameters
from graphserve.core.defaults import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_GRPC_WORKERS,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_JSON_DEPTH,
)
from graphserve.core.signature import TensorSpec, ValueRange
from graphserve.serving.config import ModelConfig

if TYPE_CHECKING:
    from graphserve.core.tls import ServerTls

__all__ = [
    "DEFAULT_FILE_BYTES",
    "DEFAULT_QUEUE_RECORDS",
    "DEFAULT_TOTAL_BYTES",
    "EagerModel",
    "LogLimits",
    "Residency",
    "ServeConfig",
    "ServerOptions",
    "format_bytes",
]

DEFAULT_FILE_BYTES = 64 << 20  # a new file past this
DEFAULT_TOTAL_BYTES = 1 << 30  # the oldest files of a model deleted past this
DEFAULT_QUEUE_RECORDS = 10_000  # records waiting for the writer; more are dropped


def format_bytes(count: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(count) >= size:
            return f"{count / size:.2f} {unit}"
    return f"{count:.0f} B"


@dataclass(frozen=True)
class Residency:
    """What may stay resident: at most `max_bytes` (measured) and `max_models` versions, each
    unloaded after `idle_unload` s unused; None is no limit."""

    max_bytes: int | None = None
    max_models: int | None = None
    idle_unload: float | None = None

    def describe(self) -> str:
        parts = []
        if self.max_bytes is not None:
            parts.append(f"--max-resident-bytes {format_bytes(self.max_bytes)}")
        if self.max_models is not None:
            parts.append(f"--max-resident-models {self.max_models}")
        if self.idle_unload is not None:
            parts.append(f"--idle-unload {self.idle_unload:g}s")
        return ", ".join(parts) or "no limit"


@dataclass(frozen=True)
class LogLimits:
    """How large the files grow, how much of the disk a model's log may hold, how many records
    may wait for the writer: the server's, for every model (`serve --request-log-*`)."""

    file_bytes: int = DEFAULT_FILE_BYTES
    total_bytes: int = DEFAULT_TOTAL_BYTES
    queue_records: int = DEFAULT_QUEUE_RECORDS

    def __post_init__(self) -> None:
        if self.file_bytes <= 0 or self.total_bytes <= 0 or self.queue_records <= 0:
            raise ValueError(f"request log limits must be positive: {self}")
        if self.total_bytes < self.file_bytes:
            raise ValueError(
                f"the request log's disk cap ({self.total_bytes} bytes) is smaller than one "
                f"file ({self.file_bytes} bytes)"
            )


@dataclass
class ServerOptions:
    """Where to listen and how big requests may be. Port 0 picks a free port; None serves no
    TCP port for that protocol (gRPC then needs `grpc_socket_path`)."""

    host: str = "127.0.0.1"
    grpc_port: int | None = 8500
    rest_port: int | None = 8501
    grpc_workers: int = DEFAULT_GRPC_WORKERS
    # gRPC on one asyncio loop: Predict is a coroutine, and a request waiting for its batch
    # holds no thread (the other methods run on the grpc_workers threads). False: a thread per
    # request, as TF Serving. None: build_server serves asyncio exactly when batching is on; a
    # ModelServer made over a registry directly serves threads.
    grpc_asyncio: bool | None = None
    rest_workers: int | None = None  # at most, started as needed; None: as many as gRPC's
    max_message_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_concurrent_rpcs: int | None = None  # gRPC calls in progress or waiting; None: no limit
    metrics_path: str | None = None  # e.g. /monitoring/prometheus/metrics; None: no metrics
    grpc_socket_path: str | None = None  # also serve gRPC on this Unix domain socket
    # Extra gRPC server arguments, as TF Serving's --grpc_channel_arguments (message limits
    # come from max_message_bytes).
    grpc_arguments: tuple[tuple[str, int | str], ...] = ()
    # TF Serving's --rest_api_timeout_in_ms: the deadline of a REST request that sets none
    # itself; None: no deadline.
    rest_timeout_ms: int | None = None
    # The REST server's connection limits (RestOptions; None: none).
    rest_idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_S
    rest_header_timeout: float | None = DEFAULT_HEADER_TIMEOUT_S
    rest_body_timeout: float | None = DEFAULT_BODY_TIMEOUT_S
    rest_max_connections: int | None = DEFAULT_MAX_CONNECTIONS
    # TF Serving's --enable_signature_method_name_check: Classify and Regress refuse a signature
    # whose method is another (Predict takes any of the three, there as here).
    method_name_check: bool = False
    # --strict-json-numbers: a REST body's finite number past a float input's range is refused
    # (400), where TF Serving reads it as ±inf (and so does this server by default).
    strict_json_numbers: bool = False
    # TF Serving's --ssl_config_file, read: TLS on gRPC (port and socket), and the same
    # certificate on the REST and metrics port. None: plaintext everywhere.
    tls: ServerTls | None = None
    # Share the TCP ports with the other workers of one server (serving.workers): the REST
    # listener sets SO_REUSEPORT, as gRPC's does by default.
    reuse_port: bool = False


@dataclass(frozen=True)
class EagerModel:
    """A Python model SOURCE served eagerly (`graphserve serve eager`)."""

    name: str
    source: str
    inputs: tuple[TensorSpec, ...] | None = None
    signature_file: Path | None = None
    output_names: tuple[str, ...] = ()
    allow_unsafe: bool = False
    imports: tuple[str, ...] = ()  # modules imported before the source (--import)
    mode: str = "call"  # call, predict or function
    version: int = 1
    samples_file: Path | None = None  # the load check's inputs (--samples-file)
    input_ranges: Mapping[str, ValueRange] = field(default_factory=dict)  # --input-range
    logging: str = ""  # TF Serving's LoggingConfig, as text (serving.requestlog)


@dataclass(frozen=True)
class ServeConfig:
    """What to serve and how. `models` are SavedModel base paths (the graph server, or with
    `null` the null server); `eager` are Python sources. Give one kind."""

    models: Sequence[ModelConfig] = ()
    eager: Sequence[EagerModel] = ()
    null: bool = False
    options: ServerOptions = field(default_factory=ServerOptions)
    batching: BatchingParameters | None = None
    # Each version's own batching_params.pbtxt, if it has one (serving.loaders.version_batching)
    per_model_batching: bool = False
    allow_ops: tuple[str, ...] = ()
    file_system_poll_seconds: float = 0.0  # 0: versions are read once, at start
    model_config_file: Path | None = None  # re-read every model_config_poll_seconds (0: never)
    model_config_poll_seconds: float = 0.0
    intra_op_threads: int = 0  # TensorFlow's thread pools (0: its default); process-wide
    inter_op_threads: int = 0
    # Load each version on its first request, unload under `residency` (serving.ondemand)
    on_demand: bool = False
    residency: Residency = field(default_factory=Residency)
    # The request log's file size, disk cap and queue, for every model that logs (each model's
    # own logging_config says where and how often: ModelConfig.logging, EagerModel.logging)
    request_log_limits: LogLimits = field(default_factory=LogLimits)
