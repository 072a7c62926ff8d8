"""`graphserve serve graph|eager|null`: start a TF Serving-compatible server in the foreground.

All run until Ctrl-C or SIGTERM, then stop accepting, finish in-flight requests and exit 0.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from graphserve.console import EXIT_FAILED, EXIT_USAGE, configure_logging, quiet_tensorflow, stderr
from serving.defaults import DEFAULT_GRPC_WORKERS, DEFAULT_MAX_BODY_BYTES, DEFAULT_METRICS_PATH

MAX_AUTO_GRPC_WORKERS = 512  # the most threads batching sizes the gRPC pool to

app = typer.Typer(
    help="Serve a model over the TensorFlow Serving gRPC and REST APIs.", no_args_is_help=True
)

Host = Annotated[
    str, typer.Option("--host", help="Address to bind; loopback unless you mean otherwise.")
]
ModelName = Annotated[str, typer.Option("--model-name", help="Name clients use in requests.")]
Metrics = Annotated[
    bool,
    typer.Option("--metrics", help="Serve Prometheus metrics at " + DEFAULT_METRICS_PATH + "."),
]
MonitoringConfig = Annotated[
    Path | None,
    typer.Option(
        "--monitoring-config-file",
        help="TF Serving monitoring config (prometheus_config { enable: true, path: ... }).",
    ),
]
MaxMessageBytes = Annotated[
    int,
    typer.Option(
        "--max-message-bytes", min=1024, help="Largest gRPC message and REST body accepted."
    ),
]
GrpcWorkers = Annotated[
    int | None,
    typer.Option(
        "--grpc-workers",
        min=1,
        help=f"Threads serving gRPC requests (default {DEFAULT_GRPC_WORKERS}; with batching, "
        "enough to fill max_batch_size for every batch thread and one queued batch).",
        show_default=False,
    ),
]
IntraOp = Annotated[
    int,
    typer.Option(
        "--tensorflow-intra-op-parallelism", min=0, help="Threads inside one op (0: TF's choice)."
    ),
]
InterOp = Annotated[
    int,
    typer.Option(
        "--tensorflow-inter-op-parallelism", min=0, help="Ops run in parallel (0: TF's choice)."
    ),
]
EnableBatching = Annotated[
    bool, typer.Option("--enable-batching", help="Batch concurrent requests (TF Serving's).")
]
BatchingFile = Annotated[
    Path | None,
    typer.Option(
        "--batching-parameters-file",
        help="TF Serving batching parameters (text proto: max_batch_size { value: 32 } ...); "
        "implies --enable-batching.",
    ),
]
LogFormat = Annotated[
    str, typer.Option("--log-format", help="'text' or 'json' (one JSON object per line).")
]


@dataclass
class _Serve:
    """What every serve command shares: where to listen, limits, threads, metrics, logs."""

    host: str
    grpc_port: int
    rest_port: int
    metrics: bool
    monitoring_config_file: Path | None
    max_message_bytes: int
    grpc_workers: int | None
    intra_op: int
    inter_op: int
    log_format: str
    enable_batching: bool = False
    batching_parameters_file: Path | None = None
    batch_rows: int = 0  # rows that can wait or run in batches at once, once batching is set up

    def batching(self) -> Callable[[Any], Any]:
        """Wraps a runner in TF Serving-style batching when asked; the identity otherwise."""
        if not (self.enable_batching or self.batching_parameters_file):
            return lambda runner: runner
        from serving.batching import (
            BatchingConfigError,
            BatchingParameters,
            BatchingRunner,
            load_batching_parameters,
        )

        try:
            params = (
                load_batching_parameters(self.batching_parameters_file)
                if self.batching_parameters_file
                else BatchingParameters()
            )
        except BatchingConfigError as exc:
            stderr.print(f"[red]error:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_USAGE) from None
        # Each waiting request holds a gRPC thread, so too few threads would cap every batch.
        self.batch_rows = params.max_batch_size * (params.num_batch_threads + 1)
        return lambda runner: BatchingRunner(runner, params)

    def run(self, load: Any) -> None:
        """Load with `load(registry)` (returns a ModelManager to stop at exit, or None), then
        serve until SIGINT/SIGTERM: stop accepting, drain in-flight requests, exit 0."""
        if self.log_format not in ("text", "json"):
            stderr.print("[red]error:[/] --log-format must be 'text' or 'json'")
            raise typer.Exit(EXIT_USAGE)
        metrics_path = self._metrics_path()
        configure_logging(self.log_format)
        quiet_tensorflow()
        import tensorflow as tf

        try:  # before anything runs: TensorFlow fixes its thread pools at the first op
            if self.intra_op:
                tf.config.threading.set_intra_op_parallelism_threads(self.intra_op)
            if self.inter_op:
                tf.config.threading.set_inter_op_parallelism_threads(self.inter_op)
        except RuntimeError as exc:
            stderr.print(f"[red]cannot set TensorFlow's thread pools:[/] {exc}")
            raise typer.Exit(EXIT_FAILED) from None
        from serving.registry import ModelLoadError, ModelRegistry
        from serving.server import ModelServer, ServerOptions

        registry = ModelRegistry()
        try:
            manager = load(registry)
        except ModelLoadError as exc:
            stderr.print(f"[red]cannot load:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
        options = ServerOptions(
            host=self.host,
            grpc_port=self.grpc_port,
            rest_port=self.rest_port,
            grpc_workers=self.workers(),
            max_message_bytes=self.max_message_bytes,
            metrics_path=metrics_path,
        )
        server = ModelServer(registry, options)
        try:
            server.start()
        except (OSError, RuntimeError) as exc:
            stderr.print(f"[red]cannot start the server:[/] {exc}")
            raise typer.Exit(EXIT_FAILED) from None

        def shutdown(signum: int, _frame: object) -> None:
            stderr.print(f"{signal.Signals(signum).name}: draining and stopping")
            if manager is not None:
                manager.stop()
            server.stop()

        signal.signal(signal.SIGINT, shutdown)
        signal.signal(signal.SIGTERM, shutdown)
        served = "; ".join(
            f"{name} v{','.join(str(s.version) for s in registry.available(name))} "
            f"({registry.get(name).runner.kind})"
            for name in registry.names()
            if registry.available(name)
        )
        where = f"gRPC {self.host}:{server.grpc_port}, REST http://{self.host}:{server.rest_port}"
        if metrics_path:
            where += f", metrics http://{self.host}:{server.rest_port}{metrics_path}"
        stderr.print(f"[green]serving[/] {served}: {where} (Ctrl-C stops)")
        server.wait()

    def workers(self) -> int:
        """--grpc-workers, or the default, raised to fill the batches when batching is on."""
        if self.grpc_workers:
            return self.grpc_workers
        return max(DEFAULT_GRPC_WORKERS, min(self.batch_rows, MAX_AUTO_GRPC_WORKERS))

    def _metrics_path(self) -> str | None:
        if self.monitoring_config_file is None:
            return DEFAULT_METRICS_PATH if self.metrics else None
        from serving.metrics import MonitoringConfigError, load_monitoring_config

        try:
            return load_monitoring_config(self.monitoring_config_file)
        except MonitoringConfigError as exc:
            stderr.print(f"[red]error:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_USAGE) from None


@app.command("graph")
def graph(
    model_base_path: Annotated[
        Path | None,
        typer.Option("--model-base-path", help="BASE/NAME holding numeric versions."),
    ] = None,
    model_name: Annotated[
        str | None, typer.Option("--model-name", help="Name clients use in requests.")
    ] = None,
    model_config_file: Annotated[
        Path | None,
        typer.Option(
            "--model-config-file",
            help="TF Serving model config (text proto): several models, version policies, "
            "labels. Replaces --model-base-path/--model-name.",
        ),
    ] = None,
    poll_seconds: Annotated[
        float,
        typer.Option(
            "--file-system-poll-wait-seconds",
            min=0,
            help="Look for new and removed versions this often (0: only at start).",
        ),
    ] = 1.0,
    host: Host = "127.0.0.1",
    grpc_port: Annotated[int, typer.Option("--grpc-port", min=0, max=65535)] = 8500,
    rest_port: Annotated[int, typer.Option("--rest-port", min=0, max=65535)] = 8501,
    metrics: Metrics = False,
    monitoring_config_file: MonitoringConfig = None,
    max_message_bytes: MaxMessageBytes = DEFAULT_MAX_BODY_BYTES,
    grpc_workers: GrpcWorkers = None,
    intra_op: IntraOp = 0,
    inter_op: InterOp = 0,
    log_format: LogFormat = "text",
    enable_batching: EnableBatching = False,
    batching_parameters_file: BatchingFile = None,
) -> None:
    """Serve SavedModel versions (the graph runner): new versions are picked up while serving,
    warmed, and only then take traffic; the old ones are unloaded after."""
    from serving.config import ModelConfig, ModelConfigError, load_model_config_file

    if model_config_file is not None:
        if model_base_path is not None or model_name is not None:
            stderr.print("[red]error:[/] give --model-config-file or --model-base-path, not both")
            raise typer.Exit(EXIT_USAGE)
        try:
            models = load_model_config_file(model_config_file)
        except ModelConfigError as exc:
            stderr.print(f"[red]error:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_USAGE) from None
    elif model_base_path is not None:
        models = [ModelConfig(model_name or model_base_path.name, model_base_path)]
    else:
        stderr.print("[red]error:[/] give --model-base-path (and --model-name) or a config file")
        raise typer.Exit(EXIT_USAGE)

    serve = _Serve(
        host,
        grpc_port,
        rest_port,
        metrics,
        monitoring_config_file,
        max_message_bytes,
        grpc_workers,
        intra_op,
        inter_op,
        log_format,
        enable_batching,
        batching_parameters_file,
    )
    wrap = serve.batching()

    def load(registry: Any) -> Any:
        from serving.manager import ModelManager, load_version

        manager = ModelManager(registry, models, lambda path: wrap(load_version(path))).start()
        manager.poll(poll_seconds)
        return manager

    serve.run(load)


@app.command("eager")
def eager(
    source: Annotated[
        str, typer.Argument(help="package.module:factory, a .keras file, or examples:NAME.")
    ],
    model_name: ModelName,
    inputs: Annotated[
        list[str] | None,
        typer.Option("--input", help="Input spec NAME:DTYPE:SHAPE, as for export."),
    ] = None,
    signature_file: Annotated[
        Path | None, typer.Option("--signature-file", help="Signature file, as for export.")
    ] = None,
    output_names: Annotated[
        str | None, typer.Option("--output-names", help="Output names a,b, as for export.")
    ] = None,
    allow_unsafe: Annotated[
        bool, typer.Option("--allow-unsafe", help="Keras safe mode off, as for export.")
    ] = False,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="How the model runs: call (model(x)), predict (Keras model.predict(x)), or "
            "function (tf.function without input signature: retraces per new shape).",
        ),
    ] = "call",
    host: Host = "127.0.0.1",
    grpc_port: Annotated[int, typer.Option("--grpc-port", min=0, max=65535)] = 9500,
    rest_port: Annotated[int, typer.Option("--rest-port", min=0, max=65535)] = 9501,
    metrics: Metrics = False,
    monitoring_config_file: MonitoringConfig = None,
    max_message_bytes: MaxMessageBytes = DEFAULT_MAX_BODY_BYTES,
    grpc_workers: GrpcWorkers = None,
    intra_op: IntraOp = 0,
    inter_op: InterOp = 0,
    log_format: LogFormat = "text",
    enable_batching: EnableBatching = False,
    batching_parameters_file: BatchingFile = None,
) -> None:
    """Serve SOURCE run eagerly, op by op from Python (the baseline)."""
    from exporter.errors import ExportError
    from exporter.signature import parse_input_spec

    try:
        specs = [parse_input_spec(text) for text in inputs or []]
    except ExportError as exc:
        stderr.print(f"[red]error:[/] {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    names = [n.strip() for n in (output_names or "").split(",") if n.strip()]
    if mode not in ("call", "predict", "function"):
        stderr.print(f"[red]error:[/] --mode must be call, predict or function, got {mode!r}")
        raise typer.Exit(EXIT_USAGE)
    if allow_unsafe:
        stderr.print("[yellow]warning:[/] --allow-unsafe: Keras safe mode is off for this source")

    serve = _Serve(
        host,
        grpc_port,
        rest_port,
        metrics,
        monitoring_config_file,
        max_message_bytes,
        grpc_workers,
        intra_op,
        inter_op,
        log_format,
        enable_batching,
        batching_parameters_file,
    )
    wrap = serve.batching()

    def load(registry: Any) -> None:
        from serving.registry import Servable

        servable = registry.load_eager(
            model_name,
            source,
            specs,
            signature_file=signature_file,
            output_names=names,
            allow_unsafe=allow_unsafe,
            mode=mode,
        )
        registry.add(Servable(servable.name, servable.version, wrap(servable.runner)))

    serve.run(load)


@app.command("null")
def null(
    model_base_path: Annotated[
        Path, typer.Option("--model-base-path", help="BASE/NAME holding numeric versions.")
    ],
    model_name: Annotated[
        str | None, typer.Option("--model-name", help="Name clients use in requests.")
    ] = None,
    host: Host = "127.0.0.1",
    grpc_port: Annotated[int, typer.Option("--grpc-port", min=0, max=65535)] = 7500,
    rest_port: Annotated[int, typer.Option("--rest-port", min=0, max=65535)] = 7501,
    metrics: Metrics = False,
    monitoring_config_file: MonitoringConfig = None,
    max_message_bytes: MaxMessageBytes = DEFAULT_MAX_BODY_BYTES,
    grpc_workers: GrpcWorkers = None,
    intra_op: IntraOp = 0,
    inter_op: InterOp = 0,
    log_format: LogFormat = "text",
    enable_batching: EnableBatching = False,
    batching_parameters_file: BatchingFile = None,
) -> None:
    """Serve the newest version's signatures with no model work: every answer is zeros, after
    the same decoding, validation and encoding (to calibrate load generators and benchmarks)."""
    serve = _Serve(
        host,
        grpc_port,
        rest_port,
        metrics,
        monitoring_config_file,
        max_message_bytes,
        grpc_workers,
        intra_op,
        inter_op,
        log_format,
        enable_batching,
        batching_parameters_file,
    )
    wrap = serve.batching()

    def load(registry: Any) -> None:
        from serving.registry import Servable

        servable = registry.load_null(model_name or model_base_path.name, model_base_path)
        registry.add(Servable(servable.name, servable.version, wrap(servable.runner)))

    serve.run(load)
