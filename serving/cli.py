"""`graphserve serve graph|eager|null`: start a TF Serving-compatible server in the foreground.

All run until Ctrl-C or SIGTERM, then stop accepting, finish in-flight requests and exit 0.
"""

from __future__ import annotations

import functools
import inspect
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from graphserve.console import EXIT_FAILED, EXIT_USAGE, configure_logging, quiet_tensorflow, stderr
from serving.defaults import (
    DEFAULT_GRPC_WORKERS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_METRICS_PATH,
)

log = logging.getLogger("graphserve.serve")

MAX_AUTO_GRPC_WORKERS = 512  # the most threads batching sizes the gRPC pool to

app = typer.Typer(
    help="Serve a model over the TensorFlow Serving gRPC and REST APIs.", no_args_is_help=True
)

# The options every serve command shares, as fields of _Serve: (type with its option, default).
# `_serve_command` adds them to each command, so they are declared once.
_SHARED: dict[str, tuple[Any, Any]] = {
    "host": (
        Annotated[
            str,
            typer.Option(
                "--host",
                help="Address to bind. Loopback by default: the servers have no authentication; "
                "put a gateway in front before binding 0.0.0.0.",
            ),
        ],
        "127.0.0.1",
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
                help="TF Serving monitoring config "
                "(prometheus_config { enable: true, path: ... }).",
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
    "grpc_workers": (
        Annotated[
            int | None,
            typer.Option(
                "--grpc-workers",
                min=1,
                help=f"Threads serving gRPC requests (default {DEFAULT_GRPC_WORKERS}; with "
                "batching, enough to fill max_batch_size for every batch thread and one queued "
                "batch).",
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
    "enable_batching": (
        Annotated[
            bool,
            typer.Option("--enable-batching", help="Batch concurrent requests (TF Serving's)."),
        ],
        False,
    ),
    "batching_parameters_file": (
        Annotated[
            Path | None,
            typer.Option(
                "--batching-parameters-file",
                help="TF Serving batching parameters (text proto: max_batch_size { value: 32 } "
                "...); implies --enable-batching.",
            ),
        ],
        None,
    ),
}


@dataclass
class _Serve:
    """What every serve command shares: where to listen, limits, threads, metrics, logs."""

    host: str = "127.0.0.1"
    grpc_port: int = 0
    rest_port: int = 0
    metrics: bool = False
    monitoring_config_file: Path | None = None
    max_message_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_concurrent_rpcs: int | None = None
    grpc_workers: int | None = None
    intra_op: int = 0
    inter_op: int = 0
    log_format: str = "text"
    enable_batching: bool = False
    batching_parameters_file: Path | None = None
    batch_rows: int = 0  # rows that can wait or run in batches at once, once batching is set up
    warnings: list[str] = field(default_factory=list)  # logged once logging is set up

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
        for warning in self.warnings:
            log.warning("%s", warning)
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
            max_json_depth=self.max_json_depth,
            max_concurrent_rpcs=self.max_concurrent_rpcs,
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


def _serve_command(name: str, grpc_port: int, rest_port: int) -> Callable[[Any], Any]:
    """Register `command(serve: _Serve, ...own options)` as `serve NAME`, with the shared
    options (_SHARED, and the ports with these defaults) added to its own and handed over as
    one _Serve."""
    shared = {
        "host": _SHARED["host"],
        "grpc_port": (Annotated[int, typer.Option("--grpc-port", min=0, max=65535)], grpc_port),
        "rest_port": (Annotated[int, typer.Option("--rest-port", min=0, max=65535)], rest_port),
        **_SHARED,
    }
    assert set(shared) <= {f.name for f in fields(_Serve)}

    def register(command: Callable[..., None]) -> Callable[..., None]:
        own = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in inspect.signature(command, eval_str=True).parameters.values()
            if p.name != "serve"
        ]
        added = [
            inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default)
            for key, (kind, default) in shared.items()
        ]

        @functools.wraps(command)
        def run(**options: Any) -> None:
            serve = _Serve(**{key: options.pop(key) for key in shared})
            command(serve, **options)

        parameters = own + added
        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        app.command(name)(run)
        return command

    return register


AllowOps = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-op",
        help="Serve a model whose graph has this flagged op (ReadFile, PyFunc, ...; see "
        "`graphserve inspect`); repeatable. Without it such models are refused.",
    ),
]


@_serve_command("graph", grpc_port=8500, rest_port=8501)
def graph(
    serve: _Serve,
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
    allow_ops: AllowOps = None,
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
    allowed = list(allow_ops or [])
    if allowed:
        serve.warnings.append(
            f"--allow-op {', '.join(allowed)}: models with these ops are served (they can touch "
            "files, processes or the network)"
        )
    wrap = serve.batching()

    def load(registry: Any) -> Any:
        from serving.manager import ModelManager, load_version

        manager = ModelManager(
            registry, models, lambda path: wrap(load_version(path, allow_ops=allowed))
        ).start()
        manager.poll(poll_seconds)
        return manager

    serve.run(load)


@_serve_command("eager", grpc_port=9500, rest_port=9501)
def eager(
    serve: _Serve,
    source: Annotated[
        str, typer.Argument(help="package.module:factory, a .keras file, or examples:NAME.")
    ],
    model_name: Annotated[str, typer.Option("--model-name", help="Name clients use in requests.")],
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
        bool,
        typer.Option(
            "--allow-unsafe",
            help="Load a .keras file with Keras safe mode off (it can run the file's code).",
        ),
    ] = False,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="How the model runs: call (model(x)), predict (Keras model.predict(x)), or "
            "function (tf.function without input signature: retraces per new shape).",
        ),
    ] = "call",
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
        serve.warnings.append(f"--allow-unsafe: Keras safe mode is off for {source}")
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


@_serve_command("null", grpc_port=7500, rest_port=7501)
def null(
    serve: _Serve,
    model_base_path: Annotated[
        Path, typer.Option("--model-base-path", help="BASE/NAME holding numeric versions.")
    ],
    model_name: Annotated[
        str | None, typer.Option("--model-name", help="Name clients use in requests.")
    ] = None,
) -> None:
    """Serve the newest version's signatures with no model work: every answer is zeros, after
    the same decoding, validation and encoding (to calibrate load generators and benchmarks)."""
    wrap = serve.batching()

    def load(registry: Any) -> None:
        from serving.registry import Servable

        servable = registry.load_null(model_name or model_base_path.name, model_base_path)
        registry.add(Servable(servable.name, servable.version, wrap(servable.runner)))

    serve.run(load)
