"""A docker compose project running TF Serving on NVIDIA GPUs, rendered from a ServingPlan.

PROJECT_DIR/
  compose.yaml              one service, `tfserving`: the image run as `tensorflow_model_server`
  config/models.config      mounted read-only at /config (with monitoring.config, batching.config)

With an SSL config (`--ssl-config-file`) the user's file is bind-mounted read-only at
/ssl/ssl.config, where it is (never copied: it holds a private key), and TF Serving is given
`--ssl_config_file`. The healthcheck stays a plaintext GET on the REST port: TF Serving's REST
has no TLS (tensorflow/serving#1503).

The models are bind-mounted read-only at /models, the ports published on loopback unless you ask
otherwise (TF Serving has no authentication), and GPUs reserved through
`deploy.resources.reservations.devices` (needs the NVIDIA Container Toolkit; `gpus=0` reserves none
and runs the CPU build). With `network="host"` the container shares the host's network instead: no
published ports and no proxy hop; TF Serving listens on the chosen ports itself, on every address
of the host. Files are replaced atomically, so a TF Serving polling models.config never reads half
of one.

The file is one that Compose v1 (docker-compose 1.29, Debian 12's) and v2 both run: the project's
name is passed with `-p` and kept under `x-graphserve-project`, not in a top-level `name:`, which
v1 refuses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphserve.core.client import rest_path
from graphserve.core.errors import DeployUsageError
from graphserve.deploy.config import (
    BATCHING_CONFIG,
    CONTAINER_CONFIG_DIR,
    CONTAINER_MODELS_DIR,
    CONTAINER_SSL_DIR,
    MODELS_CONFIG,
    MONITORING_CONFIG,
    SSL_CONFIG,
)
from graphserve.deploy.files import dump_yaml, write_atomic
from graphserve.deploy.plan import CONTAINER_GRPC_PORT, CONTAINER_REST_PORT, ServingPlan

__all__ = [
    "COMPOSE_FILE",
    "CONFIG_DIR",
    "NETWORKS",
    "PROJECT_KEY",
    "SERVICE",
    "ComposeOptions",
    "compose_document",
    "write_compose_project",
]

COMPOSE_FILE = "compose.yaml"
CONFIG_DIR = "config"
SERVICE = "tfserving"
PROJECT_KEY = "x-graphserve-project"  # the project name, for `deploy down` (v1 has no `name:`)
NETWORKS = ("bridge", "host")
_PROJECT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")  # what docker compose accepts for -p


@dataclass(frozen=True)
class ComposeOptions:
    """Where and how docker compose runs a plan: the project's directory and name, the address
    and ports TF Serving's gRPC and REST ports are published on, the GPUs reserved, and the
    network ("bridge", or "host": the host's network, nothing published)."""

    project_dir: Path = Path(".graphserve/deploy")
    project_name: str = "graphserve-tfserving"
    host: str = "127.0.0.1"  # where the ports are published
    grpc_port: int = 8500
    rest_port: int = 8501
    gpus: int | str = "all"  # "all", or how many; 0 reserves none
    network: str = "bridge"  # "bridge": ports published on `host`; "host": the host's network

    @property
    def host_network(self) -> bool:
        """The container runs on the host's network: TF Serving listens on the ports itself."""
        return self.network == "host"

    def validate(self) -> None:
        """Raises DeployUsageError for a project name, ports or GPU count that cannot work."""
        if not _PROJECT_NAME.match(self.project_name):
            raise DeployUsageError(
                f"--name {self.project_name!r}: a compose project name is lowercase letters, "
                "digits, '-' and '_', starting with a letter or digit"
            )
        if self.grpc_port == self.rest_port:
            raise DeployUsageError(f"--grpc-port and --rest-port are both {self.grpc_port}")
        if self.gpus != "all" and not (isinstance(self.gpus, int) and self.gpus >= 0):
            raise DeployUsageError(f"--gpus {self.gpus!r}: expected 'all' or a count >= 0")
        if self.network not in NETWORKS:
            raise DeployUsageError(f"--network {self.network!r}: expected one of {NETWORKS}")
        if self.host_network and self.host != ComposeOptions.host:
            raise DeployUsageError(
                f"--host {self.host} publishes ports on the bridge network; with --network host "
                "nothing is published: TF Serving listens on every address of the host"
            )


def _published(host: str, port: int, target: int) -> str:
    host = f"[{host}]" if ":" in host else host  # IPv6 literal
    return f"{host}:{port}:{target}"


def _escape(value: Any) -> Any:
    """Compose interpolates `$VAR` everywhere; a literal `$` in a path or flag is `$$`."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [_escape(v) for v in value]
    if isinstance(value, dict):
        return {k: _escape(v) for k, v in value.items()}
    return value


def _healthcheck(model_name: str, rest_port: int) -> dict[str, Any]:
    # The image has bash but no curl: an HTTP/1.0 GET through /dev/tcp. Model metadata answers
    # 200 only once a version is loaded and serving (model status answers 200 while LOADING).
    path = rest_path(model_name, "metadata")
    script = (
        f"exec 3<>/dev/tcp/127.0.0.1/{rest_port} "
        f"&& printf 'GET %s HTTP/1.0\\r\\n\\r\\n' '{path}' >&3 "
        "&& head -n 1 <&3 | grep -q ' 200 '"
    )
    return {
        "test": ["CMD", "bash", "-c", script],
        "interval": "5s",
        "timeout": "3s",
        "retries": 3,
        "start_period": "300s",  # loading a large model takes a while; failures do not count
    }


def compose_document(plan: ServingPlan, options: ComposeOptions) -> dict[str, Any]:
    """The compose.yaml content as data. Raises DeployUsageError as ComposeOptions.validate."""
    options.validate()
    first = plan.models[0]
    volumes: list[dict[str, Any]] = [
        {
            "type": "bind",
            "source": str(plan.base_path),
            "target": str(CONTAINER_MODELS_DIR),
            "read_only": True,
        }
    ]
    if plan.config_files:
        volumes.append(
            {
                "type": "bind",
                "source": f"./{CONFIG_DIR}",
                "target": str(CONTAINER_CONFIG_DIR),
                "read_only": True,
            }
        )
    if plan.ssl_config_file is not None:
        volumes.append(
            {
                "type": "bind",
                "source": str(plan.ssl_config_file),
                "target": str(CONTAINER_SSL_DIR / SSL_CONFIG),
                "read_only": True,
            }
        )
    service: dict[str, Any] = {
        "image": plan.image,
        "entrypoint": ["tensorflow_model_server"],  # the image's script would add its own flags
    }
    if options.host_network:
        # TF Serving itself listens on the chosen ports; nothing to publish (v1 refuses both).
        service["command"] = list(plan.args_with_ports(options.grpc_port, options.rest_port))
        service["network_mode"] = "host"
        rest_port = options.rest_port
    else:
        service["command"] = list(plan.args)
        service["ports"] = [
            _published(options.host, options.grpc_port, CONTAINER_GRPC_PORT),
            _published(options.host, options.rest_port, CONTAINER_REST_PORT),
        ]
        rest_port = CONTAINER_REST_PORT
    service["volumes"] = volumes
    if options.gpus != 0:
        device = {"driver": "nvidia", "count": options.gpus, "capabilities": ["gpu"]}
        service["deploy"] = {"resources": {"reservations": {"devices": [device]}}}
    service["healthcheck"] = _healthcheck(first.name, rest_port)
    service["restart"] = "unless-stopped"
    return {PROJECT_KEY: options.project_name, "services": {SERVICE: _escape(service)}}


def _header(options: ComposeOptions) -> str:
    return (
        "# Generated by `graphserve deploy tfserving`: re-run it rather than editing this file.\n"
        f"#   docker compose -p {options.project_name} -f {COMPOSE_FILE} up -d"
        "   (Compose v1: docker-compose ...)\n"
        f"#   graphserve deploy down --project-dir {options.project_dir}\n"
    )


def write_compose_project(plan: ServingPlan, options: ComposeOptions) -> list[Path]:
    """Write compose.yaml and the config files into options.project_dir; returns their paths.

    Config files an earlier run wrote and this plan does not use are removed.
    """
    document = compose_document(plan, options)
    project = options.project_dir
    config_dir = project / CONFIG_DIR
    for stale in (MODELS_CONFIG, MONITORING_CONFIG, BATCHING_CONFIG):
        if stale not in plan.config_files:
            (config_dir / stale).unlink(missing_ok=True)
    written = []
    for name, text in sorted(plan.config_files.items()):
        write_atomic(config_dir / name, text)
        written.append(config_dir / name)
    compose = project / COMPOSE_FILE
    write_atomic(compose, _header(options) + dump_yaml(document))
    return [compose, *written]
