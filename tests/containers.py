"""What the docker tests share: the images, Compose as found here, and directories a container
can read.

The images are built by docker/build-images, as `make images` builds them (the base once per
machine, then cached layers: seconds when nothing changed). Every container runs on the host's
network, so all traffic stays on 127.0.0.1; every project and container name is unique, so
parallel runs never meet.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from graphserve.deploy.docker import ComposeTool, Docker, find_compose, require_docker

ROOT = Path(__file__).resolve().parent.parent
GRAPH_IMAGE = "graphserve-graph:local"
EAGER_IMAGE = "graphserve-eager:local"
STANDIN_IMAGE = "graphserve-tfserving-standin:local"
BASE_IMAGE = "graphserve-base:bookworm-python3.11"


def docker() -> Docker:
    return require_docker()


def compose_tool() -> ComposeTool:
    return find_compose(docker())


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def images() -> None:
    """docker/build-images with this venv's python (its versions are the images' versions)."""
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(
        [str(ROOT / "docker" / "build-images")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert result.returncode == 0, f"docker/build-images failed:\n{result.stderr[-4000:]}"


@pytest.fixture(scope="session")
def readable_dir() -> Iterator[Path]:
    """A directory every container user can read (pytest's own tmp is 0700, owned by us, and
    the embedded servers' images run as uid 10001)."""
    path = Path(tempfile.mkdtemp(prefix="graphserve-docker-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def make_readable(path: Path) -> None:
    """`path` and everything below it readable by anyone (directories 0755, files 0644)."""
    for item in [path, *path.rglob("*")]:
        item.chmod(0o755 if item.is_dir() else 0o644)


def readable_copy(source: Path, target: Path) -> Path:
    """Copy `source` to `target`, readable by anyone."""
    shutil.copytree(source, target)
    make_readable(target)
    return target
