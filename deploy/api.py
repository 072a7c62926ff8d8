"""The deploy step as functions a deployment script can call; `deploy.cli` only renders them.

    plan = plan_serving(TFServingSpec(model_base_path=Path("models")))
    result = deploy_tfserving(plan, ComposeOptions(gpus=1), wait=True, timeout=300)
    write_k8s(plan, K8sOptions(model_pvc="models", hpa=True))

Each raises a DeployError (graphserve.core.errors) naming what was wrong and what was expected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from graphserve.core.client import VersionStatus
from graphserve.core.errors import DeployError, DeployUsageError, DockerError, NotAvailableError
from graphserve.core.results import JsonKeys, JsonResult, json_meta
from graphserve.deploy.compose import (
    COMPOSE_FILE,
    PROJECT_KEY,
    SERVICE,
    ComposeOptions,
    write_compose_project,
)
from graphserve.deploy.k8s import K8sOptions, write_manifests
from graphserve.deploy.plan import ServingPlan

if TYPE_CHECKING:
    from graphserve.core.tls import ClientTls

__all__ = ["ComposeResult", "K8sResult", "compose_down", "deploy_tfserving", "write_k8s"]

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


@dataclass
class ComposeResult(JsonResult):
    """What deploy tfserving did; its JSON (--output json) has the plan's keys in line."""

    target: ClassVar[str] = "compose"
    json_keys: ClassVar[JsonKeys] = (
        "target",
        ("project_name", "options.project_name"),
        ("project_dir", "options.project_dir"),
        "files",
        ("gpus", "options.gpus"),
        ("network", "options.network"),
        "compose",
        ("grpc", "grpc_url"),
        ("rest", "rest_url"),
        "plan",
        "dry_run",
        "started",
        ("status", "statuses"),
    )

    plan: ServingPlan = field(metadata=json_meta(flatten=True))
    options: ComposeOptions = field(metadata=json_meta(skip=True))
    files: list[Path]
    dry_run: bool
    compose: str = ""  # which Compose ran it, e.g. "Compose v1 (docker-compose 1.29.2)"
    started: bool = False
    statuses: dict[str, list[VersionStatus]] = field(default_factory=dict)

    @property
    def grpc_address(self) -> str:
        """Where this machine reaches the gRPC port (loopback when published on every address)."""
        host = self.options.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{self.options.grpc_port}"

    @property
    def grpc_url(self) -> str:
        """`grpc_address`, as `grpcs://HOST:PORT` when the deployment serves gRPC over TLS."""
        return f"grpcs://{self.grpc_address}" if self.plan.tls else self.grpc_address

    @property
    def rest_address(self) -> str:
        """Where this machine reaches the REST port, as HOST:PORT."""
        return self.grpc_address.rpartition(":")[0] + f":{self.options.rest_port}"

    @property
    def rest_url(self) -> str:
        """`rest_address` as a URL: `http://HOST:PORT`, with an SSL config too (TF Serving's REST
        has no TLS: tensorflow/serving#1503)."""
        return f"http://{self.rest_address}"


@dataclass
class K8sResult(JsonResult):
    """What deploy k8s wrote; its JSON (--output json) has the plan's keys in line."""

    target: ClassVar[str] = "kubernetes"
    json_keys: ClassVar[JsonKeys] = (
        "target",
        ("namespace", "options.namespace"),
        ("name", "options.name"),
        ("out_dir", "options.out_dir"),
        "files",
        ("apply", "apply_command"),
        "plan",
    )

    plan: ServingPlan = field(metadata=json_meta(flatten=True))
    options: K8sOptions = field(metadata=json_meta(skip=True))
    files: list[Path]

    @property
    def apply_command(self) -> str:
        """The command that applies the manifests: `kubectl apply -f OUT`."""
        return f"kubectl apply -f {self.options.out_dir}"


def deploy_tfserving(
    plan: ServingPlan,
    options: ComposeOptions,
    *,
    dry_run: bool = False,
    wait: bool = True,
    timeout: float = 300.0,
    progress: Progress = _quiet,
    tls: ClientTls | None = None,
) -> ComposeResult:
    """Write the compose project; unless `dry_run`, `up -d` it (pulling the image first when
    this machine lacks it) and (with `wait`) block until every model is AVAILABLE. `progress`
    gets a line per step. With an SSL config in the plan the wait dials TLS with `tls` (the
    system's CAs when None); without one `tls` must be None.

    Raises DeployUsageError for options that cannot work (TLS options for a plaintext
    deployment; no client certificate to wait with when the SSL config asks for one), before
    anything is written; DockerError when docker or compose is missing or fails;
    NotAvailableError (with the containers' last log lines) when a model fails to load, the
    container stops, the TLS handshake fails, or `timeout` seconds pass.
    """
    tls = _wait_tls(plan, tls, waits=wait and not dry_run)
    files = write_compose_project(plan, options)
    result = ComposeResult(plan, options, files, dry_run)
    if dry_run:
        return result
    for path in files:
        progress(f"wrote {path}")

    from graphserve.deploy.docker import Compose, require_compose

    docker, tool = require_compose()
    result.compose = tool.describe()
    progress(f"using {result.compose} with Docker Engine {docker.server_version}")
    if not docker.has_image(plan.image):
        progress(f"docker pull {plan.image} (not on this machine yet)")
        docker.pull(plan.image)
    compose = Compose(tool, options.project_dir / COMPOSE_FILE, options.project_name)
    progress(f"{tool.program} -p {options.project_name} up -d ({plan.image})")
    compose.up()
    result.started = True
    if not wait:
        return result

    from graphserve.deploy.wait import wait_until_available

    def still_running() -> None:
        container = docker.project_states(options.project_name).get(SERVICE)
        if container is None:
            raise NotAvailableError(f"the {SERVICE} container is gone")
        if container.failed:
            raise NotAvailableError(f"the {SERVICE} container {container.describe()}")

    names = [m.name for m in plan.models]
    progress(f"waiting up to {timeout:g}s for {', '.join(names)} on {result.grpc_url}")
    try:
        result.statuses = wait_until_available(
            result.grpc_address, names, timeout=timeout, check=still_running, tls=tls
        )
    except DeployError as exc:
        raise NotAvailableError(
            f"{exc}\n`{tool.program} logs --tail 50`:\n{compose.logs(50)}\n"
            f"(the container is left as it is: inspect it with `docker logs` and "
            f"`docker inspect`, then `graphserve deploy down --project-dir {options.project_dir}`)"
        ) from None
    return result


def _wait_tls(plan: ServingPlan, tls: ClientTls | None, *, waits: bool) -> ClientTls | None:
    """The TLS the wait dials with: `tls` (the system's CAs when None) for a plan with an SSL
    config, None for one without. DeployUsageError for TLS options without an SSL config, and
    for a wait with no client certificate when the SSL config asks every client for one."""
    from graphserve.core.tls import ClientTls

    if not plan.tls:
        if tls is not None:
            raise DeployUsageError(
                "--tls-ca, --tls-cert, --tls-key and --tls-server-name are how the wait dials a "
                "TLS deployment: give --ssl-config-file too, or drop them"
            )
        return None
    tls = tls or ClientTls()
    if waits and plan.client_verify and tls.cert is None:
        raise DeployUsageError(
            f"--ssl-config-file {plan.ssl_config_file} has client_verify: true, so TF Serving "
            "asks every gRPC client for a certificate, the readiness wait's included: give "
            "--tls-cert and --tls-key (a client certificate its custom_ca signed), or --no-wait"
        )
    return tls


def compose_down(project_dir: Path, project_name: str | None = None) -> str:
    """`down` the compose project written in `project_dir`: its containers, network and
    anonymous volumes removed. Returns the project's name.

    Raises DeployError when `project_dir` holds no compose.yaml, DockerError as for deploying,
    and when anything of the project is still there afterwards.
    """
    import yaml

    from graphserve.deploy.docker import Compose, require_compose

    compose_file = Path(project_dir) / COMPOSE_FILE
    if not compose_file.is_file():
        raise DeployError(
            f"no {COMPOSE_FILE} in {project_dir}: nothing was deployed from there "
            "(pass the --project-dir you deployed with)"
        )
    if project_name is None:
        document = yaml.safe_load(compose_file.read_text()) or {}
        named = document.get(PROJECT_KEY) or document.get("name")  # `name:`: older files
        project_name = str(named or Path(project_dir).resolve().name)
    docker, tool = require_compose()
    Compose(tool, compose_file, project_name).down()
    if left := docker.project_leftovers(project_name):
        raise DockerError(f"`{tool.program} down` left {', '.join(left)} of {project_name}")
    return project_name


def write_k8s(plan: ServingPlan, options: K8sOptions) -> K8sResult:
    """Write the Kubernetes manifests; applying them is `kubectl apply -f OUT/`.

    Raises DeployUsageError for options Kubernetes would refuse.
    """
    return K8sResult(plan, options, write_manifests(plan, options))
