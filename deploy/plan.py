"""What to run, whatever runs it: the models, `tensorflow_model_server`'s flags, the config files.

docker compose (`deploy.compose`) and Kubernetes (`deploy.k8s`) render the same plan, so both
serve the same models with the same flags. Inside the container TF Serving always listens on 8500
(gRPC) and 8501 (REST), the image's defaults; compose publishes them on the ports you choose.
With an SSL config (`--ssl_config_file`, TF Serving's SSLConfig text proto) gRPC is TLS; TF
Serving's REST port has no TLS (tensorflow/serving#1503) and stays plaintext.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from graphserve.core.errors import DeployUsageError, IncompatibleImageError
from graphserve.core.results import JsonKeys, JsonResult, json_meta
from graphserve.deploy.config import (
    BATCHING_CONFIG,
    CONTAINER_CONFIG_DIR,
    CONTAINER_SSL_DIR,
    MODELS_CONFIG,
    MONITORING_CONFIG,
    PROMETHEUS_PATH,
    SSL_CONFIG,
    ModelDir,
    batching_parameters,
    discover_models,
    model_server_config,
    monitoring_config,
    rewrite_model_config,
)
from graphserve.deploy.image import ImageReport, check_image

__all__ = [
    "CONTAINER_GRPC_PORT",
    "CONTAINER_REST_PORT",
    "ServingPlan",
    "TFServingSpec",
    "plan_serving",
]

CONTAINER_GRPC_PORT = 8500
CONTAINER_REST_PORT = 8501


@dataclass(frozen=True)
class TFServingSpec:
    """What to serve and how; everything but where (compose or Kubernetes)."""

    model_base_path: Path
    model_name: str | None = None  # serve BASE/NAME with --model_name/--model_base_path
    model_config_file: Path | None = None  # serve this ModelServerConfig, paths rewritten
    image: str | None = None  # default: graphserve.core.compat.tfserving_image()
    batching_parameters_file: Path | None = None
    monitoring: bool = False
    per_process_gpu_memory_fraction: float | None = None
    config_poll_seconds: int = 60  # how often TF Serving re-reads models.config
    gpus: int | str = "all"  # "all" or a count; only for the GPU/image check here
    strict: bool = False  # refuse an unpinned image or one that may not load an export
    ssl_config_file: Path | None = None  # TF Serving's SSLConfig: TLS on gRPC


@dataclass(frozen=True)
class ServingPlan(JsonResult):
    """What `plan_serving` resolved, ready for compose or Kubernetes to run: the image, the
    model base path (absolute; mounted read-only at /models), the models found,
    `tensorflow_model_server`'s flags, the config files it reads (by file name under /config),
    the image check, whose warnings are `warnings`, and the SSL config (absolute; mounted
    read-only at /ssl/ssl.config) with whether it asks clients for a certificate."""

    json_keys: ClassVar[JsonKeys] = (..., "warnings")

    image: str
    base_path: Path  # absolute; mounted read-only at /models
    models: tuple[ModelDir, ...]
    args: tuple[str, ...]  # tensorflow_model_server flags
    # file name under /config -> content; the JSON lists the names
    config_files: dict[str, str] = field(metadata=json_meta(value=sorted))
    image_report: ImageReport = field(metadata=json_meta(name="tfserving"))
    ssl_config_file: Path | None = None  # absolute; mounted read-only at /ssl/ssl.config
    client_verify: bool = False  # the SSL config asks every gRPC client for a certificate

    @property
    def tls(self) -> bool:
        """TF Serving's gRPC port speaks TLS (its REST port never does)."""
        return self.ssl_config_file is not None

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the image check found: an unpinned tag, a CPU image with GPUs reserved, a version
        the image's TensorFlow may not load or that cannot be checked."""
        return self.image_report.warnings

    def args_with_ports(self, grpc_port: int, rest_port: int) -> tuple[str, ...]:
        """The flags with TF Serving listening on these ports instead of the image's (for a
        container on the host's network, where nothing maps them)."""
        ports = {"--port": grpc_port, "--rest_api_port": rest_port}
        return tuple(
            f"{name}={ports[name]}" if (name := arg.partition("=")[0]) in ports else arg
            for arg in self.args
        )


def _config_flag(name: str, file_name: str) -> str:
    return f"--{name}={CONTAINER_CONFIG_DIR / file_name}"


def plan_serving(spec: TFServingSpec) -> ServingPlan:
    """Resolve `spec` into a plan: models found, config files built, the image checked.

    Raises DeployUsageError for flags that cannot work together or malformed input files (an
    SSL config TF Serving would refuse at start included), NoModelsError when nothing servable
    is found, IncompatibleImageError with `strict` when the image is unpinned or may not load an
    export.
    """
    from graphserve.core.compat import tfserving_image

    if spec.model_name is not None and spec.model_config_file is not None:
        raise DeployUsageError(
            "--model-name and --model-config-file exclude each other: the config file names "
            "its models"
        )
    fraction = spec.per_process_gpu_memory_fraction
    if fraction is not None and not 0.0 < fraction <= 1.0:
        raise DeployUsageError(
            f"--per-process-gpu-memory-fraction {fraction}: expected a fraction in (0, 1]"
        )
    if spec.config_poll_seconds < 0:
        raise DeployUsageError("--config-poll-seconds must be 0 (read once) or more")

    files: dict[str, str] = {}
    args = [f"--port={CONTAINER_GRPC_PORT}", f"--rest_api_port={CONTAINER_REST_PORT}"]
    if spec.model_config_file is not None:
        files[MODELS_CONFIG], models = rewrite_model_config(
            spec.model_config_file, spec.model_base_path
        )
    else:
        models = discover_models(spec.model_base_path, spec.model_name)
    if spec.model_name is not None:
        (model,) = models
        args += [f"--model_name={model.name}", f"--model_base_path={model.container_path}"]
    else:
        files.setdefault(MODELS_CONFIG, model_server_config(models))
        args += [
            _config_flag("model_config_file", MODELS_CONFIG),
            f"--model_config_file_poll_wait_seconds={spec.config_poll_seconds}",
        ]
    if spec.batching_parameters_file is not None:
        files[BATCHING_CONFIG] = batching_parameters(spec.batching_parameters_file)
        args += ["--enable_batching", _config_flag("batching_parameters_file", BATCHING_CONFIG)]
    if spec.monitoring:
        files[MONITORING_CONFIG] = monitoring_config(PROMETHEUS_PATH)
        args.append(_config_flag("monitoring_config_file", MONITORING_CONFIG))
    if fraction is not None:
        args.append(f"--per_process_gpu_memory_fraction={fraction:g}")
    ssl_config, client_verify = None, False
    if spec.ssl_config_file is not None:
        client_verify = _ssl_config(spec.ssl_config_file)
        ssl_config = Path(spec.ssl_config_file).resolve()
        args.append(f"--ssl_config_file={CONTAINER_SSL_DIR / SSL_CONFIG}")

    image = tfserving_image() if spec.image is None else spec.image
    report = check_image(image, models, gpus=spec.gpus)
    if spec.strict and report.problems:
        raise IncompatibleImageError(
            "--strict: not deploying: "
            + "; ".join(report.warnings or ("the image cannot be checked",))
        )
    base = Path(spec.model_base_path).resolve()
    return ServingPlan(
        image, base, tuple(models), tuple(args), files, report, ssl_config, client_verify
    )


def _ssl_config(path: Path) -> bool:
    """Whether the SSL config at `path` asks clients for a certificate (client_verify), once it
    reads as TF Serving reads it (graphserve.core.tls: the fields hold PEM text, the key is the
    certificate's): TF Serving exits at start on one it cannot use; this fails first, naming the
    field. Raises DeployUsageError."""
    from graphserve.core.tls import ServerTls, TlsConfigError

    try:
        return ServerTls.load(Path(path)).client_verify
    except TlsConfigError as exc:
        raise DeployUsageError(str(exc)) from None
