"""TF Serving's config files: which models to serve (ModelServerConfig), monitoring, batching.

Host paths become container paths here. The model base path is mounted read-only at /models and
the generated config files at /config, in docker compose and Kubernetes alike:

    models/mlp/1/saved_model.pb      ->  /models/mlp/1/saved_model.pb
    .graphserve/deploy/config/*      ->  /config/models.config, monitoring.config, batching.config
    --ssl-config-file FILE           ->  /ssl/ssl.config (a Secret in Kubernetes: it holds a key)

`models.config` is TF Serving's own text-proto ModelServerConfig, read and written by
graphserve.core.modelconfig with TF Serving's proto, so what is written is what TF Serving reads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from graphserve.core.defaults import DEFAULT_METRICS_PATH
from graphserve.core.errors import DeployUsageError, NoModelsError
from graphserve.core.results import JsonResult

__all__ = [
    "BATCHING_CONFIG",
    "CONTAINER_CONFIG_DIR",
    "CONTAINER_MODELS_DIR",
    "CONTAINER_SSL_DIR",
    "MODELS_CONFIG",
    "MONITORING_CONFIG",
    "PROMETHEUS_PATH",
    "SSL_CONFIG",
    "ModelDir",
    "batching_parameters",
    "discover_models",
    "model_server_config",
    "monitoring_config",
    "rewrite_model_config",
]

CONTAINER_MODELS_DIR = PurePosixPath("/models")
CONTAINER_CONFIG_DIR = PurePosixPath("/config")
# The SSL config is mounted apart from /config: it holds a private key (a Secret in Kubernetes,
# where /config is a ConfigMap), and a file mounted inside another bind mount would leave its
# mount point behind in the project's config directory.
CONTAINER_SSL_DIR = PurePosixPath("/ssl")
SSL_CONFIG = "ssl.config"
MODELS_CONFIG = "models.config"
MONITORING_CONFIG = "monitoring.config"
BATCHING_CONFIG = "batching.config"
# TF Serving's documented default path, served on the REST port.
PROMETHEUS_PATH = DEFAULT_METRICS_PATH  # where TF Serving serves them, as our servers do


@dataclass(frozen=True)
class ModelDir(JsonResult):
    """One model to serve: BASE/NAME on the host, holding numeric version directories."""

    name: str
    host_path: Path  # absolute
    container_path: str  # under /models
    versions: tuple[int, ...]


def _versions(path: Path) -> tuple[int, ...]:
    from graphserve.core.versions import existing_versions

    return tuple(existing_versions(path))


def _container_path(host_path: Path, base: Path) -> str:
    return str(CONTAINER_MODELS_DIR.joinpath(*host_path.relative_to(base).parts))


def discover_models(base: Path, model_name: str | None = None) -> list[ModelDir]:
    """The models under `base`: every directory that holds numeric versions (hidden ones, such
    as an export's temporaries, are skipped), or only `model_name`. `base` may itself be a model
    directory (BASE/NAME), named `model_name` or its directory name.

    Raises NoModelsError when `base` is not a directory or holds no model (or not `model_name`).
    """
    base = Path(base).resolve()
    if not base.is_dir():
        raise NoModelsError(
            f"model base path {base} is not a directory: expected BASE holding NAME/VERSION "
            "directories (graphserve export --base-path BASE writes them)"
        )
    if versions := _versions(base):
        return [ModelDir(model_name or base.name, base, str(CONTAINER_MODELS_DIR), versions)]
    if model_name is not None:
        model_dir = base / model_name
        if not (versions := _versions(model_dir)):
            raise NoModelsError(
                f"no model {model_name!r} under {base}: expected numeric version directories "
                f"in {model_dir}"
            )
        return [ModelDir(model_name, model_dir, _container_path(model_dir, base), versions)]
    models = [
        ModelDir(path.name, path, _container_path(path, base), versions)
        for path in sorted(base.iterdir())
        if path.is_dir() and not path.name.startswith(".") and (versions := _versions(path))
    ]
    if not models:
        raise NoModelsError(
            f"no model under {base}: expected BASE/NAME/VERSION directories "
            "(graphserve export --base-path BASE writes them)"
        )
    return models


def model_server_config(models: list[ModelDir]) -> str:
    """A text-proto ModelServerConfig serving `models` from their container paths, each with TF
    Serving's default version policy (the newest version)."""
    from graphserve.core.modelconfig import ModelConfig, model_config_text

    return model_config_text(ModelConfig(m.name, Path(m.container_path)) for m in models)


def _host_path(base_path: Path, base: Path) -> Path:
    """Where a config's base_path is on this machine: a container path (/models/...) that is not
    one here maps into `base`."""
    if base_path.is_relative_to(CONTAINER_MODELS_DIR) and not base_path.exists():
        return base.joinpath(*base_path.relative_to(CONTAINER_MODELS_DIR).parts)
    return base_path.resolve()


def rewrite_model_config(config_file: Path, base: Path) -> tuple[str, list[ModelDir]]:
    """`config_file` (a text-proto ModelServerConfig, read by graphserve.core.modelconfig) with
    every base_path rewritten to its container path; version policies, labels and request
    logging are kept.

    Raises DeployUsageError when the file cannot be read as a model config (ModelConfigError's
    reasons: it does not parse, lists no model, names one twice, ...) or a base_path is outside
    `base` (only `base` is mounted) or does not exist; NoModelsError when a model directory
    holds no version.
    """
    from graphserve.core.errors import ModelConfigError
    from graphserve.core.modelconfig import load_model_config_file, model_config_text

    config_file, base = Path(config_file), Path(base).resolve()
    try:
        configs = load_model_config_file(config_file)
    except ModelConfigError as exc:
        raise DeployUsageError(f"--model-config-file: {exc}") from None
    models = []
    for config in configs:
        where = f"--model-config-file {config_file}, model {config.name!r}"
        host = _host_path(config.base_path, base)
        if not host.is_relative_to(base):
            raise DeployUsageError(
                f"{where}: base_path {config.base_path} ({host}) is outside --model-base-path "
                f"{base}, the only directory mounted into the container"
            )
        if not host.is_dir():
            raise DeployUsageError(f"{where}: base_path {config.base_path} ({host}) does not exist")
        if not (versions := _versions(host)):
            raise NoModelsError(f"{where}: {host} holds no numeric version directory")
        models.append(ModelDir(config.name, host, _container_path(host, base), versions))
    rewritten = (
        replace(c, base_path=Path(m.container_path)) for c, m in zip(configs, models, strict=True)
    )
    return model_config_text(rewritten), models


def monitoring_config(path: str = PROMETHEUS_PATH) -> str:
    """A text-proto MonitoringConfig exposing Prometheus metrics at `path` on the REST port.

    Written by hand: `monitoring_config.proto` is not in the tensorflow-serving-api package. Its
    two fields (`bool enable = 1; string path = 2;`) are all there is.
    """
    escaped = path.replace("\\", "\\\\").replace('"', '\\"')
    return f'prometheus_config {{\n  enable: true\n  path: "{escaped}"\n}}\n'


def batching_parameters(path: Path) -> str:
    """The text of a --batching_parameters_file, once it parses as TF Serving's BatchingParameters
    and its values are ones TF Serving accepts (`serving.batching`, the parser the embedded
    server uses). TF Serving crashes at start on a file it cannot use; this fails first, naming
    the line. Raises DeployUsageError.
    """
    from graphserve.core.batchingparams import load_batching_parameters
    from graphserve.core.errors import BatchingConfigError

    try:
        load_batching_parameters(Path(path))
    except BatchingConfigError as exc:
        raise DeployUsageError(f"--batching-parameters-file: {exc}") from None
    return Path(path).read_text()
