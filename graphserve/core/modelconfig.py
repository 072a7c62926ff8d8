"""Which models to serve: TF Serving's `--model_config_file` (text-proto ModelServerConfig).

The one reader and the one writer of that file, both through TF Serving's own proto
(`tensorflow_serving.config`): a file that TF Serving accepts is accepted here, a typo fails the
same way, naming the line, and what is written is what TF Serving reads. The graph server serves
what it lists (serving.config), `loadtest many` sends traffic to its models, deploy rewrites its
base paths for TF Serving's container, and `loadtest copies`, conformance and the benchmarks
write one for the models they made.

    model_config_list {
      config {
        name: "mlp"
        base_path: "/models/mlp"
        model_platform: "tensorflow"
        model_version_policy { specific { versions: 1 versions: 2 } }
        version_labels { key: "stable" value: 1 }
        version_labels { key: "canary" value: 2 }
      }
    }
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from graphserve.core.errors import ModelConfigError

__all__ = [
    "ModelConfig",
    "ModelConfigError",
    "VersionPolicy",
    "load_model_config_file",
    "model_config_text",
]


@dataclass(frozen=True)
class VersionPolicy:
    """TF Serving's servable version policy: `latest` N (default 1), `all`, or `specific`."""

    kind: str = "latest"  # "latest" | "all" | "specific"
    latest: int = 1
    specific: tuple[int, ...] = ()

    def aspired(self, on_disk: list[int]) -> list[int]:
        """The versions to serve among those on disk (ascending)."""
        if self.kind == "all":
            return list(on_disk)
        if self.kind == "specific":
            return [v for v in on_disk if v in self.specific]
        return on_disk[-self.latest :] if on_disk else []

    def describe(self) -> str:
        if self.kind == "specific":
            return "specific " + ",".join(map(str, self.specific))
        return "all" if self.kind == "all" else f"latest {self.latest}"


@dataclass(frozen=True)
class ModelConfig:
    """One model to serve, as a `config` entry of TF Serving's model config file: its name, the
    base path whose numbered directories are its versions, which of them to serve (the newest
    by default) and its version labels (label -> version)."""

    name: str
    base_path: Path
    policy: VersionPolicy = VersionPolicy()
    labels: dict[str, int] = field(default_factory=dict)
    # TF Serving's request logging (its LoggingConfig as text), kept so that a rewritten file
    # keeps it; the graph server logs no requests.
    logging: str = ""


def load_model_config_file(path: Path) -> list[ModelConfig]:
    """Parse a TF Serving model config file; raises ModelConfigError naming what is wrong."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ModelConfigError(f"cannot read model config file {path}: {exc}") from None
    config = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        # TF Serving's words (protobuf's C++ parser), which scripts and its own test look for.
        raise ModelConfigError(
            f"model config file {path}: Error parsing text-format "
            f"{config.DESCRIPTOR.full_name}: {exc}"
        ) from None
    if config.WhichOneof("config") != "model_config_list":
        raise ModelConfigError(f"model config file {path}: expected a model_config_list")
    models = [_model(path, c) for c in config.model_config_list.config]
    if not models:
        raise ModelConfigError(f"model config file {path} lists no models")
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise ModelConfigError(f"model config file {path} names a model twice: {names}")
    return models


def _model(path: Path, config: model_server_config_pb2.ModelConfig) -> ModelConfig:
    where = f"model config file {path}, model {config.name!r}"
    if not config.name or not config.base_path:
        raise ModelConfigError(f"{where}: every config needs a name and a base_path")
    if config.model_platform not in ("", "tensorflow"):
        raise ModelConfigError(f"{where}: model_platform {config.model_platform!r} is not served")
    base = Path(config.base_path)
    if not base.is_absolute():
        base = path.parent / base  # TF Serving resolves against its cwd; the file's dir is kinder
    policy = _policy(where, config)
    logging = text_format.MessageToString(config.logging_config, as_one_line=True)
    return ModelConfig(config.name, base, policy, dict(config.version_labels), logging)


def _policy(where: str, config: model_server_config_pb2.ModelConfig) -> VersionPolicy:
    if not config.HasField("model_version_policy"):
        return VersionPolicy()
    policy = config.model_version_policy
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return VersionPolicy("all")
    if kind == "specific":
        if not policy.specific.versions:
            raise ModelConfigError(f"{where}: a specific version policy needs versions")
        return VersionPolicy("specific", specific=tuple(sorted(policy.specific.versions)))
    latest = policy.latest.num_versions if kind == "latest" else 1
    return VersionPolicy("latest", latest=max(latest, 1))


def model_config_text(models: Iterable[ModelConfig]) -> str:
    """The text-proto ModelServerConfig serving `models` (platform "tensorflow"; the default
    policy, the newest version, left unwritten), as TF Serving's own proto prints it."""
    config = model_server_config_pb2.ModelServerConfig()
    for model in models:
        entry = config.model_config_list.config.add(
            name=model.name, base_path=str(model.base_path), model_platform="tensorflow"
        )
        policy = entry.model_version_policy
        if model.policy.kind == "all":
            policy.all.SetInParent()
        elif model.policy.kind == "specific":
            policy.specific.versions.extend(model.policy.specific)
        elif model.policy.latest != 1:
            policy.latest.num_versions = model.policy.latest
        entry.version_labels.update(model.labels)
        text_format.Parse(model.logging, entry.logging_config)
    return str(text_format.MessageToString(config))
