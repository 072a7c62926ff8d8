"""`graphserve serve graph|eager|null`: start a TF Serving-compatible server in the foreground.

All run until Ctrl-C or SIGTERM, then stop accepting, finish in-flight requests and exit 0.

They also read `tensorflow_model_server`'s flags (`--port=8500 --model_name=m ...`), so a script
or container command written for TF Serving runs them unchanged: its spellings are extra names of
our options, or, where TF Serving means something else (`--port`, `--rest_api_port`,
`--model_base_path`), options of their own with TF Serving's meaning (serving.flags).
One difference stays on purpose: the servers bind loopback unless `--host` says otherwise.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer

from graphserve.serving.flags import SHARED, ServeFlags, TFServingCommand, usage_error

app = typer.Typer(
    help="Serve a model over the TensorFlow Serving gRPC and REST APIs.", no_args_is_help=True
)


def _serve_command(name: str, grpc_port: int, rest_port: int) -> Callable[[Any], Any]:
    """Register `command(serve: ServeFlags, ...own options)` as `serve NAME`, with the shared
    options (SHARED, and the ports with these defaults) added to its own and handed over as
    one ServeFlags."""
    shared = {
        "host": SHARED["host"],
        "grpc_port": (
            Annotated[
                int | None,
                typer.Option(
                    "--grpc-port",
                    min=0,
                    max=65535,
                    help=f"gRPC port (default {grpc_port}; 0: a free one).",
                    show_default=False,
                ),
            ],
            None,
        ),
        "rest_port": (
            Annotated[
                int | None,
                typer.Option(
                    "--rest-port",
                    min=0,
                    max=65535,
                    help=f"REST port (default {rest_port}; 0: a free one).",
                    show_default=False,
                ),
            ],
            None,
        ),
        "port": (
            Annotated[
                int | None,
                typer.Option(
                    "--port",
                    min=0,
                    max=65535,
                    help="TF Serving's gRPC port flag, with its meaning: 0 serves gRPC only on "
                    "--grpc_socket_path, and REST is off unless --rest_api_port (or --rest-port) "
                    "names a port.",
                    show_default=False,
                ),
            ],
            None,
        ),
        "rest_api_port": (
            Annotated[
                int | None,
                typer.Option(
                    "--rest_api_port",
                    min=0,
                    max=65535,
                    help="TF Serving's REST port flag, with its meaning: 0 is no REST.",
                    show_default=False,
                ),
            ],
            None,
        ),
        **SHARED,
    }
    assert set(shared) <= {f.name for f in fields(ServeFlags)}

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
            serve = ServeFlags(
                **{key: options.pop(key) for key in shared}, default_ports=(grpc_port, rest_port)
            )
            command(serve, **options)

        parameters = own + added
        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        app.command(name, cls=TFServingCommand)(run)
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
    serve: ServeFlags,
    model_base_path: Annotated[
        Path | None,
        typer.Option("--model-base-path", help="BASE/NAME holding numeric versions."),
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option(
            "--model-name",
            "--model_name",
            help="Name clients use in requests (default: the base path's last part; 'default' "
            "with --model_base_path).",
            show_default=False,
        ),
    ] = None,
    tfserving_base_path: Annotated[
        Path | None,
        typer.Option(
            "--model_base_path",
            help="TF Serving's --model-base-path, with its meaning: the model is named "
            "'default' unless --model_name names it.",
            show_default=False,
        ),
    ] = None,
    model_config_file: Annotated[
        Path | None,
        typer.Option(
            "--model-config-file",
            "--model_config_file",
            help="TF Serving model config (text proto): several models, version policies, "
            "labels. Replaces --model-base-path/--model-name.",
        ),
    ] = None,
    config_poll_seconds: Annotated[
        float,
        typer.Option(
            "--model-config-file-poll-wait-seconds",
            "--model_config_file_poll_wait_seconds",
            min=0,
            help="Read --model-config-file again this often while serving: load the models "
            "added, unload the ones removed (0: read once, at start).",
        ),
    ] = 0.0,
    poll_seconds: Annotated[
        float,
        typer.Option(
            "--file-system-poll-wait-seconds",
            "--file_system_poll_wait_seconds",
            min=0,
            help="Look for new and removed versions this often (0: only at start).",
        ),
    ] = 1.0,
    allow_ops: AllowOps = None,
    load_on_demand: Annotated[
        bool,
        typer.Option(
            "--load-on-demand",
            help="Load each model version on its first request, not at start (every version "
            "is known at start; its status says START until then). A version labelled "
            "'pinned' in the config loads at start and stays.",
        ),
    ] = False,
    max_resident_bytes: Annotated[
        str | None,
        typer.Option(
            "--max-resident-bytes",
            help="With --load-on-demand: unload the least recently used versions to keep the "
            "resident ones' measured memory under this (300MB, 2GiB, bytes).",
            show_default=False,
        ),
    ] = None,
    max_resident_models: Annotated[
        int | None,
        typer.Option(
            "--max-resident-models",
            min=1,
            help="With --load-on-demand: at most this many versions resident (least recently "
            "used unloaded first).",
            show_default=False,
        ),
    ] = None,
    idle_unload: Annotated[
        str | None,
        typer.Option(
            "--idle-unload",
            help="With --load-on-demand: unload a version unused for this long (30s, 5m).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve SavedModel versions (the graph runner): new versions are picked up while serving,
    warmed, and only then take traffic; the old ones are unloaded after."""
    if load_on_demand:
        on_demand_environment(serve)  # before anything imports TensorFlow
    from graphserve.clikit import option_bytes, option_seconds
    from graphserve.serving.config import (
        ModelConfig,
        ModelConfigError,
        load_model_config_file,
    )
    from graphserve.serving.options import Residency

    if model_base_path is not None and tfserving_base_path is not None:
        usage_error("give --model-base-path or --model_base_path, not both")
    base_path = model_base_path or tfserving_base_path
    if model_config_file is not None:
        if base_path is not None or model_name is not None:
            usage_error("give --model-config-file or --model-base-path, not both")
        try:
            models = load_model_config_file(model_config_file)
        except ModelConfigError as exc:
            usage_error(str(exc))
    elif base_path is not None:
        default_name = "default" if tfserving_base_path is not None else base_path.name
        models = [ModelConfig(model_name or default_name, base_path)]
    else:
        usage_error("give --model-base-path (and --model-name) or a config file")
    if config_poll_seconds and model_config_file is None:
        serve.warnings.append("--model-config-file-poll-wait-seconds: no config file to read")
    bare = (bare_version_warning(m.name, m.base_path) for m in models)
    serve.warnings.extend(w for w in bare if w is not None)
    residency = Residency(
        max_bytes=None
        if max_resident_bytes is None
        else option_bytes(max_resident_bytes, "--max-resident-bytes"),
        max_models=max_resident_models,
        idle_unload=None
        if idle_unload is None
        else option_seconds(idle_unload, "--idle-unload", minimum=0.1),
    )
    if residency != Residency() and not load_on_demand:
        usage_error(
            f"{residency.describe()}: give --load-on-demand too (an unloaded model is loaded "
            "again on its next request)"
        )
    allowed = list(allow_ops or [])
    if allowed:
        serve.warnings.append(
            f"--allow-op {', '.join(allowed)}: models with these ops are served (they can touch "
            "files, processes or the network)"
        )
    serve.run(
        {
            "models": tuple(models),
            "allow_ops": tuple(allowed),
            "file_system_poll_seconds": poll_seconds,
            "model_config_file": model_config_file,
            "model_config_poll_seconds": config_poll_seconds,
            "on_demand": load_on_demand,
            "residency": residency,
        }
    )


def bare_version_warning(name: str, base_path: Path) -> str | None:
    """What the start line says of a base path that is a SavedModel itself: served as version
    1 here, where TF Serving would serve nothing (a deviation, said as one)."""
    from graphserve.core.versions import bare_savedmodel

    if not bare_savedmodel(base_path):
        return None
    return (
        f"{base_path} is a SavedModel with no version directory: serving it as version 1 of "
        f"{name!r}. TF Serving serves only numeric version directories and would serve nothing "
        f"here (a deviation from TF Serving): for TF Serving, move it to {base_path / '1'}"
    )


def on_demand_environment(serve: ServeFlags) -> None:
    """TensorFlow's oneDNN graph rewrite off, unless TF_ENABLE_ONEDNN_OPTS says otherwise: its
    kernels keep a per-thread cache of primitives that outlives the model (0.45 MB kept per MLP
    loaded and unloaded, measured), so memory would not come back after unloading. TF Serving's
    own builds leave oneDNN out as well. Set before TensorFlow is imported."""
    import os

    if "TF_ENABLE_ONEDNN_OPTS" not in os.environ:
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
        serve.warnings.append(
            "--load-on-demand: TensorFlow's oneDNN rewrite is off (its primitive cache keeps "
            "memory after unloading); TF_ENABLE_ONEDNN_OPTS=1 turns it on"
        )


@_serve_command("eager", grpc_port=9500, rest_port=9501)
def eager(
    serve: ServeFlags,
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
    samples_file: Annotated[
        Path | None,
        typer.Option(
            "--samples-file",
            help="Inputs the model takes, for its load check: .npz or a TF Serving predict "
            "body (.json), as for export.",
        ),
    ] = None,
    input_ranges: Annotated[
        list[str] | None,
        typer.Option(
            "--input-range",
            help="Values generated for an input NAME=LOW:HIGH, repeatable, as for export.",
        ),
    ] = None,
    imports: Annotated[
        list[str] | None,
        typer.Option(
            "--import",
            help="A module of your project to import before loading SOURCE, repeatable, as for "
            "export (a .keras file's custom layers).",
        ),
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
    from graphserve.core.errors import ExportError
    from graphserve.core.inputs import load_ranges
    from graphserve.core.signature import parse_input_spec

    try:
        specs = [parse_input_spec(text) for text in inputs or []]
        ranges = load_ranges(input_ranges or [])
    except ExportError as exc:
        usage_error(str(exc))
    if samples_file is not None and not samples_file.is_file():
        usage_error(f"--samples-file {samples_file} does not exist")
    names = [n.strip() for n in (output_names or "").split(",") if n.strip()]
    if mode not in ("call", "predict", "function"):
        usage_error(f"--mode must be call, predict or function, got {mode!r}")
    if allow_unsafe:
        serve.warnings.append(f"--allow-unsafe: Keras safe mode is off for {source}")
    from graphserve.serving.options import EagerModel

    model = EagerModel(
        model_name,
        source,
        tuple(specs),
        signature_file=signature_file,
        output_names=tuple(names),
        allow_unsafe=allow_unsafe,
        imports=tuple(imports or ()),
        mode=mode,
        samples_file=samples_file,
        input_ranges=ranges,
    )
    serve.run({"eager": (model,)})


@_serve_command("null", grpc_port=7500, rest_port=7501)
def null(
    serve: ServeFlags,
    model_base_path: Annotated[
        Path, typer.Option("--model-base-path", help="BASE/NAME holding numeric versions.")
    ],
    model_name: Annotated[
        str | None, typer.Option("--model-name", help="Name clients use in requests.")
    ] = None,
) -> None:
    """Serve the newest version's signatures with no model work: every answer is zeros, after
    the same decoding, validation and encoding (to calibrate load generators and benchmarks)."""
    from graphserve.serving.config import ModelConfig

    name = model_name or model_base_path.name
    serve.run({"models": (ModelConfig(name, model_base_path),), "null": True})
