"""Docker and Compose as subprocesses: found or explained, run with a timeout; failures DockerError.

Compose comes in two forms that users have: v2, the `docker compose` plugin, and v1, the
`docker-compose` program that Debian 12 and many older hosts package. Both read the same files
(graphserve writes none of what v1 refuses, such as a top-level `name:`), so either runs a
project; v2 is used when both are there. Container states are read from the engine
(`docker ps`, by the labels both versions put on a project's containers), not from `compose ps`,
whose output differs between them.

Every compose call names the project (`-p`) and the file (`-f`), so it works from any directory
and two projects never mix.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from graphserve.core.errors import DockerError

__all__ = [
    "Compose",
    "ComposeTool",
    "ContainerState",
    "Docker",
    "require_compose",
    "require_docker",
]

_INSTALL_DOCKER = (
    "install Docker Engine (Debian and Ubuntu: apt-get install docker.io docker-compose; "
    "or Docker's own docker-ce with docker-compose-plugin)"
)
_INSTALL_COMPOSE = (
    "install Compose: Debian's docker-compose package (v1), or the docker-compose-plugin "
    "package from Docker's repository (v2, `docker compose`)"
)
_START_DAEMON = (
    "start it (`systemctl start docker`, or `dockerd &` as root), or point DOCKER_HOST at one "
    "that runs"
)
_VERSION = re.compile(r"v?(\d+\.\d+\.\d+[\w.+-]*)")


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run(
    command: list[str], timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DockerError(f"`{' '.join(command)}` did not finish: {exc}") from None


def _checked(command: list[str], shown: str, timeout: float, cwd: Path | None = None) -> str:
    """Run `command`; its stdout. Raises DockerError naming it as `shown`, with stderr's tail."""
    result = _run(command, timeout, cwd)
    if result.returncode != 0:
        raise DockerError(
            f"`{shown}` failed (exit {result.returncode}):\n{_tail(result.stderr or result.stdout)}"
        )
    return result.stdout


@dataclass(frozen=True)
class ContainerState:
    """A container as the engine sees it: "running", "restarting", "exited", ...; the last exit
    code; how often its restart policy has brought it back."""

    state: str
    exit_code: int
    restarts: int

    @property
    def failed(self) -> bool:
        """It stopped, or stopped and was restarted: it will not come up by waiting."""
        return self.state not in ("running", "created") or self.restarts > 0

    def describe(self) -> str:
        """E.g. "exited with code 1", "is paused"."""
        if self.restarts:
            # The engine keeps only the last run's exit code, and a running one has none yet.
            how = "" if self.state == "running" else f" with code {self.exit_code}"
            return (
                f"exited{how} and was restarted {self.restarts} time(s) by its restart policy "
                f"(now {self.state})"
            )
        if self.state in ("exited", "dead"):
            return f"exited with code {self.exit_code}"
        return f"is {self.state}"


@dataclass(frozen=True)
class Docker:
    """The docker CLI, with a daemon that answered."""

    executable: str
    server_version: str

    def run(self, *args: str, timeout: float = 120.0) -> str:
        """Run `docker ARGS`; its stdout. Raises DockerError with stderr's tail."""
        return _checked([self.executable, *args], f"docker {' '.join(args)}", timeout)

    def has_image(self, image: str) -> bool:
        return _run([self.executable, "image", "inspect", image], 60.0).returncode == 0

    def pull(self, image: str, timeout: float = 3600.0) -> None:
        """Pull `image`. Raises DockerError saying it is neither here nor to be had."""
        result = _run([self.executable, "pull", image], timeout)
        if result.returncode != 0:
            raise DockerError(
                f"image {image} is not on this machine and could not be pulled: "
                f"{_tail(result.stderr or result.stdout, 5)}\n"
                "(check the name and tag, `docker login` for a private registry, or build or "
                "load the image here first)"
            )

    def project_states(self, project: str) -> dict[str, ContainerState]:
        """Each service of compose `project` and its container's state, found by the labels
        Compose v1 and v2 both set."""
        label = f"label=com.docker.compose.project={project}"
        ids = self.run("ps", "--all", "--quiet", "--filter", label, timeout=60.0).split()
        if not ids:
            return {}
        out = self.run(
            "inspect",
            "--format",
            '{{index .Config.Labels "com.docker.compose.service"}}\t{{.State.Status}}\t'
            "{{.State.ExitCode}}\t{{.RestartCount}}",
            *ids,
            timeout=60.0,
        )
        states = {}
        for line in out.splitlines():
            service, state, code, restarts = [*line.split("\t"), "", "", ""][:4]
            states[service] = ContainerState(state, int(code or 0), int(restarts or 0))
        return states

    def project_leftovers(self, project: str) -> list[str]:
        """Containers, networks and volumes compose `project` still has ("kind name" each)."""
        label = f"label=com.docker.compose.project={project}"
        found = []
        for kind, command in (
            ("container", ["ps", "--all", "--filter", label, "--format", "{{.Names}}"]),
            ("network", ["network", "ls", "--filter", label, "--format", "{{.Name}}"]),
            ("volume", ["volume", "ls", "--filter", label, "--format", "{{.Name}}"]),
        ):
            found += [f"{kind} {name}" for name in self.run(*command).split()]
        return found


def require_docker(timeout: float = 30.0) -> Docker:
    """The docker CLI, once its daemon answers.

    Raises DockerError naming what is missing: docker itself (and the package to install), or
    a daemon that does not answer (and how to start one).
    """
    executable = shutil.which("docker")
    if executable is None:
        raise DockerError(
            f"docker is not on PATH: {_INSTALL_DOCKER}, or use --dry-run to only write the files"
        )
    probe = _run([executable, "version", "--format", "{{.Server.Version}}"], timeout)
    server = probe.stdout.strip()
    if probe.returncode != 0 or not server:
        raise DockerError(
            f"the Docker daemon does not answer (`docker version`: "
            f"{_tail(probe.stderr or probe.stdout, 3) or 'no server version'}): {_START_DAEMON}"
        )
    return Docker(executable, server)


@dataclass(frozen=True)
class ComposeTool:
    """How to run Compose here: `docker compose` (v2) or `docker-compose` (v1)."""

    command: tuple[str, ...]
    version: str

    @property
    def major(self) -> int:
        return 1 if self.command[-1].endswith("docker-compose") else 2

    @property
    def program(self) -> str:
        return "docker-compose" if self.major == 1 else "docker compose"

    def describe(self) -> str:
        """E.g. "Compose v1 (docker-compose 1.29.2)"."""
        return f"Compose v{self.major} ({self.program} {self.version})"


def _compose_version(command: list[str], timeout: float) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    probe = _run([*command, "version"], timeout)
    if probe.returncode != 0:
        return None
    match = _VERSION.search(probe.stdout)
    return match[1] if match else probe.stdout.strip() or "unknown"


def find_compose(docker: Docker, timeout: float = 30.0) -> ComposeTool:
    """Compose v2 when the plugin answers, else v1. Raises DockerError when neither does."""
    for command in ([docker.executable, "compose"], ["docker-compose"]):
        version = _compose_version(command, timeout)
        if version is not None:
            resolved = shutil.which(command[0]) or command[0]
            return ComposeTool((resolved, *command[1:]), version)
    raise DockerError(
        f"neither `docker compose` (Compose v2) nor `docker-compose` (Compose v1) runs here: "
        f"{_INSTALL_COMPOSE}"
    )


def require_compose(timeout: float = 30.0) -> tuple[Docker, ComposeTool]:
    """Docker with a daemon that answers, and a Compose to drive it (see require_docker)."""
    docker = require_docker(timeout)
    return docker, find_compose(docker, timeout)


@dataclass(frozen=True)
class Compose:
    """One compose project: `docker compose -p NAME -f FILE ...` (or `docker-compose ...`)."""

    tool: ComposeTool
    compose_file: Path
    project_name: str

    def _command(self, *args: str) -> list[str]:
        # Absolute: compose runs in the file's directory (where `./config` is), and a relative
        # --project-dir would otherwise name the file twice over.
        file = str(self.compose_file.resolve())
        return [*self.tool.command, "-p", self.project_name, "-f", file, *args]

    def run(self, *args: str, timeout: float = 600.0) -> str:
        """Run a compose subcommand; its stdout. Raises DockerError with stderr's tail."""
        shown = f"{self.tool.program} {' '.join(args)}"
        return _checked(self._command(*args), shown, timeout, self.compose_file.resolve().parent)

    def up(self, timeout: float = 600.0) -> None:
        """`up -d`: starts the service in the background (its image already here)."""
        self.run("up", "-d", timeout=timeout)

    def down(self, timeout: float = 120.0) -> None:
        """`down`: the containers, the project's network and its anonymous volumes removed."""
        self.run("down", "--volumes", "--remove-orphans", timeout=timeout)

    def logs(self, tail: int = 50) -> str:
        """The last `tail` log lines of every service; a note instead when they cannot be had."""
        try:
            return self.run("logs", "--no-color", "--tail", str(tail), timeout=60.0)
        except DockerError as exc:
            return f"(no logs: {exc})"
