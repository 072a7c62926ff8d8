"""`docker compose` as a subprocess: found or explained, run with a timeout; failures DockerError.

Every call names the project (`-p`) and the file (`-f`), so it works from any directory and two
projects never mix.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from graphserve.core.errors import DockerError

__all__ = ["Compose", "require_compose"]

_INSTALL_HINT = (
    "install Docker Engine with the Compose plugin (https://docs.docker.com/engine/install/), "
    "or use --dry-run to only write the files"
)


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def require_compose(timeout: float = 30.0) -> str:
    """The docker executable, once `docker compose version` works.

    Raises DockerError saying what is missing: docker itself, or its compose plugin.
    """
    docker = shutil.which("docker")
    if docker is None:
        raise DockerError(f"docker is not on PATH: {_INSTALL_HINT}")
    try:
        probe = subprocess.run(
            [docker, "compose", "version"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DockerError(f"`docker compose version` did not run: {exc}") from None
    if probe.returncode != 0:
        raise DockerError(
            f"`docker compose version` failed (exit {probe.returncode}): "
            f"{_tail(probe.stderr or probe.stdout, 5)}; {_INSTALL_HINT}"
        )
    return docker


@dataclass(frozen=True)
class Compose:
    """One compose project: `docker compose -p NAME -f FILE ...`."""

    docker: str
    compose_file: Path
    project_name: str

    def _command(self, *args: str) -> list[str]:
        file = str(self.compose_file)
        return [self.docker, "compose", "-p", self.project_name, "-f", file, *args]

    def run(self, *args: str, timeout: float = 600.0) -> str:
        """Run a compose subcommand; its stdout. Raises DockerError with stderr's tail."""
        command = self._command(*args)
        try:
            result = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                cwd=self.compose_file.parent,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DockerError(f"`{' '.join(command)}` did not finish: {exc}") from None
        if result.returncode != 0:
            raise DockerError(
                f"`docker compose {' '.join(args)}` failed (exit {result.returncode}):\n"
                f"{_tail(result.stderr or result.stdout)}"
            )
        return result.stdout

    def up(self, timeout: float = 3600.0) -> None:
        """`up -d`: pulls the image if needed, starts the service in the background. The first
        pull of a TF Serving GPU image is several GB, hence the generous timeout."""
        self.run("up", "-d", timeout=timeout)

    def down(self, timeout: float = 120.0) -> None:
        self.run("down", timeout=timeout)

    def logs(self, tail: int = 50) -> str:
        """The last `tail` log lines of every service; a note instead when they cannot be had."""
        try:
            return self.run("logs", "--no-color", "--tail", str(tail), timeout=60.0)
        except DockerError as exc:
            return f"(no logs: {exc})"

    def states(self) -> dict[str, str]:
        """Each service's container state ("running", "exited", "restarting", ...)."""
        out = self.run("ps", "--all", "--format", "json", timeout=60.0).strip()
        # Compose v2 printed one JSON array; newer releases print one object per line.
        rows = json.loads(out) if out.startswith("[") else [json.loads(x) for x in out.splitlines()]
        return {str(r.get("Service", "")): str(r.get("State", "")).lower() for r in rows}
