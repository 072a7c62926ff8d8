"""The options every `graphserve serve` command shares, and TF Serving's spellings of them.

`ServeFlags` holds them (one field per shared option, declared once in `SHARED`), checks them
(ports, gRPC arguments, batching parameters, metrics) and runs the server they describe through
`build_server`. `TFServingCommand` reads TF Serving's boolean form (`--enable_batching=true`) and
names any `tensorflow_model_server` flag we do not take. The commands are in serving.cli.
"""

from __future__ import annotations

import itertools
import logging
import signal
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape
from typer.core import TyperCommand, TyperOption

from graphserve.clikit import stderr
from graphserve.core.defaults import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_GRPC_WORKERS,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_METRICS_PATH,
)
from graphserve.core.errors import EXIT_FAILED, EXIT_USAGE
from graphserve.core.execution import EAGER, describe
from graphserve.core.logs import configure_logging, quiet_tensorflow

if TYPE_CHECKING:
    from graphserve.core.batchingparams import BatchingParameters
    from graphserve.core.tls import ServerTls
    from graphserve.serving.manager import Agreement
    from graphserve.serving.options import ServeConfig
    from graphserve.serving.registry import ModelRegistry
    from graphserve.serving.runner import Runner
    from graphserve.serving.server import ModelServer

log = logging.getLogger("graphserve.serve")

MAX_AUTO_GRPC_WORKERS = 512  # the most threads batching sizes the gRPC pool to
GRPC_FRONT_ENDS = ("auto", "threads", "asyncio")
TFSERVING_REST_TIMEOUT_MS = 30_000  # TF Serving's --rest_api_timeout_in_ms default
# gRPC arguments --max-message-bytes sets; --grpc-channel-arguments may not contradict it.
_MESSAGE_LIMITS = ("grpc.max_receive_message_length", "grpc.max_send_message_length")


# The options every serve command shares, as fields of ServeFlags: (type with its option, default).
# `_serve_command` adds them to each command, so they are declared once.
SHARED: dict[str, tuple[Any, Any]] = {
    "host": (
        Annotated[
            str,
            typer.Option(
                "--host",
                help="Address to bind. Loopback by default, also with TF Serving's flags (it "
                "binds 0.0.0.0): the servers authenticate clients only by mutual TLS "
                "(--ssl-config-file with client_verify); put a gateway in front "
                "before binding 0.0.0.0.",
            ),
        ],
        "127.0.0.1",
    ),
    "grpc_socket_path": (
        Annotated[
            str | None,
            typer.Option(
                "--grpc-socket-path",
                "--grpc_socket_path",
                help="Also serve gRPC on this Unix domain socket (clients dial unix:PATH); who "
                "may connect is up to the file's permissions.",
                show_default=False,
            ),
        ],
        None,
    ),
    "metrics": (
        Annotated[
            bool,
            typer.Option(
                "--metrics", help="Serve Prometheus metrics at " + DEFAULT_METRICS_PATH + "."
            ),
        ],
        False,
    ),
    "monitoring_config_file": (
        Annotated[
            Path | None,
            typer.Option(
                "--monitoring-config-file",
                "--monitoring_config_file",
                help="TF Serving monitoring config "
                "(prometheus_config { enable: true, path: ... }).",
            ),
        ],
        None,
    ),
    "ssl_config_file": (
        Annotated[
            Path | None,
            typer.Option(
                "--ssl-config-file",
                "--ssl_config_file",
                help="TF Serving's SSLConfig text proto (server_key, server_cert and custom_ca "
                "hold PEM text; client_verify). TLS on gRPC, as TF Serving, and the same "
                "certificate on the REST and metrics port (HTTPS; TF Serving's REST has none); "
                "client_verify: mutual TLS on both.",
                show_default=False,
            ),
        ],
        None,
    ),
    "max_message_bytes": (
        Annotated[
            int,
            typer.Option(
                "--max-message-bytes",
                min=1024,
                help="Largest gRPC message and REST body accepted, also once a gzip body is "
                "decompressed (RESOURCE_EXHAUSTED / 413 past it).",
            ),
        ],
        DEFAULT_MAX_BODY_BYTES,
    ),
    "max_json_depth": (
        Annotated[
            int,
            typer.Option(
                "--max-json-depth",
                min=2,
                help="Deepest nesting of arrays and objects a REST body may have (400 past it).",
            ),
        ],
        DEFAULT_MAX_JSON_DEPTH,
    ),
    "rest_idle_timeout": (
        Annotated[
            float,
            typer.Option(
                "--rest-idle-timeout",
                min=0,
                help="Seconds a REST connection may sit idle (keep-alive, or a new one that sends "
                "nothing) before it is closed (0: never).",
            ),
        ],
        DEFAULT_IDLE_TIMEOUT_S,
    ),
    "rest_header_timeout": (
        Annotated[
            float,
            typer.Option(
                "--rest-header-timeout",
                min=0,
                help="Seconds from a REST request's first byte to the end of its headers; past "
                "it 408 and the connection closes (0: no limit).",
            ),
        ],
        DEFAULT_HEADER_TIMEOUT_S,
    ),
    "rest_body_timeout": (
        Annotated[
            float,
            typer.Option(
                "--rest-body-timeout",
                min=0,
                help="Seconds from the end of a REST request's headers to the end of its body; "
                "past it 408 and the connection closes (0: no limit).",
            ),
        ],
        DEFAULT_BODY_TIMEOUT_S,
    ),
    "rest_max_connections": (
        Annotated[
            int,
            typer.Option(
                "--rest-max-connections",
                min=0,
                help="REST connections open at once; one more is answered 503 and closed "
                "(0: no cap).",
            ),
        ],
        DEFAULT_MAX_CONNECTIONS,
    ),
    "max_concurrent_rpcs": (
        Annotated[
            int | None,
            typer.Option(
                "--max-concurrent-rpcs",
                min=1,
                help="gRPC calls running or queued for a thread at once; past it a call gets "
                "RESOURCE_EXHAUSTED at once instead of waiting (default: no limit).",
                show_default=False,
            ),
        ],
        None,
    ),
    "processes": (
        Annotated[
            str,
            typer.Option(
                "--workers",
                help="Worker processes serving as one server, each with its own copy of every "
                "model, sharing the ports (one status, one metrics page, one version at a "
                "time); 'auto': one per core this process may use.",
            ),
        ],
        "1",
    ),
    "max_memory": (
        Annotated[
            str | None,
            typer.Option(
                "--max-memory",
                help="With --workers: refuse to start when the workers would hold more than "
                "this (2GiB, 800MB), predicted from the first worker's memory once it serves: "
                "each worker holds its own copy of every model.",
                show_default=False,
            ),
        ],
        None,
    ),
    "grpc_workers": (
        Annotated[
            int | None,
            typer.Option(
                "--grpc-workers",
                min=1,
                help=f"Threads serving gRPC requests (default {DEFAULT_GRPC_WORKERS}; with "
                "batching, enough to fill max_batch_size for every batch thread and one queued "
                "batch, which REST and the threaded gRPC front end need: a request waiting "
                "there holds a thread).",
                show_default=False,
            ),
        ],
        None,
    ),
    "grpc_front_end": (
        Annotated[
            str,
            typer.Option(
                "--grpc-front-end",
                help="How gRPC requests are served: 'threads', a thread per request as TF "
                "Serving; 'asyncio', one event loop, where a request waiting for its batch "
                "holds no thread (Predict; the other methods run on --grpc-workers threads); "
                "'auto', asyncio with batching on and threads with it off.",
            ),
        ],
        "auto",
    ),
    "rest_workers": (
        Annotated[
            int | None,
            typer.Option(
                "--rest-workers",
                "--rest_api_num_threads",
                min=1,
                help="Threads running REST requests, at most; started as load needs them "
                "(default: as many as --grpc-workers).",
                show_default=False,
            ),
        ],
        None,
    ),
    "intra_op": (
        Annotated[
            int,
            typer.Option(
                "--tensorflow-intra-op-parallelism",
                "--tensorflow_intra_op_parallelism",
                min=0,
                help="Threads inside one op (0: TF's choice).",
            ),
        ],
        0,
    ),
    "inter_op": (
        Annotated[
            int,
            typer.Option(
                "--tensorflow-inter-op-parallelism",
                "--tensorflow_inter_op_parallelism",
                min=0,
                help="Ops run in parallel (0: TF's choice).",
            ),
        ],
        0,
    ),
    "log_format": (
        Annotated[
            str, typer.Option("--log-format", help="'text' or 'json' (one JSON object per line).")
        ],
        "text",
    ),
    "verbose": (
        Annotated[
            bool,
            typer.Option(
                "--verbose",
                help="Log the full traceback of a model's error when a version fails to load "
                "(without it, the error's message alone), and graphserve's debug lines.",
            ),
        ],
        False,
    ),
    "enable_batching": (
        Annotated[
            bool,
            typer.Option(
                "--enable-batching",
                "--enable_batching",
                help="Batch concurrent requests (TF Serving's).",
            ),
        ],
        False,
    ),
    "batching_parameters_file": (
        Annotated[
            Path | None,
            typer.Option(
                "--batching-parameters-file",
                "--batching_parameters_file",
                help="TF Serving batching parameters (text proto: max_batch_size { value: 32 } "
                "...); implies --enable-batching.",
            ),
        ],
        None,
    ),
    "per_model_batching": (
        Annotated[
            bool,
            typer.Option(
                "--enable-per-model-batching-parameters",
                "--enable_per_model_batching_parameters",
                help="Batch each SavedModel version by the batching_params.pbtxt in its "
                "directory, if it has one (TF Serving's flag): its parameters replace the "
                "global ones, all but num_batch_threads and thread_pool_name. A version "
                "without the file is served unbatched, as TF Serving serves it. Needs "
                "batching on; a bad file fails that version's load. The gRPC pool is sized "
                "from the global max_batch_size: give --grpc-workers for larger per-version "
                "batches.",
            ),
        ],
        False,
    ),
    "rest_timeout_ms": (
        Annotated[
            int,
            typer.Option(
                "--rest-timeout-ms",
                "--rest_api_timeout_in_ms",
                min=0,
                help="Deadline of a REST request that sets none with a Grpc-Timeout header "
                "(504 past it; 0: none). TF Serving's default.",
            ),
        ],
        TFSERVING_REST_TIMEOUT_MS,
    ),
    "method_name_check": (
        Annotated[
            bool,
            typer.Option(
                "--enable-signature-method-name-check",
                "--enable_signature_method_name_check",
                help="Refuse Classify and Regress on a signature of another method, as TF "
                "Serving does with this flag (off there and here: TF2 exports name every "
                "signature predict).",
            ),
        ],
        False,
    ),
    "strict_json_numbers": (
        Annotated[
            bool,
            typer.Option(
                "--strict-json-numbers",
                help="Refuse (400) a REST predict body whose finite number is past its float "
                "input's range, which TF Serving (and this server without the option) reads as "
                "+-inf. Not a TF Serving flag: with it, `graphserve conformance` reports those "
                "cases as known deviations.",
            ),
        ],
        False,
    ),
    "grpc_channel_arguments": (
        Annotated[
            str | None,
            typer.Option(
                "--grpc-channel-arguments",
                "--grpc_channel_arguments",
                help="More gRPC server arguments, KEY=VALUE[,KEY=VALUE...] as TF Serving takes "
                "them (grpc.max_connection_age_ms=2000); message sizes come from "
                "--max-message-bytes.",
                show_default=False,
            ),
        ],
        None,
    ),
    "request_log": (
        Annotated[
            str | None,
            typer.Option(
                "--request-log",
                help="Log the one model's requests and answers (TF Serving's PredictionLog, in "
                "TFRecord files PREFIX-<start>-<pid>-<n>.tfrecord, readable by their owner "
                "only): its logging_config's filename_prefix. With --model-config-file, each "
                "model's logging_config in the file says it instead.",
                rich_help_panel="Request log",
                show_default=False,
            ),
        ],
        None,
    ),
    "request_log_rate": (
        Annotated[
            float | None,
            typer.Option(
                "--request-log-rate",
                min=0.0,
                max=1.0,
                help="The share of requests --request-log logs (its sampling_rate) [default: 1].",
                rich_help_panel="Request log",
                show_default=False,
            ),
        ],
        None,
    ),
    "request_log_file_size": (
        Annotated[
            str,
            typer.Option(
                "--request-log-file-size",
                help="A model's log starts a new file past this size (64MiB, 500MB, bytes).",
                rich_help_panel="Request log",
            ),
        ],
        "64MiB",
    ),
    "request_log_max_size": (
        Annotated[
            str,
            typer.Option(
                "--request-log-max-size",
                help="What a model's log files may hold on disk: past it the oldest file is "
                "deleted.",
                rich_help_panel="Request log",
            ),
        ],
        "1GiB",
    ),
}


def _runs(runner: Runner) -> str:
    """The start line's word for how a model runs: "graph", or for the eager server what runs
    its requests ("eager: eager Python, op by op", "eager: the source's own tf.function, a
    graph, not eager Python")."""
    return describe(runner.kind, runner.execution) if runner.kind.startswith(EAGER) else runner.kind


def usage_error(message: str) -> NoReturn:
    stderr.print(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(EXIT_USAGE)


@dataclass
class ServeFlags:
    """What every serve command shares: where to listen, limits, threads, metrics, logs."""

    host: str = "127.0.0.1"
    grpc_port: int | None = None  # None: the command's default, unless --port says otherwise
    rest_port: int | None = None
    default_ports: tuple[int, int] = (0, 0)  # gRPC, REST
    port: int | None = None  # TF Serving's --port
    rest_api_port: int | None = None  # TF Serving's --rest_api_port
    grpc_socket_path: str | None = None
    metrics: bool = False
    monitoring_config_file: Path | None = None
    ssl_config_file: Path | None = None
    max_message_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    rest_idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S
    rest_header_timeout: float = DEFAULT_HEADER_TIMEOUT_S
    rest_body_timeout: float = DEFAULT_BODY_TIMEOUT_S
    rest_max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_concurrent_rpcs: int | None = None
    processes: str = "1"  # --workers
    max_memory: str | None = None  # --max-memory
    grpc_workers: int | None = None
    grpc_front_end: str = "auto"
    rest_workers: int | None = None
    intra_op: int = 0
    inter_op: int = 0
    log_format: str = "text"
    verbose: bool = False
    enable_batching: bool = False
    batching_parameters_file: Path | None = None
    per_model_batching: bool = False
    rest_timeout_ms: int = TFSERVING_REST_TIMEOUT_MS
    method_name_check: bool = False
    strict_json_numbers: bool = False
    grpc_channel_arguments: str | None = None
    request_log: str | None = None
    request_log_rate: float | None = None
    request_log_file_size: str = "64MiB"
    request_log_max_size: str = "1GiB"
    batch_rows: int = 0  # rows that can wait or run in batches at once, once batching is set up
    warnings: list[str] = field(default_factory=list)  # logged once logging is set up

    def batching(self) -> BatchingParameters | None:
        """TF Serving-style batching parameters when asked; None otherwise. Exits with a usage
        error for a bad parameters file, or per-model parameters without batching."""
        if not (self.enable_batching or self.batching_parameters_file):
            if self.per_model_batching:
                usage_error(
                    "--enable-per-model-batching-parameters batches each version by its own "
                    "batching_params.pbtxt: turn batching on too, with --enable-batching "
                    "(and --batching-parameters-file for the thread pool)"
                )
            return None
        from graphserve.core.batchingparams import BatchingParameters, load_batching_parameters
        from graphserve.core.errors import BatchingConfigError

        try:
            params = (
                load_batching_parameters(self.batching_parameters_file)
                if self.batching_parameters_file
                else BatchingParameters()
            )
        except BatchingConfigError as exc:
            usage_error(str(exc))
        # Each waiting request holds a gRPC thread, so too few threads would cap every batch.
        self.batch_rows = params.max_batch_size * (params.num_batch_threads + 1)
        return params

    def grpc_asyncio(self) -> bool | None:
        """ServerOptions.grpc_asyncio from --grpc-front-end: None for `auto` (build_server
        serves asyncio exactly when batching is on). Exits with a usage error for a front end
        that is not one of GRPC_FRONT_ENDS."""
        if self.grpc_front_end not in GRPC_FRONT_ENDS:
            usage_error(
                f"--grpc-front-end must be {', '.join(repr(f) for f in GRPC_FRONT_ENDS[:-1])} "
                f"or {GRPC_FRONT_ENDS[-1]!r}, not {self.grpc_front_end!r}"
            )
        return None if self.grpc_front_end == "auto" else self.grpc_front_end == "asyncio"

    def listen(self) -> tuple[int | None, int | None]:
        """The gRPC and REST TCP ports (None: none), TF Serving's spellings meaning what they
        mean there: `--port=0` serves gRPC only on the Unix socket, and with `--port` REST is
        served only on a port `--rest_api_port` (or `--rest-port`) names; `--rest_api_port=0` is
        no REST. Exits with a usage error on a contradiction."""
        grpc_default = self.default_ports[0]
        rest_default: int | None = self.default_ports[1]
        if self.port is not None:
            if self.grpc_port is not None and self.grpc_port != self.port:
                usage_error("--port and --grpc-port name different gRPC ports: give one")
            grpc_port = self.port or None
            rest_default = None  # REST only on a port it is given
        else:
            grpc_port = grpc_default if self.grpc_port is None else self.grpc_port
        if self.rest_api_port is not None:
            if self.rest_port is not None and self.rest_port != self.rest_api_port:
                usage_error("--rest_api_port and --rest-port name different REST ports: give one")
            rest_port = self.rest_api_port or None
        else:
            rest_port = rest_default if self.rest_port is None else self.rest_port
        if grpc_port is None and not self.grpc_socket_path:
            usage_error(
                "--port=0 serves no gRPC port: give --grpc_socket_path too, as TF Serving asks"
            )
        if grpc_port and grpc_port == rest_port:
            usage_error(f"gRPC and REST cannot share port {grpc_port}")
        return grpc_port, rest_port

    def grpc_arguments(self) -> tuple[tuple[str, int | str], ...]:
        """--grpc-channel-arguments as gRPC server options: whole numbers as ints, the rest as
        strings, as TF Serving passes them."""
        parsed: list[tuple[str, int | str]] = []
        for item in (self.grpc_channel_arguments or "").split(","):
            key, equals, value = (part.strip() for part in item.partition("="))
            if not (key or equals or value):
                continue
            if not key or not equals:
                usage_error(f"--grpc-channel-arguments: {item.strip()!r} is not KEY=VALUE")
            if key in _MESSAGE_LIMITS:
                usage_error(f"--grpc-channel-arguments: set {key} with --max-message-bytes")
            number = value.removeprefix("-").isdigit()
            parsed.append((key, int(value) if number else value))
        return tuple(parsed)

    def request_log_settings(self, what: dict[str, Any]) -> dict[str, Any]:
        """`what` with the request log's limits, and with --request-log written into its one
        model's logging_config. Exits with a usage error for a flag that cannot apply."""
        from google.protobuf import text_format
        from tensorflow_serving.config import logging_config_pb2

        from graphserve.clikit import option_bytes
        from graphserve.serving.options import LogLimits

        try:
            limits = LogLimits(
                file_bytes=option_bytes(self.request_log_file_size, "--request-log-file-size"),
                total_bytes=option_bytes(self.request_log_max_size, "--request-log-max-size"),
            )
        except ValueError as exc:
            usage_error(f"--request-log-file-size, --request-log-max-size: {exc}")
        what = {**what, "request_log_limits": limits}
        if self.request_log is None:
            if self.request_log_rate is not None:
                usage_error("--request-log-rate: give --request-log PREFIX too")
            return what
        if what.get("model_config_file") is not None:
            usage_error(
                "--request-log logs the one model of --model-base-path; with "
                "--model-config-file, give each model to log a logging_config in the file"
            )
        key = "eager" if "eager" in what else "models"
        (model,) = what[key]
        config = logging_config_pb2.LoggingConfig()
        config.log_collector_config.filename_prefix = self.request_log
        rate = 1.0 if self.request_log_rate is None else self.request_log_rate
        config.sampling_config.sampling_rate = rate
        text = text_format.MessageToString(config, as_one_line=True)
        return {**what, key: (replace(model, logging=text),)}

    def run(self, what: dict[str, Any]) -> None:
        """Build the server for `what` (ServeConfig's model fields) with the shared options and
        serve until SIGINT/SIGTERM: stop accepting, drain in-flight requests, exit 0. With
        --workers N, N worker processes serve it as one (serving.workers)."""
        from graphserve.serving.workers import worker_count

        try:
            processes = worker_count(self.processes)
        except ValueError as exc:
            usage_error(str(exc))
        if self.max_memory is not None and processes == 1:
            self.warnings.append("--max-memory bounds the workers of --workers N: ignored")
        config = self.serve_config(what)
        if processes > 1:
            self._supervise(config, processes)
            return
        server = start_server(config)
        served, where = served_line(server.registry), server.describe()
        stderr.print(f"[green]serving[/] {served}: {where}{self._metrics_at(server.rest_port)}"
                     " (Ctrl-C stops)")  # fmt: skip
        server.wait()

    def serve_config(self, what: dict[str, Any]) -> ServeConfig:
        """The ServeConfig of `what` and these flags; logging set up, the warnings logged.
        Exits with a usage error for flags that cannot work together."""
        if self.log_format not in ("text", "json"):
            usage_error("--log-format must be 'text' or 'json'")
        grpc_port, rest_port = self.listen()
        grpc_arguments = self.grpc_arguments()
        metrics_path = self._metrics_path()
        tls = self._tls()
        batching = self.batching()
        grpc_asyncio = self.grpc_asyncio()
        what = self.request_log_settings(what)
        if metrics_path and rest_port is None:
            self.warnings.append("metrics are served on the REST port, and REST is off")
        if self.per_model_batching and "eager" in what:
            self.warnings.append(
                "--enable-per-model-batching-parameters: an eager model has no version "
                "directory to hold batching_params.pbtxt; it is batched with the global parameters"
            )
        configure_logging(self.log_format)
        if self.verbose:  # graphserve's own: TensorFlow's and the libraries' stay at INFO
            logging.getLogger("graphserve").setLevel(logging.DEBUG)
        for warning in self.warnings:
            log.warning("%s", warning)
        from graphserve.serving.options import ServeConfig, ServerOptions

        options = ServerOptions(
            host=self.host,
            grpc_port=grpc_port,
            rest_port=rest_port,
            grpc_workers=self.workers(),
            grpc_asyncio=grpc_asyncio,
            rest_workers=self.rest_workers,
            max_message_bytes=self.max_message_bytes,
            max_json_depth=self.max_json_depth,
            rest_idle_timeout=self.rest_idle_timeout or None,
            rest_header_timeout=self.rest_header_timeout or None,
            rest_body_timeout=self.rest_body_timeout or None,
            rest_max_connections=self.rest_max_connections or None,
            max_concurrent_rpcs=self.max_concurrent_rpcs,
            metrics_path=metrics_path,
            grpc_socket_path=self.grpc_socket_path,
            grpc_arguments=grpc_arguments,
            rest_timeout_ms=self.rest_timeout_ms or None,
            method_name_check=self.method_name_check,
            strict_json_numbers=self.strict_json_numbers,
            tls=tls,
        )
        return ServeConfig(
            options=options,
            batching=batching,
            per_model_batching=self.per_model_batching,
            intra_op_threads=self.intra_op,
            inter_op_threads=self.inter_op,
            **what,
        )

    def _metrics_at(self, port: int | None) -> str:
        """The start line's metrics address, where metrics are on."""
        path = self._metrics_path()
        if not path or port is None:
            return ""
        scheme = "https" if self.ssl_config_file is not None else "http"
        return f", metrics {scheme}://{self.host}:{port}{path}"

    def _supervise(self, config: ServeConfig, processes: int) -> None:
        """Serve `config` with `processes` workers under a supervisor until SIGINT/SIGTERM."""
        from graphserve.clikit import option_bytes
        from graphserve.serving.workers import (
            Supervisor,
            TooMuchMemory,
            WorkerSettings,
            WorkersFailed,
        )

        if config.on_demand:
            usage_error(
                "--load-on-demand is not served by --workers yet: give --workers 1 (each "
                "worker would load and budget on its own)"
            )
        arguments = dict(config.options.grpc_arguments)
        if not arguments.get("grpc.so_reuseport", 1):
            usage_error("--workers share the gRPC port (SO_REUSEPORT): drop grpc.so_reuseport=0")
        settings = WorkerSettings(self.log_format, self.verbose)
        limit = None if self.max_memory is None else option_bytes(self.max_memory, "--max-memory")
        try:
            supervisor = Supervisor(config, processes, settings, max_memory=limit)
        except ValueError as exc:
            usage_error(str(exc))
        asked = threading.Event()

        def shutdown(signum: int, _frame: object) -> None:
            stderr.print(f"{signal.Signals(signum).name}: draining and stopping the workers")
            asked.set()
            threading.Thread(target=supervisor.stop, name="stop", daemon=True).start()

        signal.signal(signal.SIGINT, shutdown)
        signal.signal(signal.SIGTERM, shutdown)
        try:
            supervisor.start()
        except OSError as exc:
            stderr.print(f"[red]cannot start the server:[/] {exc}")
            raise typer.Exit(EXIT_FAILED) from None
        except WorkersFailed as exc:
            if asked.is_set():
                return
            stderr.print(f"[red]cannot start the server:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
        except TooMuchMemory as exc:
            usage_error(str(exc))
        served, where = supervisor.describe()
        metrics_at = self._metrics_at(supervisor.rest_port)
        stderr.print(f"[green]serving[/] {served}: {where}{metrics_at} (Ctrl-C stops)")
        supervisor.wait()

    def workers(self) -> int:
        """--grpc-workers, or the default, raised to fill the batches when batching is on."""
        if self.grpc_workers:
            return self.grpc_workers
        return max(DEFAULT_GRPC_WORKERS, min(self.batch_rows, MAX_AUTO_GRPC_WORKERS))

    def _tls(self) -> ServerTls | None:
        """--ssl-config-file, read and checked (a usage error naming what is wrong)."""
        if self.ssl_config_file is None:
            return None
        from graphserve.core.tls import ServerTls, TlsConfigError

        try:
            return ServerTls.load(self.ssl_config_file)
        except TlsConfigError as exc:
            usage_error(str(exc))

    def _metrics_path(self) -> str | None:
        if self.monitoring_config_file is None:
            return DEFAULT_METRICS_PATH if self.metrics else None
        from graphserve.serving.metrics import MonitoringConfigError, load_monitoring_config

        try:
            return load_monitoring_config(self.monitoring_config_file)
        except MonitoringConfigError as exc:
            usage_error(str(exc))


class TFServingCommand(TyperCommand):
    """A serve command that also reads TF Serving's boolean form (`--enable_batching=true`,
    `=false`), and names a TF Serving flag (`--some_flag`) that it does not take."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        options = {
            name: param
            for param in self.get_params(ctx)
            if isinstance(param, TyperOption)
            for name in param.opts
        }
        return super().parse_args(ctx, _tfserving_forms(options, args))


def _tfserving_forms(options: dict[str, TyperOption], args: list[str]) -> list[str]:
    """`args` with TF Serving's `--flag=true|false` as click reads flags; exits with a usage
    error naming a `--flag_with_underscores` that is not an option (the TF Serving flags taken
    are the option names with underscores)."""
    out: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            out += [arg, *rest]
            break
        name, equals, value = arg.partition("=")
        option = options.get(name) if arg.startswith("--") else None
        if option is None:
            if arg.startswith("--") and "_" in name:  # click would only say "no such option"
                accepted = " ".join(sorted(n for n in options if "_" in n))
                usage_error(
                    f"unknown flag {name}: not one of the TF Serving flags this server takes, "
                    f"which are {accepted}"
                )
            out.append(arg)
        elif option.is_flag and equals:  # click flags take no value; TF Serving's do
            if value.lower() in ("true", "1"):
                out.append(name)
            elif value.lower() in ("false", "0"):
                # the off form, if any; without one, off is the flag's default
                out += option.secondary_opts[:1]
            else:
                usage_error(f"{name} takes true or false, not {value!r}")
        else:
            out.append(arg)
            if not option.is_flag and not equals:  # its value is the next argument
                out += itertools.islice(rest, option.nargs)
    return out


def start_server(config: ServeConfig, agreement: Agreement | None = None) -> ModelServer:
    """Build `config`'s server, with SIGINT/SIGTERM draining it, and start it. Exits (typer)
    saying why when it cannot load or start."""
    from graphserve.core.errors import ConfigError
    from graphserve.serving.build import build_server
    from graphserve.serving.registry import ModelLoadError

    quiet_tensorflow()
    try:
        server = build_server(config, agreement)
    except RuntimeError as exc:  # TensorFlow's thread pools, set too late
        stderr.print(f"[red]cannot set TensorFlow's thread pools:[/] {exc}")
        raise typer.Exit(EXIT_FAILED) from None
    except ConfigError as exc:  # a budget that cannot hold one model
        usage_error(str(exc))
    except ModelLoadError as exc:
        stderr.print(f"[red]cannot load:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_FAILED) from None
    # Handlers first: a server answers gRPC while it still primes its REST threads, and a
    # SIGTERM in that moment must drain it too, not kill it. A signal during start() is
    # acted on once start() returns.
    started = threading.Event()
    asked = threading.Event()

    def shutdown(signum: int, _frame: object) -> None:
        stderr.print(f"{signal.Signals(signum).name}: draining and stopping")
        asked.set()
        if started.is_set():
            server.stop()

    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGTERM, shutdown)
    try:
        server.start()
    except (OSError, RuntimeError) as exc:
        stderr.print(f"[red]cannot start the server:[/] {exc}")
        raise typer.Exit(EXIT_FAILED) from None
    started.set()
    if asked.is_set():
        server.stop()
    return server


def served_line(registry: ModelRegistry) -> str:
    """The start line's account of what serves: each model's versions and how they run, and
    how many load on their first request."""
    served = "; ".join(
        f"{name} v{','.join(str(s.version) for s in registry.available(name))} "
        f"({_runs(registry.get(name).runner)})"
        for name in registry.names()
        if registry.available(name)
    )
    later = sum(1 for name in registry.names() if not registry.available(name))
    if later:  # --load-on-demand
        models = f"{later} model{'s' if later > 1 else ''}"
        on_demand = f"{models}, each loaded on its first request"
        served = f"{served}; and {on_demand}" if served else on_demand
    return served
