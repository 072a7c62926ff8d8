"""Shared fixtures: a real exported MLP and real graph and eager servers on loopback.

Servers run in this process on ephemeral ports (port 0), so tests can run in parallel sessions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The command line's output under test is the same on every machine, terminal and CI: typer
# draws a usage error in a rich panel wrapped at the terminal's width (TERMINAL_WIDTH, else
# COLUMNS, else the tty's, else 80), so a longer temporary path once split "cannot read it"
# across two lines of the box; and CI turns colour on (GITHUB_ACTIONS, FORCE_COLOR). So: wide
# enough that no message wraps, and no terminal codes. Set here, before anything imports typer
# (it reads them at import), for CliRunner and for every child process, which inherits them.
os.environ["TERMINAL_WIDTH"] = os.environ["COLUMNS"] = "1000"
os.environ["NO_COLOR"] = "1"
os.environ["TTY_COMPATIBLE"] = "0"  # rich: not a terminal, whatever FORCE_COLOR says
os.environ["_TYPER_FORCE_DISABLE_TERMINAL"] = "1"  # typer: the same, whatever GITHUB_ACTIONS says


def _docker_engine_running() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=20)
    return probe.returncode == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip only what this machine cannot run: docker tests without an engine, gpu tests
    without an NVIDIA GPU, and the peers' adapters unless GRAPHSERVE_PEERS=1 (each installs a
    peer; CI does not). Everything else, `slow` included, runs by default.

    GRAPHSERVE_REQUIRE_DOCKER=1 (CI sets it, after starting an engine) never skips a docker
    test: without an engine they fail, saying so, instead of passing as skipped."""
    need_docker = [i for i in items if "docker" in i.keywords]
    need_gpu = [i for i in items if "gpu" in i.keywords]
    required = os.environ.get("GRAPHSERVE_REQUIRE_DOCKER") == "1"
    if need_docker and not required and not _docker_engine_running():
        for item in need_docker:
            item.add_marker(pytest.mark.skip(reason="no Docker engine on this machine"))
    if need_gpu and shutil.which("nvidia-smi") is None:
        for item in need_gpu:
            item.add_marker(pytest.mark.skip(reason="no NVIDIA GPU on this machine"))
    if os.environ.get("GRAPHSERVE_PEERS") != "1":
        for item in (i for i in items if "peers" in i.keywords):
            item.add_marker(
                pytest.mark.skip(
                    reason="installs a peer server and TensorFlow into a venv of its own "
                    "(1-2 min, ~2.3 GB each): GRAPHSERVE_PEERS=1 or `make test-peers`"
                )
            )


@dataclass(frozen=True)
class MlpExport:
    base_path: Path  # BASE; the model lives at BASE/mlp/VERSION
    model_dir: Path  # BASE/mlp
    version_dir: Path


@dataclass(frozen=True)
class Servers:
    model_name: str
    graph_grpc: str
    graph_rest: str
    eager_grpc: str
    eager_rest: str
    graph_asyncio_grpc: str  # the graph model on the asyncio gRPC front end (no REST)


@pytest.fixture(scope="session")
def mlp_export(tmp_path_factory: pytest.TempPathFactory) -> MlpExport:
    from graphserve.exporter import ExportSpec, export_model

    base = tmp_path_factory.mktemp("models")
    result = export_model(ExportSpec(source="examples:mlp", name="mlp", base_path=base))
    return MlpExport(base_path=base, model_dir=base / "mlp", version_dir=result.path)


@pytest.fixture(scope="session")
def mlp_servers(mlp_export: MlpExport) -> Iterator[Servers]:
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

    graph_registry = ModelRegistry()
    graph_registry.load_graph("mlp", mlp_export.model_dir)
    eager_registry = ModelRegistry()
    eager_registry.load_eager("mlp", "examples:mlp")
    ephemeral = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    asyncio = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=None, grpc_asyncio=True)
    with (
        ModelServer(graph_registry, ephemeral) as graph,
        ModelServer(eager_registry, ephemeral) as eager,
        ModelServer(graph_registry, asyncio) as graph_asyncio,
    ):
        yield Servers(
            model_name="mlp",
            graph_grpc=f"127.0.0.1:{graph.grpc_port}",
            graph_rest=f"127.0.0.1:{graph.rest_port}",
            eager_grpc=f"127.0.0.1:{eager.grpc_port}",
            eager_rest=f"127.0.0.1:{eager.rest_port}",
            graph_asyncio_grpc=f"127.0.0.1:{graph_asyncio.grpc_port}",
        )


# Headless, as root (no sandbox), and quiet: without the networking flags Chromium reaches out
# to Google's hosts for updates, sync and field trials, which this machine refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by playwright; fails naming the package if absent.
    One per module: playwright's sync API keeps an event loop of its own while it runs."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("no chromium on PATH: install Debian's package chromium (`make test` does)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()
