"""`graphserve deploy tfserving|k8s|down`: argument parsing and rendering; the work is `deploy.api`.

Exit codes: 0 done; 1 the deployment failed (no model found, docker missing or failing, a model
not AVAILABLE in time, the wait's TLS handshake failing, --strict and an image that may not load
the export); 2 usage error (an SSL config TF Serving would refuse, --tls-* options that cannot
work).
Only typer and the standard library load here: TensorFlow's stubs are imported for waiting.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape

from graphserve.clikit import (
    TlsCa,
    TlsCert,
    TlsKey,
    TlsServerName,
    client_tls,
    progress,
    stderr,
)
from graphserve.core.logs import default_tensorflow_log_level, quiet_tensorflow

__all__ = ["app"]

app = typer.Typer(
    help="Deploy exported models to TensorFlow Serving: docker compose on NVIDIA GPUs, or "
    "Kubernetes manifests.",
    no_args_is_help=True,
)


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


class Network(StrEnum):
    bridge = "bridge"
    host = "host"


ModelBasePath = Annotated[
    Path,
    typer.Option(
        "--model-base-path", help="BASE holding NAME/VERSION directories (mounted at /models)."
    ),
]
ModelName = Annotated[
    str | None,
    typer.Option("--model-name", help="Serve only BASE/NAME, with --model_name/--model_base_path."),
]
ModelConfigFile = Annotated[
    Path | None,
    typer.Option(
        "--model-config-file",
        help="A TF Serving ModelServerConfig (text proto); its base paths must be under BASE "
        "and are rewritten to /models/... Default: one model per directory of BASE.",
    ),
]
Image = Annotated[
    str | None,
    typer.Option(
        "--image", help="TF Serving image [default: $TFSERVING_IMAGE, else the pinned release]."
    ),
]
BatchingFile = Annotated[
    Path | None,
    typer.Option(
        "--batching-parameters-file",
        help="TF Serving BatchingParameters (text proto); turns on --enable_batching.",
    ),
]
Monitoring = Annotated[
    bool,
    typer.Option("--monitoring", help="Prometheus metrics at /monitoring/prometheus/metrics."),
]
GpuFraction = Annotated[
    float | None,
    typer.Option(
        "--per-process-gpu-memory-fraction", help="GPU memory TF Serving may take, in (0, 1]."
    ),
]
ConfigPoll = Annotated[
    int,
    typer.Option(
        "--config-poll-seconds", min=0, help="How often TF Serving re-reads models.config."
    ),
]
Strict = Annotated[
    bool,
    typer.Option(
        "--strict", help="Fail (exit 1) on an unpinned image or one that may not load an export."
    ),
]
SslConfigFile = Annotated[
    Path | None,
    typer.Option(
        "--ssl-config-file",
        help="TF Serving's SSLConfig (text proto: server_key, server_cert, custom_ca hold PEM "
        "text; client_verify), mounted read-only and passed as --ssl_config_file: gRPC over TLS "
        "(TF Serving's REST port has none).",
        show_default=False,
    ),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Write and print the files; run nothing.")]
Output = Annotated[OutputFormat, typer.Option("--output", help="json: only JSON on stdout.")]


def _fail(exc: Exception) -> NoReturn:
    stderr.print(f"[red]error:[/] {escape(str(exc))}")
    raise typer.Exit(getattr(exc, "exit_code", 1))


def _parse_gpus(text: str) -> int | str:
    if text.strip().lower() == "all":
        return "all"
    if text.strip().isdigit():
        return int(text)
    raise typer.BadParameter(
        f"{text!r}: expected 'all' or a count (0: none)", param_hint="'--gpus'"
    )


def _show_files(files: list[Path], *, contents: bool) -> None:
    for path in files:
        if contents:
            typer.echo(f"--- {path}", err=True)
            typer.echo(path.read_text().rstrip("\n"), err=True)
        else:
            progress(f"wrote {path}")


def _render(result: Any, output: OutputFormat, lines: list[str]) -> None:
    if output is OutputFormat.json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        for line in lines:
            typer.echo(line)


@app.callback()
def deploy() -> None:
    """Deploy exported models to TensorFlow Serving."""


@app.command("tfserving")
def tfserving(
    model_base_path: ModelBasePath,
    model_name: ModelName = None,
    model_config_file: ModelConfigFile = None,
    image: Image = None,
    gpus: Annotated[
        str, typer.Option("--gpus", help="GPUs to reserve: 'all' or a count; 0 reserves none.")
    ] = "all",
    batching_parameters_file: BatchingFile = None,
    monitoring: Monitoring = False,
    per_process_gpu_memory_fraction: GpuFraction = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to publish the ports on; loopback by default.")
    ] = "127.0.0.1",
    network: Annotated[
        Network,
        typer.Option(
            "--network",
            help="bridge: publish the ports on --host; host: share the host's network (no "
            "proxy hop; TF Serving listens on --grpc-port/--rest-port on every address).",
        ),
    ] = Network.bridge,
    grpc_port: Annotated[int, typer.Option("--grpc-port", min=1, max=65535)] = 8500,
    rest_port: Annotated[int, typer.Option("--rest-port", min=1, max=65535)] = 8501,
    name: Annotated[str, typer.Option("--name", help="Compose project name.")] = (
        "graphserve-tfserving"
    ),
    project_dir: Annotated[
        Path, typer.Option("--project-dir", help="Where compose.yaml and config/ are written.")
    ] = Path(".graphserve/deploy"),
    config_poll_seconds: ConfigPoll = 60,
    dry_run: DryRun = False,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait until every model is AVAILABLE.")
    ] = True,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds to wait for AVAILABLE.")
    ] = 300.0,
    strict: Strict = False,
    output: Output = OutputFormat.text,
    ssl_config_file: SslConfigFile = None,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    tls_server_name: TlsServerName = None,
) -> None:
    """Serve BASE with TF Serving in docker compose on NVIDIA GPUs, and wait until it is ready.

    Writes PROJECT_DIR/compose.yaml and PROJECT_DIR/config/, then runs
    `docker compose -p NAME -f compose.yaml up -d` (or Compose v1's `docker-compose`) and polls
    GetModelStatus on the gRPC port: over TLS with --ssl-config-file, dialed with the --tls-*
    options (the CA that signed the server's certificate; a client certificate when the SSL
    config has client_verify).
    """
    from graphserve.core.errors import DeployError
    from graphserve.deploy.api import deploy_tfserving
    from graphserve.deploy.compose import ComposeOptions
    from graphserve.deploy.plan import TFServingSpec, plan_serving

    # Waiting imports TensorFlow (its protos and the stubs): without its start-up lines. A dry
    # run imports it only for a SavedModel with no manifest, and then at the quiet level.
    default_tensorflow_log_level()
    if not dry_run:
        quiet_tensorflow()
    gpu_count = _parse_gpus(gpus)
    wait_tls = client_tls(tls_ca, tls_cert, tls_key, tls_server_name)
    spec = TFServingSpec(
        model_base_path=model_base_path,
        model_name=model_name,
        model_config_file=model_config_file,
        image=image,
        batching_parameters_file=batching_parameters_file,
        monitoring=monitoring,
        per_process_gpu_memory_fraction=per_process_gpu_memory_fraction,
        config_poll_seconds=config_poll_seconds,
        gpus=gpu_count,
        strict=strict,
        ssl_config_file=ssl_config_file,
    )
    options = ComposeOptions(
        project_dir, name, host, grpc_port, rest_port, gpu_count, network=network.value
    )
    try:
        options.validate()
        plan = plan_serving(spec)
        for warning in plan.warnings:
            progress(f"warning: {warning}")
        result = deploy_tfserving(
            plan,
            options,
            dry_run=dry_run,
            wait=wait,
            timeout=timeout,
            progress=progress,
            tls=wait_tls,
        )
    except DeployError as exc:
        _fail(exc)
    if dry_run:
        _show_files(result.files, contents=True)
    models = ", ".join(f"{m.name} (versions {list(m.versions)})" for m in plan.models)
    if dry_run:
        state = "dry run: nothing started (run it without --dry-run to start)"
    elif result.statuses:
        state = "AVAILABLE"
    else:
        state = "started (not waited for)"
    _render(
        result,
        output,
        [
            f"TF Serving {plan.image}: {models} — {state}",
            f"gRPC {result.grpc_url}, REST {result.rest_url}"
            + (" (TF Serving's REST has no TLS)" if plan.tls else ""),
            f"stop: graphserve deploy down --project-dir {project_dir}",
        ],
    )


@app.command("down")
def down(
    project_dir: Annotated[
        Path, typer.Option("--project-dir", help="The --project-dir you deployed with.")
    ] = Path(".graphserve/deploy"),
    name: Annotated[
        str | None, typer.Option("--name", help="Compose project name [default: compose.yaml's].")
    ] = None,
) -> None:
    """Stop and remove what `deploy tfserving` started (`docker compose down`)."""
    from graphserve.core.errors import DeployError
    from graphserve.deploy.api import compose_down

    try:
        project = compose_down(project_dir, name)
    except DeployError as exc:
        _fail(exc)
    progress(f"{project}: down, no container, network or volume of it left")


@app.command("k8s")
def k8s(
    model_base_path: ModelBasePath,
    model_name: ModelName = None,
    model_config_file: ModelConfigFile = None,
    image: Image = None,
    replicas: Annotated[int, typer.Option("--replicas", min=1, help="Pods (without --hpa).")] = 2,
    gpus: Annotated[int, typer.Option("--gpus", min=0, help="nvidia.com/gpu per pod.")] = 1,
    hpa: Annotated[bool, typer.Option("--hpa", help="Add a HorizontalPodAutoscaler.")] = False,
    min_replicas: Annotated[int, typer.Option("--min-replicas", min=1)] = 1,
    max_replicas: Annotated[int, typer.Option("--max-replicas", min=1)] = 8,
    target_cpu: Annotated[
        int, typer.Option("--target-cpu", min=1, max=100, help="HPA target CPU, % of request.")
    ] = 70,
    cpu_request: Annotated[str, typer.Option("--cpu-request", help="Pod CPU request.")] = "1",
    memory_request: Annotated[
        str, typer.Option("--memory-request", help="Pod memory request.")
    ] = "2Gi",
    model_pvc: Annotated[
        str | None,
        typer.Option("--model-pvc", help="PersistentVolumeClaim holding BASE's NAME/VERSION."),
    ] = None,
    model_host_path: Annotated[
        Path | None,
        typer.Option(
            "--model-host-path", help="hostPath on every node [default: the model base path]."
        ),
    ] = None,
    namespace: Annotated[str, typer.Option("--namespace")] = "default",
    name: Annotated[str, typer.Option("--name", help="Name of every object.")] = "tfserving",
    out: Annotated[Path, typer.Option("--out", help="Directory for the manifests.")] = Path("k8s"),
    batching_parameters_file: BatchingFile = None,
    monitoring: Monitoring = False,
    per_process_gpu_memory_fraction: GpuFraction = None,
    config_poll_seconds: ConfigPoll = 60,
    loadtest: Annotated[
        bool,
        typer.Option("--loadtest", help="Also write its load test: master Job, workers, plan."),
    ] = False,
    loadtest_image: Annotated[
        str | None, typer.Option(help="Image with graphserve for the load test's pods.")
    ] = None,
    loadtest_workers: Annotated[
        int, typer.Option(min=1, help="Load-test worker pods (one locust process each).")
    ] = 2,
    loadtest_users: Annotated[
        str, typer.Option(help="Closed-loop users per step, e.g. 1,4,16,64.")
    ] = "1,4,16,64",
    loadtest_protocol: Annotated[str, typer.Option(help="grpc or rest.")] = "grpc",
    loadtest_worker_cpu: Annotated[str, typer.Option(help="CPU per worker pod.")] = "1",
    loadtest_payload: Annotated[
        Path | None,
        typer.Option(help="Inputs .npz [default: random, seed 0, from the signature]."),
    ] = None,
    loadtest_report_pvc: Annotated[
        str | None,
        typer.Option(
            help="PersistentVolumeClaim for the report [default: kubectl cp from the pod]."
        ),
    ] = None,
    loadtest_linger: Annotated[
        str, typer.Option(help="How long the master pod keeps the report for kubectl cp.")
    ] = "1h",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Also print the manifests (nothing is applied).")
    ] = False,
    strict: Strict = False,
    output: Output = OutputFormat.text,
    ssl_config_file: SslConfigFile = None,
) -> None:
    """Write Kubernetes manifests for TF Serving replicas on GPU nodes; apply them with
    `kubectl apply -f OUT/`. With --loadtest, also the load test of this deployment: a master
    Job running `graphserve loadtest compare` against the Service, N worker pods, the plan and
    payload in a ConfigMap. With --ssl-config-file, the file in a Secret (secret.yaml: it holds
    a private key, keep it out of version control) mounted read-only, and gRPC over TLS."""
    from graphserve.core.errors import DeployError
    from graphserve.deploy.api import write_k8s
    from graphserve.deploy.k8s import K8sOptions
    from graphserve.deploy.loadtest_k8s import LoadTestOptions
    from graphserve.deploy.plan import TFServingSpec, plan_serving

    spec = TFServingSpec(
        model_base_path=model_base_path,
        model_name=model_name,
        model_config_file=model_config_file,
        image=image,
        batching_parameters_file=batching_parameters_file,
        monitoring=monitoring,
        per_process_gpu_memory_fraction=per_process_gpu_memory_fraction,
        config_poll_seconds=config_poll_seconds,
        gpus=gpus,
        strict=strict,
        ssl_config_file=ssl_config_file,
    )
    options = K8sOptions(
        out_dir=out,
        name=name,
        namespace=namespace,
        replicas=replicas,
        gpus=gpus,
        model_pvc=model_pvc,
        model_host_path=model_host_path,
        hpa=hpa,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        target_cpu=target_cpu,
        cpu_request=cpu_request,
        memory_request=memory_request,
        loadtest=LoadTestOptions(
            image=loadtest_image or "",
            workers=loadtest_workers,
            users=loadtest_users,
            protocol=loadtest_protocol,
            worker_cpu=loadtest_worker_cpu,
            payload=loadtest_payload,
            report_pvc=loadtest_report_pvc,
            linger=loadtest_linger,
        )
        if loadtest
        else None,
    )
    try:
        options.validate()
        plan = plan_serving(spec)
        for warning in plan.warnings:
            progress(f"warning: {warning}")
        if model_pvc is None and model_host_path is None:
            progress(
                f"warning: models from hostPath {plan.base_path}: every node needs them there; "
                "--model-pvc NAME mounts a PersistentVolumeClaim instead"
            )
        result = write_k8s(plan, options)
    except DeployError as exc:
        _fail(exc)
    _show_files(result.files, contents=dry_run)
    _render(result, output, [f"{len(result.files)} manifests in {out}: kubectl apply -f {out}"])
