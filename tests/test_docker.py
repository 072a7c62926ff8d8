"""The files in docker/: validated here as data; built and brought up only where docker runs.

- compose.yaml: TF Serving on NVIDIA GPUs, the hand-written example (`graphserve deploy
  tfserving` generates projects like it);
- Dockerfile (targets `graph` and `eager`) and compose.embedded.yaml: the embedded servers in
  containers. Each container's command line is parsed by the real `graphserve` CLI here, so a
  renamed option fails this test rather than a container start.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import typer.main
import yaml

from graphserve.cli import app
from graphserve.core.compat import DEFAULT_TFSERVING_IMAGE

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
EMBEDDED = DOCKER / "compose.embedded.yaml"
DOCKERFILE = DOCKER / "Dockerfile"


def test_compose_runs_tf_serving_gpu_with_the_model_base_path_mounted() -> None:
    project = yaml.safe_load(COMPOSE.read_text())
    service = project["services"]["tfserving"]
    assert service["image"] == f"${{TFSERVING_IMAGE:-{DEFAULT_TFSERVING_IMAGE}}}"
    assert service["image"].endswith("-gpu}")
    assert service["environment"] == {
        "MODEL_NAME": "${MODEL_NAME:-mlp}",
        "MODEL_BASE_PATH": "/models",
    }
    (volume,) = service["volumes"]
    assert volume["target"] == "/models" and volume["read_only"] is True
    assert volume["source"] == "${MODEL_BASE_PATH:-../models}"
    # Relative to docker/, the default source is the Makefile's model base path.
    assert (COMPOSE.parent / "../models").resolve() == COMPOSE.parent.parent / "models"
    assert service["ports"] == ["127.0.0.1:8500:8500", "127.0.0.1:8501:8501"]
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]


# -- the embedded servers' images ------------------------------------------------------------


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """Instructions per stage name, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = stages.setdefault("", [])
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        if instruction == "FROM":
            current = stages.setdefault(rest.split(" AS ")[-1].strip(), [])
        current.append((instruction, rest.strip()))
    return stages


def instruction(stage: list[tuple[str, str]], name: str) -> list[str]:
    return [rest for instr, rest in stage if instr == name]


def parse_cli(argv: list[str]) -> click.Context:
    """Parse `graphserve ARGV` with the real CLI, down to the subcommand; runs nothing."""
    command: Any = typer.main.get_command(app)
    args = list(argv)
    while hasattr(command, "get_command"):  # a group (typer's groups are not click.Group)
        name, *args = args
        found = command.get_command(click.Context(command), name)
        assert found is not None, f"graphserve has no command {name!r}"
        command = found
    context: click.Context = command.make_context(command.name or "", args)
    return context


def defaults(value: str) -> str:
    """A compose value with every ${VAR:-default} replaced by its default."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)


def test_dockerfile_builds_graph_and_eager_servers_from_this_project() -> None:
    stages = dockerfile_stages()
    assert list(stages)[-1] == "graph"  # the default target
    assert {"venv", "base", "graph", "eager", "tfserving-standin"} <= set(stages)
    # By default the base a user has; `make images` passes the one it makes from Debian's
    # packages, since no registry can be reached here.
    assert instruction(stages[""], "ARG") == ["PYTHON_IMAGE=python:3.11-slim"]
    assert instruction(stages["venv"], "FROM") == ["${PYTHON_IMAGE} AS venv"]
    assert instruction(stages["base"], "FROM") == ["${PYTHON_IMAGE} AS base"]
    build_images = (DOCKER / "build-images").read_text()
    assert "BASE_IMAGE=${BASE_IMAGE:-graphserve-base:bookworm-python3.11}" in build_images
    assert '--build-arg "PYTHON_IMAGE=$BASE_IMAGE"' in build_images
    # No frontend to pull (`# syntax=`), nothing only BuildKit has: the classic builder, which
    # Compose v1 and a docker CLI without buildx use, builds it too.
    assert not DOCKERFILE.read_text().startswith("# syntax")
    assert not any("--mount" in rest for rest in instruction(stages["venv"], "RUN"))

    # The wheels fetched on the host, installed with --no-index: the build downloads nothing.
    (install,) = instruction(stages["venv"], "RUN")
    assert "--no-index --find-links /wheels" in install and "-c /wheels/constraints.txt" in install
    assert any(
        "pip install --quiet --no-index --no-deps --no-build-isolation /src" in run
        for run in instruction(stages["base"], "RUN")
    )
    # What the wheel is built from is copied in and let through the ignore file: graphserve/
    # and every package folder it links in (graphserve.exporter is exporter/, ...).
    linked = [p.name for p in (ROOT / "graphserve").iterdir() if p.is_symlink()]
    packages = ["graphserve", *linked]
    assert {"exporter", "serving", "loadtest", "deploy", "conformance"} <= set(linked)
    assert instruction(stages["venv"], "COPY") == ["docker/wheels /wheels"]
    copied = {rest.split()[0] for rest in instruction(stages["base"], "COPY")}
    assert set(packages) <= copied
    allowed = (ROOT / ".dockerignore").read_text().splitlines()
    assert "**" in allowed and {f"!{p}/" for p in packages} <= set(allowed)
    assert {"!docker/wheels/*.whl", "!docker/standin/"} <= set(allowed)
    assert instruction(stages["base"], "COPY")[0] == "--from=venv /opt/graphserve /opt/graphserve"
    assert instruction(stages["base"], "USER") == ["graphserve"]  # not root
    assert instruction(stages["base"], "EXPOSE") == ["8500 8501"]

    for target, command in (("graph", "graph"), ("eager", "eager")):
        (entrypoint,) = map(json.loads, instruction(stages[target], "ENTRYPOINT"))
        (cmd,) = map(json.loads, instruction(stages[target], "CMD"))
        assert entrypoint[:3] == ["graphserve", "serve", command]
        params = parse_cli(entrypoint[1:] + cmd).params
        assert (params["host"], params["grpc_port"], params["rest_port"]) == ("0.0.0.0", 8500, 8501)
        assert params["model_name"] == "mlp"


def test_the_standin_keeps_tf_servings_image_contract() -> None:
    """TF Serving's image: `tensorflow_model_server` on PATH, its entrypoint script, MODEL_NAME
    and MODEL_BASE_PATH, ports 8500/8501; our graph server takes the flags as they are."""
    standin = dockerfile_stages()["tfserving-standin"]
    assert instruction(standin, "FROM") == ["base AS tfserving-standin"]
    assert instruction(standin, "USER") == ["root"]  # as TF Serving's image runs
    assert instruction(standin, "ENV") == ["MODEL_NAME=model MODEL_BASE_PATH=/models"]
    assert json.loads(instruction(standin, "ENTRYPOINT")[0]) == [
        "/usr/bin/tf_serving_entrypoint.sh"
    ]
    (copy,) = instruction(standin, "COPY")
    assert copy.split()[-1] == "/usr/bin/"
    scripts = DOCKER / "standin"
    entrypoint = (scripts / "tf_serving_entrypoint.sh").read_text()
    assert "tensorflow_model_server --port=8500 --rest_api_port=8501" in entrypoint
    assert "--model_name=${MODEL_NAME} --model_base_path=${MODEL_BASE_PATH}/${MODEL_NAME}" in (
        entrypoint
    )
    wrapper = (scripts / "tensorflow_model_server").read_text()
    assert 'exec graphserve serve graph --host "${STANDIN_HOST:-0.0.0.0}" "$@"' in wrapper
    # What the entrypoint runs, through the wrapper, parsed by the real CLI.
    params = parse_cli([
        "serve", "graph", "--host", "0.0.0.0", "--port=8500", "--rest_api_port=8501",
        "--model_name=model", "--model_base_path=/models/model",
    ]).params  # fmt: skip
    assert params["model_name"] == "model"


def test_embedded_compose_runs_both_servers_and_the_comparison() -> None:
    project = yaml.safe_load(EMBEDDED.read_text())
    assert "name" not in project  # Compose v1 refuses a top-level name
    services: dict[str, Any] = project["services"]
    for name in ("graph", "eager"):
        build = services[name]["build"]
        assert (EMBEDDED.parent / build["context"]).resolve() == ROOT
        assert ROOT / build["dockerfile"] == DOCKERFILE
        assert build["target"] == name
        assert defaults(build["args"]["PYTHON_IMAGE"]) == "python:3.11-slim"  # what users have

    # On the host's network: nothing published, the servers bound to loopback.
    ports = {}
    for name in ("graph", "eager"):
        service = services[name]
        assert service["network_mode"] == "host" and "ports" not in service
        argv = service["entrypoint"][1:] + [defaults(a) for a in service["command"]]
        assert service["entrypoint"][:3] == ["graphserve", "serve", name]
        params = parse_cli(argv).params
        assert params["host"] == "127.0.0.1"
        assert params["model_name"] == "mlp"
        ports[name] = (params["grpc_port"], params["rest_port"])
        probe = defaults(service["healthcheck"]["test"][-1])
        assert f"('127.0.0.1', {params['grpc_port']})" in probe
    # Both arms up at once, on the ports of the manual's `loadtest compare` line
    # (docs/guides/containers.md).
    assert ports == {"graph": (8500, 8501), "eager": (9500, 9501)}

    (volume,) = services["graph"]["volumes"]
    assert volume["target"] == "/models" and volume["read_only"] is True
    assert (EMBEDDED.parent / defaults(volume["source"])).resolve() == ROOT / "models"
    graph_command = [defaults(a) for a in services["graph"]["command"]]
    graph_params = parse_cli(services["graph"]["entrypoint"][1:] + graph_command).params
    assert str(graph_params["model_base_path"]) == "/models/mlp"
    assert defaults(services["eager"]["command"][0]) == "examples:mlp"

    compare = services["compare"]
    assert compare["network_mode"] == "host" and compare["image"] == "graphserve-graph:local"
    assert compare["profiles"] == ["compare"]  # not started by `up`
    assert {d: c["condition"] for d, c in compare["depends_on"].items()} == {
        "graph": "service_healthy",
        "eager": "service_healthy",
    }
    argv = compare["entrypoint"][1:] + [defaults(a) for a in compare["command"]]
    params = parse_cli(argv).params
    assert (params["graph"], params["eager"]) == ("127.0.0.1:8500", "127.0.0.1:9500")
    assert params["allow_remote"] is False  # loopback: nothing to allow
    assert str(params["out"]) == compare["volumes"][0].split(":")[-1] == "/reports"


@pytest.mark.docker
@pytest.mark.parametrize("compose_file", [COMPOSE, EMBEDDED], ids=lambda p: p.name)
def test_compose_here_accepts_the_file(compose_file: Path) -> None:
    """Compose as this machine has it (v2, else v1: Debian 12's docker-compose 1.29)."""
    from graphserve.deploy.docker import require_compose

    _, tool = require_compose()
    result = subprocess.run(
        [*tool.command, "-f", str(compose_file), "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
