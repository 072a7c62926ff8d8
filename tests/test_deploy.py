"""`graphserve deploy`: the generated compose project and Kubernetes manifests, checked as data.

A real MLP is exported first; every test runs the CLI as users do and parses what it wrote:
compose.yaml and the manifests with pyyaml, models.config with TF Serving's own proto. Where
docker would run, a stand-in `docker` on PATH records its arguments (these tests need no
engine), and the wait is real: GetModelStatus against the embedded graph server on loopback,
over TLS and mutual TLS with certificates made at test time (tests/certs.py) for
--ssl-config-file. The tests marked `docker` here check the files with Compose as installed;
tests/test_containers.py runs every deployment for real.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2
from typer.testing import CliRunner, Result

from graphserve.cli import app
from graphserve.core.compat import DEFAULT_TFSERVING_IMAGE
from graphserve.core.processes import free_port
from graphserve.exporter import ExportSpec, export_model
from tests.certs import Certs, make_certs

runner = CliRunner()
BATCHING = "max_batch_size { value: 32 }\nbatch_timeout_micros { value: 2000 }\n"
COMPATIBLE_IMAGE = "tensorflow/serving:2.21.0-gpu"  # no older than the TF these tests export with


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BASE holding mlp/1, exported for real."""
    base = tmp_path_factory.mktemp("deploy") / "models"
    export_model(
        ExportSpec(
            source="examples:mlp",
            name="mlp",
            base_path=base,
            parity_batches=1,
            warmup_samples=1,
        )
    )
    return base


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def ssl_configs(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """TF Serving SSL configs: "tls" (the server's certificate and key) and "mutual" (with the
    test CA as custom_ca and client_verify)."""
    tmp = tmp_path_factory.mktemp("ssl")
    return {
        "tls": certs.ssl_config(tmp / "tls.pbtxt"),
        "mutual": certs.ssl_config(tmp / "mtls.pbtxt", custom_ca=certs.ca, client_verify=True),
    }


def deploy(*args: object) -> Result:
    return runner.invoke(app, ["deploy", *map(str, args)])


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def summary(result: Result) -> dict[str, Any]:
    return dict(json.loads(ok(result).stdout))


def load_compose(project: Path) -> dict[str, Any]:
    service: dict[str, Any] = yaml.safe_load((project / "compose.yaml").read_text())["services"][
        "tfserving"
    ]
    return service


def flags(args: list[str]) -> dict[str, str]:
    """`--name=value` flags by name (a bare `--name` is "true")."""
    parsed = {}
    for arg in args:
        name, _, value = arg.removeprefix("--").partition("=")
        parsed[name] = value or "true"
    return parsed


def parse_models_config(text: str) -> model_server_config_pb2.ModelServerConfig:
    config = model_server_config_pb2.ModelServerConfig()
    text_format.Parse(text, config)
    return config


def host_file(project: Path, service: dict[str, Any], container_path: str) -> Path:
    """The host file behind `container_path`, through the service's bind mounts (of a directory
    above it, or of the file itself)."""
    for volume in service["volumes"]:
        target = volume["target"].rstrip("/") + "/"
        if container_path.startswith(target) or container_path == volume["target"]:
            source = Path(volume["source"])
            source = source if source.is_absolute() else project / source
            return source / container_path[len(target) :]
    raise AssertionError(f"{container_path} is not under any mount: {service['volumes']}")


# -- deploy tfserving: the compose project ---------------------------------------------------


def test_tfserving_dry_run_writes_a_gpu_compose_project(base: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    batching = tmp_path / "batching.txt"
    batching.write_text(BATCHING)
    result = deploy(
        "tfserving", "--model-base-path", base, "--image", COMPATIBLE_IMAGE, "--gpus", "2",
        "--grpc-port", "9100", "--rest-port", "9101", "--monitoring",
        "--batching-parameters-file", batching, "--per-process-gpu-memory-fraction", "0.5",
        "--project-dir", project, "--dry-run", "--output", "json",
    )  # fmt: skip
    report = summary(result)
    service = load_compose(project)

    assert service["image"] == COMPATIBLE_IMAGE == report["image"]
    assert service["entrypoint"] == ["tensorflow_model_server"]
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}

    command = flags(service["command"])
    assert service["ports"] == [
        f"127.0.0.1:9100:{command['port']}",
        f"127.0.0.1:9101:{command['rest_api_port']}",
    ]
    models_mount = next(v for v in service["volumes"] if v["target"] == "/models")
    assert models_mount == {
        "type": "bind",
        "source": str(base.resolve()),
        "target": "/models",
        "read_only": True,
    }
    assert all(v["read_only"] for v in service["volumes"])

    # Every config file the command names is mounted, and is what was asked for.
    config_text = host_file(project, service, command["model_config_file"]).read_text()
    config = parse_models_config(config_text)
    assert [(c.name, c.base_path) for c in config.model_config_list.config] == [
        ("mlp", "/models/mlp")
    ]
    assert (host_file(project, service, "/models/mlp") / "1" / "saved_model.pb").is_file()
    assert command["model_config_file_poll_wait_seconds"] == "60"
    assert command["enable_batching"] == "true"
    assert host_file(project, service, command["batching_parameters_file"]).read_text() == BATCHING
    from graphserve.serving.metrics import load_monitoring_config

    monitoring = host_file(project, service, command["monitoring_config_file"])
    assert load_monitoring_config(monitoring) == "/monitoring/prometheus/metrics"
    assert command["per_process_gpu_memory_fraction"] == "0.5"

    assert report["dry_run"] is True and report["started"] is False
    assert report["grpc"] == "127.0.0.1:9100" and report["rest"] == "http://127.0.0.1:9101"
    assert report["warnings"] == []
    assert [c["compatible"] for c in report["tfserving"]["checks"]] == [True]
    # The files, with their contents, on stderr; stdout is only the JSON.
    assert f"--- {project / 'compose.yaml'}" in result.stderr
    assert 'base_path: "/models/mlp"' in result.stderr


def test_tfserving_defaults_serve_on_loopback_without_batching_or_monitoring(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TFSERVING_IMAGE", raising=False)
    project = tmp_path / "project"
    ok(deploy("tfserving", "--model-base-path", base, "--project-dir", project, "--dry-run",
              "--monitoring"))  # fmt: skip
    assert (project / "config" / "monitoring.config").is_file()

    ok(deploy("tfserving", "--model-base-path", base, "--project-dir", project, "--dry-run"))
    service = load_compose(project)
    assert service["image"] == DEFAULT_TFSERVING_IMAGE
    assert service["ports"] == ["127.0.0.1:8500:8500", "127.0.0.1:8501:8501"]
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["count"] == "all"
    command = flags(service["command"])
    assert not {"enable_batching", "batching_parameters_file", "monitoring_config_file"} & set(
        command
    )
    assert "per_process_gpu_memory_fraction" not in command
    # The earlier run's monitoring.config is gone: the project is exactly this run's.
    assert sorted(p.name for p in (project / "config").iterdir()) == ["models.config"]


def test_tfserving_host_option_publishes_elsewhere(base: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    ok(deploy("tfserving", "--model-base-path", base, "--project-dir", project, "--dry-run",
              "--host", "0.0.0.0"))  # fmt: skip
    assert load_compose(project)["ports"] == ["0.0.0.0:8500:8500", "0.0.0.0:8501:8501"]


def test_host_network_serves_on_the_chosen_ports_and_publishes_nothing(
    base: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    report = summary(deploy("tfserving", "--model-base-path", base, "--project-dir", project,
                            "--dry-run", "--network", "host", "--grpc-port", "9100",
                            "--rest-port", "9101", "--output", "json"))  # fmt: skip
    service = load_compose(project)
    assert service["network_mode"] == "host" and "ports" not in service
    command = flags(service["command"])
    assert (command["port"], command["rest_api_port"]) == ("9100", "9101")
    assert "/dev/tcp/127.0.0.1/9101 " in service["healthcheck"]["test"][-1]
    assert (report["network"], report["grpc"]) == ("host", "127.0.0.1:9100")

    refused = deploy("tfserving", "--model-base-path", base, "--project-dir", project,
                     "--dry-run", "--network", "host", "--host", "0.0.0.0")  # fmt: skip
    assert refused.exit_code == 2
    assert "with --network host nothing is published" in refused.stderr


def test_the_project_name_is_kept_where_compose_v1_accepts_it(base: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    ok(deploy("tfserving", "--model-base-path", base, "--project-dir", project, "--dry-run",
              "--name", "gs-named"))  # fmt: skip
    document = yaml.safe_load((project / "compose.yaml").read_text())
    assert "name" not in document  # docker-compose 1.29: "'name' does not match any of ..."
    assert document["x-graphserve-project"] == "gs-named"


def test_model_name_serves_one_model_with_flags_and_gpus_0_reserves_none(
    base: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    ok(deploy("tfserving", "--model-base-path", base, "--model-name", "mlp", "--gpus", "0",
              "--project-dir", project, "--dry-run"))  # fmt: skip
    service = load_compose(project)
    command = flags(service["command"])
    assert command["model_name"] == "mlp" and command["model_base_path"] == "/models/mlp"
    assert "model_config_file" not in command
    assert "deploy" not in service
    assert [v["target"] for v in service["volumes"]] == ["/models"]


def test_every_model_under_the_base_path_is_served(base: Path, tmp_path: Path) -> None:
    two = tmp_path / "models"
    shutil.copytree(base, two)
    shutil.copytree(two / "mlp", two / "ranker")
    (two / "notes").mkdir()  # no versions: not a model
    (two / "mlp" / ".tmp-2-1-abcd").mkdir()  # an export's temporary: not a version
    project = tmp_path / "project"
    result = deploy("tfserving", "--model-base-path", two, "--project-dir", project,
                    "--dry-run", "--output", "json")  # fmt: skip
    report = summary(result)
    config = parse_models_config((project / "config" / "models.config").read_text())
    assert {(c.name, c.base_path, c.model_platform) for c in config.model_config_list.config} == {
        ("mlp", "/models/mlp", "tensorflow"),
        ("ranker", "/models/ranker", "tensorflow"),
    }
    assert {m["name"]: m["versions"] for m in report["models"]} == {"mlp": [1], "ranker": [1]}


def test_model_config_file_is_kept_with_base_paths_rewritten(base: Path, tmp_path: Path) -> None:
    config_file = tmp_path / "graphserve.serving.config"
    config_file.write_text(
        "model_config_list {\n"
        f'  config {{ name: "mlp" base_path: "{base / "mlp"}" model_platform: "tensorflow"\n'
        "    model_version_policy { specific { versions: 1 } }\n"
        '    version_labels { key: "stable" value: 1 } }\n'
        '  config { name: "again" base_path: "/models/mlp" }\n'
        "}\n"
    )
    project = tmp_path / "project"
    ok(deploy("tfserving", "--model-base-path", base, "--model-config-file", config_file,
              "--project-dir", project, "--dry-run"))  # fmt: skip
    config = parse_models_config((project / "config" / "models.config").read_text())
    mlp, again = config.model_config_list.config
    assert (mlp.name, mlp.base_path, again.base_path) == ("mlp", "/models/mlp", "/models/mlp")
    assert list(mlp.model_version_policy.specific.versions) == [1]
    assert dict(mlp.version_labels) == {"stable": 1}

    outside = tmp_path / "elsewhere"
    shutil.copytree(base / "mlp", outside / "mlp")
    config_file.write_text(f'model_config_list {{ config {{ name: "x" base_path: "{outside}" }} }}')
    result = deploy("tfserving", "--model-base-path", base, "--model-config-file", config_file,
                    "--project-dir", project, "--dry-run")  # fmt: skip
    assert result.exit_code == 2
    assert "outside --model-base-path" in result.stderr


# -- the image check -------------------------------------------------------------------------


def test_newer_tensorflow_than_the_image_warns_and_strict_refuses(
    base: Path, tmp_path: Path
) -> None:
    args = ["tfserving", "--model-base-path", base, "--project-dir", tmp_path / "p", "--image",
            "tensorflow/serving:2.18.0-gpu", "--dry-run", "--output", "json"]  # fmt: skip
    result = deploy(*args)
    report = summary(result)
    (check,) = report["tfserving"]["checks"]
    assert check["compatible"] is False and check["tensorflow_version"].startswith("2.")
    assert "newer than tensorflow/serving:2.18.0-gpu" in report["warnings"][0]
    assert "warning:" in result.stderr and "newer than" in result.stderr

    strict = deploy(*args, "--strict", "--project-dir", tmp_path / "strict")
    assert strict.exit_code == 1
    assert strict.stdout == ""
    assert "--strict" in strict.stderr and "newer than" in strict.stderr
    assert not (tmp_path / "strict").exists()  # refused before writing anything


def test_unpinned_latest_image_warns(base: Path, tmp_path: Path) -> None:
    args = ["tfserving", "--model-base-path", base, "--project-dir", tmp_path / "p", "--image",
            "tensorflow/serving:latest-gpu", "--dry-run", "--output", "json"]  # fmt: skip
    result = deploy(*args)
    report = summary(result)
    assert report["tfserving"]["pinned"] is False
    assert "not pinned" in report["warnings"][0]
    assert DEFAULT_TFSERVING_IMAGE in report["warnings"][0]  # the suggestion
    assert "not pinned" in result.stderr
    assert deploy(*args, "--strict").exit_code == 1


def test_tensorflow_version_from_saved_model_pb_without_a_manifest(
    base: Path, tmp_path: Path
) -> None:
    import tensorflow as tf

    plain = tmp_path / "models"
    shutil.copytree(base, plain)
    (plain / "mlp" / "1" / "assets.extra" / "graphserve.json").unlink()
    result = deploy("tfserving", "--model-base-path", plain, "--project-dir", tmp_path / "p",
                    "--dry-run", "--output", "json")  # fmt: skip
    report = summary(result)
    (check,) = report["tfserving"]["checks"]
    assert check["tensorflow_version"] == tf.__version__


# -- errors and exit codes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model-name", "mlp", "--model-config-file", "x.config"], "exclude each other"),
        (["--gpus", "two"], "expected 'all' or a count"),
        (["--grpc-port", "9000", "--rest-port", "9000"], "both 9000"),
        (["--per-process-gpu-memory-fraction", "1.5"], "expected a fraction in (0, 1]"),
        (["--name", "Not A Name"], "compose project name"),
        (["--model-name", "mlp", "--image", ""], "--image"),
    ],
)
def test_usage_errors_exit_2(base: Path, tmp_path: Path, extra: list[str], message: str) -> None:
    result = deploy("tfserving", "--model-base-path", base, "--project-dir", tmp_path, "--dry-run",
                    *extra)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_batching_file_tf_serving_would_refuse_exits_2(base: Path, tmp_path: Path) -> None:
    batching = tmp_path / "batching.txt"
    batching.write_text("max_batch_size { value: 32 }\nallowed_batch_sizes: 16\n")
    result = deploy("tfserving", "--model-base-path", base, "--project-dir", tmp_path / "p",
                    "--batching-parameters-file", batching, "--dry-run")  # fmt: skip
    assert result.exit_code == 2
    assert "allowed_batch_sizes" in result.stderr


def test_no_model_under_the_base_path_exits_1(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = deploy("tfserving", "--model-base-path", tmp_path / "empty", "--dry-run",
                    "--project-dir", tmp_path / "p")  # fmt: skip
    assert result.exit_code == 1
    assert "no model under" in result.stderr


def test_without_docker_deploy_and_down_exit_1_saying_so(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    result = deploy("tfserving", "--model-base-path", base, "--project-dir", project)
    assert result.exit_code == 1
    assert "docker is not on PATH" in result.stderr and "--dry-run" in result.stderr
    assert (project / "compose.yaml").is_file()  # written, to inspect or run by hand

    down = deploy("down", "--project-dir", project)
    assert down.exit_code == 1
    assert "docker is not on PATH" in down.stderr

    nothing = deploy("down", "--project-dir", tmp_path / "never")
    assert nothing.exit_code == 1
    assert "no compose.yaml" in nothing.stderr


# -- deploy tfserving --ssl-config-file: TF Serving's TLS ------------------------------------


def test_ssl_config_file_is_mounted_read_only_and_passed_as_tf_servings_flag(
    base: Path, tmp_path: Path, ssl_configs: dict[str, Path]
) -> None:
    from compose_spec import PyCompose

    project = tmp_path / "project"
    ssl_config = ssl_configs["tls"]
    result = deploy("tfserving", "--model-base-path", base, "--image", COMPATIBLE_IMAGE,
                    "--project-dir", project, "--ssl-config-file", ssl_config, "--dry-run",
                    "--output", "json")  # fmt: skip
    report = summary(result)
    service = load_compose(project)
    command = flags(service["command"])
    assert command["ssl_config_file"] == "/ssl/ssl.config"
    mount = next(v for v in service["volumes"] if v["target"] == "/ssl/ssl.config")
    assert mount == {"type": "bind", "source": str(ssl_config.resolve()),
                     "target": "/ssl/ssl.config", "read_only": True}  # fmt: skip
    # The user's file itself, never a copy of its private key in the project.
    assert host_file(project, service, command["ssl_config_file"]) == ssl_config.resolve()
    assert sorted(p.name for p in (project / "config").iterdir()) == ["models.config"]
    assert "server_key" not in (project / "compose.yaml").read_text()
    PyCompose.from_yaml((project / "compose.yaml").read_text()).validate()

    # TLS on gRPC only: TF Serving's REST port has no TLS, and its healthcheck stays plaintext.
    assert report["grpc"] == "grpcs://127.0.0.1:8500" and report["rest"] == "http://127.0.0.1:8501"
    assert (report["ssl_config_file"], report["client_verify"]) == (
        str(ssl_config.resolve()),
        False,
    )
    assert "/dev/tcp/127.0.0.1/8501 " in service["healthcheck"]["test"][-1]

    text = ok(deploy("tfserving", "--model-base-path", base, "--project-dir", project,
                     "--ssl-config-file", ssl_config, "--dry-run"))  # fmt: skip
    assert (
        "gRPC grpcs://127.0.0.1:8500, REST http://127.0.0.1:8501 (TF Serving's REST has no TLS)"
        in (text.stdout)
    )
    # Deployed again without it: plaintext, nothing of it left in the file.
    report = summary(deploy("tfserving", "--model-base-path", base, "--project-dir", project,
                            "--dry-run", "--output", "json"))  # fmt: skip
    assert report["grpc"] == "127.0.0.1:8500" and report["ssl_config_file"] is None
    service = load_compose(project)
    assert "ssl_config_file" not in flags(service["command"])
    assert [v["target"] for v in service["volumes"]] == ["/models", "/config"]


def test_an_ssl_config_tf_serving_would_refuse_exits_2_naming_the_field(
    base: Path, tmp_path: Path, ssl_configs: dict[str, Path]
) -> None:
    broken = tmp_path / "ssl.pbtxt"
    broken.write_text(ssl_configs["tls"].read_text().replace("server_key", "server_kee"))
    result = deploy("tfserving", "--model-base-path", base, "--project-dir", tmp_path / "p",
                    "--ssl-config-file", broken, "--dry-run")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"--ssl-config-file {broken}: not an SSLConfig text proto" in result.stderr
    assert "server_kee" in result.stderr
    missing = deploy("tfserving", "--model-base-path", base, "--project-dir", tmp_path / "p",
                     "--ssl-config-file", tmp_path / "none.pbtxt", "--dry-run")  # fmt: skip
    assert missing.exit_code == 2 and "cannot read it" in missing.stderr
    assert not (tmp_path / "p" / "compose.yaml").exists()


def test_tls_options_without_an_ssl_config_exit_2(base: Path, tmp_path: Path, certs: Certs) -> None:
    result = deploy("tfserving", "--model-base-path", base, "--project-dir", tmp_path / "p",
                    "--tls-ca", certs.ca, "--dry-run")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "how the wait dials a TLS deployment: give --ssl-config-file too" in result.stderr
    unreadable = deploy("tfserving", "--model-base-path", base, "--project-dir", tmp_path / "p",
                        "--tls-ca", tmp_path / "none.crt", "--dry-run")  # fmt: skip
    assert unreadable.exit_code == 2 and "cannot read it" in unreadable.output


# -- up, wait, down: a stand-in docker, a real server ----------------------------------------

FAKE_DOCKER = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:1] == ["version"]:
    print("20.10.24")
elif args[:2] == ["compose", "version"]:
    print("Docker Compose version v2.29.7")
elif args[:1] == ["ps"] and "--quiet" in args:
    print("c0ffee")
elif args[:1] == ["inspect"]:
    print("tfserving\\t" + os.environ.get("FAKE_STATE", "running") + "\\t1\\t0")
elif args[5:6] == ["logs"]:
    print("tfserving-1  | fake TF Serving log: Loading servable mlp")
"""


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `docker` that only records its arguments (one JSON list per line of the returned log)."""
    bin_dir, log = tmp_path / "fake-bin", tmp_path / "docker.log"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER.format(python=sys.executable, log=str(log)))
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return log


def docker_calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture(scope="module")
def graph_server(base: Path) -> Iterator[int]:
    """The embedded graph server serving BASE/mlp; yields its gRPC port."""
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

    registry = ModelRegistry()
    registry.load_graph("mlp", base / "mlp")
    with ModelServer(registry, ServerOptions(grpc_port=0, rest_port=0)) as server:
        yield server.grpc_port


def test_up_waits_for_available_then_down(
    base: Path, tmp_path: Path, fake_docker: Path, graph_server: int
) -> None:
    project = tmp_path / "project"
    result = deploy("tfserving", "--model-base-path", base, "--project-dir", project,
                    "--name", "gs-test", "--grpc-port", graph_server, "--timeout", "30",
                    "--output", "json")  # fmt: skip
    report = summary(result)
    assert report["started"] is True
    assert [s["state"] for s in report["status"]["mlp"]] == ["AVAILABLE"]
    compose_file = str(project / "compose.yaml")
    calls = docker_calls(fake_docker)
    assert calls[:2] == [["version", "--format", "{{.Server.Version}}"], ["compose", "version"]]
    assert ["compose", "-p", "gs-test", "-f", compose_file, "up", "-d"] in calls
    assert report["compose"] == "Compose v2 (docker compose 2.29.7)"
    assert "using Compose v2 (docker compose 2.29.7) with Docker Engine 20.10.24" in result.stderr

    down = ok(deploy("down", "--project-dir", project))
    calls = docker_calls(fake_docker)
    assert ["compose", "-p", "gs-test", "-f", compose_file, "down", "--volumes",
            "--remove-orphans"] in calls  # fmt: skip
    assert calls[-1][:2] == ["volume", "ls"]  # and then nothing of it was left
    assert "gs-test: down, no container, network or volume of it left" in down.stderr


def test_a_relative_project_dir_is_handed_to_compose_whole(
    base: Path,
    tmp_path: Path,
    fake_docker: Path,
    graph_server: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    ok(deploy("tfserving", "--model-base-path", base, "--grpc-port", graph_server,
              "--timeout", "30"))  # the default --project-dir, .graphserve/deploy  # fmt: skip
    up = next(c for c in docker_calls(fake_docker) if c[5:] == ["up", "-d"])
    assert up[4] == str(tmp_path / ".graphserve" / "deploy" / "compose.yaml")


def test_not_available_in_time_exits_1_with_the_logs(
    base: Path, tmp_path: Path, fake_docker: Path
) -> None:
    result = deploy("tfserving", "--model-base-path", base, "--project-dir", tmp_path / "p",
                    "--grpc-port", free_port(), "--timeout", "1")  # fmt: skip
    assert result.exit_code == 1
    assert "not AVAILABLE after 1s" in result.stderr and "mlp: no answer" in result.stderr
    assert "fake TF Serving log: Loading servable mlp" in result.stderr
    assert docker_calls(fake_docker)[-1][5:] == ["logs", "--no-color", "--tail", "50"]


def test_an_exited_container_fails_before_the_timeout(
    base: Path, tmp_path: Path, fake_docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_STATE", "exited")
    result = deploy("tfserving", "--model-base-path", base, "--project-dir", tmp_path / "p",
                    "--grpc-port", free_port(), "--timeout", "120")  # fmt: skip
    assert result.exit_code == 1
    assert "the tfserving container exited with code 1" in result.stderr


def test_wait_reads_model_status_over_grpc(graph_server: int) -> None:
    from graphserve.core.errors import NotAvailableError
    from graphserve.deploy.wait import wait_until_available

    address = f"127.0.0.1:{graph_server}"
    statuses = wait_until_available(address, ["mlp"], timeout=10)
    assert [(s.version, s.state, s.error_code) for s in statuses["mlp"]] == [(1, "AVAILABLE", 0)]
    with pytest.raises(NotAvailableError, match=r"not AVAILABLE after 0.5s .*nope: no answer"):
        wait_until_available(address, ["mlp", "nope"], timeout=0.5, interval=0.1)


@pytest.fixture(scope="module")
def tls_servers(base: Path, ssl_configs: dict[str, Path]) -> Iterator[dict[str, int]]:
    """The embedded graph server serving BASE/mlp over TLS and over mutual TLS, as TF Serving
    with these SSL configs would; yields their gRPC ports by config."""
    from graphserve.core.tls import ServerTls
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

    registry = ModelRegistry()
    registry.load_graph("mlp", base / "mlp")
    servers = {
        name: ModelServer(
            registry, ServerOptions(grpc_port=0, rest_port=None, tls=ServerTls.load(path))
        ).start()
        for name, path in ssl_configs.items()
    }
    try:
        yield {name: server.grpc_port for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop(grace=0.5)


def deploy_tls(base: Path, project: Path, ssl_config: Path, port: int, *extra: object) -> Result:
    return deploy("tfserving", "--model-base-path", base, "--project-dir", project,
                  "--ssl-config-file", ssl_config, "--grpc-port", port, "--timeout", "60",
                  "--output", "json", *extra)  # fmt: skip


@pytest.mark.parametrize("config", ["tls", "mutual"])
def test_the_wait_dials_tls_with_the_options_given(
    base: Path,
    tmp_path: Path,
    fake_docker: Path,
    certs: Certs,
    ssl_configs: dict[str, Path],
    tls_servers: dict[str, int],
    config: str,
) -> None:
    client = ["--tls-cert", certs.client.cert, "--tls-key", certs.client.key]
    result = deploy_tls(base, tmp_path / "p", ssl_configs[config], tls_servers[config],
                        "--tls-ca", certs.ca, *(client if config == "mutual" else []))  # fmt: skip
    report = summary(result)
    assert [s["state"] for s in report["status"]["mlp"]] == ["AVAILABLE"]
    address = f"grpcs://127.0.0.1:{tls_servers[config]}"
    assert report["grpc"] == address and report["client_verify"] is (config == "mutual")
    assert f"waiting up to 60s for mlp on {address}" in result.stderr


@pytest.mark.parametrize(
    ("config", "options", "message"),
    [
        ("tls", [], "the server's certificate is not signed by a CA this client trusts: give the "
         "CA's certificate with --tls-ca"),
        ("tls", ["--tls-ca", "{ca}", "--tls-server-name", "elsewhere.example"],
         "the server's certificate does not name the host dialed"),
        ("mutual", ["--tls-ca", "{ca}", "--tls-cert", "{stranger_cert}", "--tls-key",
                    "{stranger_key}"],
         "the server does not trust this client's certificate: give one signed by a CA in the "
         "server's custom_ca"),
    ],
)  # fmt: skip
def test_a_wait_that_tls_fails_exits_1_at_once_saying_why(
    base: Path,
    tmp_path: Path,
    fake_docker: Path,
    certs: Certs,
    ssl_configs: dict[str, Path],
    tls_servers: dict[str, int],
    config: str,
    options: list[str],
    message: str,
) -> None:
    values = {"ca": certs.ca, "stranger_cert": certs.stranger.cert,
              "stranger_key": certs.stranger.key}  # fmt: skip
    started = time.monotonic()
    result = deploy_tls(base, tmp_path / "p", ssl_configs[config], tls_servers[config],
                        *[o.format(**values) for o in options])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"the TLS connection to 127.0.0.1:{tls_servers[config]} fails: {message}" in (
        result.stderr
    )
    assert "fake TF Serving log" in result.stderr  # the containers' log, as for any failure
    assert time.monotonic() - started < 20  # not --timeout's 60 s


def test_client_verify_and_no_client_certificate_to_wait_with_exits_2_first(
    base: Path, tmp_path: Path, fake_docker: Path, certs: Certs, ssl_configs: dict[str, Path]
) -> None:
    project = tmp_path / "p"
    result = deploy("tfserving", "--model-base-path", base, "--project-dir", project,
                    "--ssl-config-file", ssl_configs["mutual"], "--tls-ca", certs.ca)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert (
        f"--ssl-config-file {ssl_configs['mutual'].resolve()} has client_verify: true, so TF "
        "Serving asks every gRPC client for a certificate, the readiness wait's included: give "
        "--tls-cert and --tls-key"
    ) in " ".join(result.stderr.split())
    assert not fake_docker.exists() and not (project / "compose.yaml").exists()  # nothing ran
    # Nothing waits without --wait or in a dry run: no client certificate needed then.
    ok(deploy("tfserving", "--model-base-path", base, "--project-dir", project,
              "--ssl-config-file", ssl_configs["mutual"], "--dry-run"))  # fmt: skip
    ok(deploy("tfserving", "--model-base-path", base, "--project-dir", project,
              "--ssl-config-file", ssl_configs["mutual"], "--no-wait"))  # fmt: skip


def test_wait_reads_model_status_over_tls(certs: Certs, tls_servers: dict[str, int]) -> None:
    from graphserve.core.errors import NotAvailableError
    from graphserve.core.tls import ClientTls
    from graphserve.deploy.wait import wait_until_available

    address = f"127.0.0.1:{tls_servers['mutual']}"
    tls = ClientTls(ca=certs.ca, cert=certs.client.cert, key=certs.client.key)
    statuses = wait_until_available(address, ["mlp"], timeout=10, tls=tls)
    assert [(s.version, s.state) for s in statuses["mlp"]] == [(1, "AVAILABLE")]
    with pytest.raises(NotAvailableError, match="asks for a client certificate"):
        wait_until_available(address, ["mlp"], timeout=10, tls=ClientTls(ca=certs.ca))
    # A model the server does not know is not a TLS failure: the wait goes on to the timeout.
    with pytest.raises(NotAvailableError, match=r"not AVAILABLE after 0.5s .*nope: no answer"):
        wait_until_available(address, ["mlp", "nope"], timeout=0.5, interval=0.1, tls=tls)


# -- deploy k8s ------------------------------------------------------------------------------


def load_manifests(out: Path) -> dict[str, dict[str, Any]]:
    objects = {}
    for path in sorted(out.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            objects[document["kind"]] = document
    return objects


def test_k8s_manifests_for_gpu_replicas_with_an_autoscaler(base: Path, tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    batching = tmp_path / "batching.txt"
    batching.write_text(BATCHING)
    result = deploy(
        "k8s", "--model-base-path", base, "--image", COMPATIBLE_IMAGE, "--gpus", "2",
        "--hpa", "--min-replicas", "2", "--max-replicas", "5", "--target-cpu", "60",
        "--model-pvc", "models", "--namespace", "serving", "--monitoring",
        "--batching-parameters-file", batching, "--out", out, "--dry-run", "--output", "json",
    )  # fmt: skip
    report = summary(result)
    objects = load_manifests(out)
    assert set(objects) == {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler"}
    assert {o["metadata"]["namespace"] for o in objects.values()} == {"serving"}
    assert sorted(report["files"]) == sorted(str(p) for p in out.glob("*.yaml"))

    deployment = objects["Deployment"]
    assert "replicas" not in deployment["spec"]  # the autoscaler owns the count
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == COMPATIBLE_IMAGE
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": 8500, "http": 8501}
    args = flags(container["args"])
    assert (args["port"], args["rest_api_port"]) == ("8500", "8501")
    readiness = container["readinessProbe"]["httpGet"]
    assert readiness["path"] == "/v1/models/mlp/metadata" and ports[readiness["port"]] == 8501
    assert ports[container["livenessProbe"]["tcpSocket"]["port"]] == 8500
    assert ports[container["startupProbe"]["tcpSocket"]["port"]] == 8500

    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["models"] == {"name": "models", "mountPath": "/models", "readOnly": True}
    assert mounts["config"]["mountPath"] == "/config" and mounts["config"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    configmap = objects["ConfigMap"]
    assert volumes["config"]["configMap"]["name"] == configmap["metadata"]["name"]

    # Every config file in the args is a key of the ConfigMap mounted at /config.
    data = configmap["data"]
    for flag in ("model_config_file", "batching_parameters_file", "monitoring_config_file"):
        assert args[flag].removeprefix("/config/") in data
    config = parse_models_config(data["models.config"])
    assert [(c.name, c.base_path) for c in config.model_config_list.config] == [
        ("mlp", "/models/mlp")
    ]
    assert data["batching.config"] == BATCHING
    assert args["enable_batching"] == "true"

    service = objects["Service"]
    assert {(p["name"], p["port"]) for p in service["spec"]["ports"]} == {
        ("grpc", 8500),
        ("http", 8501),
    }
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    hpa = objects["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"] == {"type": "Utilization", "averageUtilization": 60}
    assert "--- " in result.stderr and "kind: Deployment" in result.stderr


def test_k8s_without_hpa_has_replicas_and_a_host_path(base: Path, tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    ok(deploy("k8s", "--model-base-path", base, "--out", out, "--hpa"))
    result = ok(deploy("k8s", "--model-base-path", base, "--out", out, "--replicas", "3"))
    objects = load_manifests(out)
    assert "HorizontalPodAutoscaler" not in objects  # the earlier run's hpa.yaml is gone
    deployment = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 3
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["models"]["hostPath"] == {"path": str(base.resolve()), "type": "Directory"}
    assert "--model-pvc" in result.stderr  # the hostPath caveat
    assert f"kubectl apply -f {out}" in result.stdout


# The Kubernetes versions the manifests are checked against: the oldest still in its cloud
# providers' extended support here and the newest kubernetes-validate knows.
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())
EVERY_K8S_OPTION = [
    "--gpus", "2", "--hpa", "--min-replicas", "2", "--max-replicas", "5", "--target-cpu", "60",
    "--model-pvc", "models", "--namespace", "serving", "--monitoring",
    "--cpu-request", "2", "--memory-request", "4Gi",
]  # fmt: skip


@pytest.mark.parametrize(
    "options",
    [
        pytest.param([], id="defaults"),
        pytest.param(EVERY_K8S_OPTION, id="gpus-hpa-pvc-monitoring"),
        pytest.param(["--replicas", "3", "--name", "mlp-canary"], id="replicas-host-path"),
    ],
)
def test_every_k8s_manifest_is_valid_for_the_kubernetes_schemas(
    base: Path, tmp_path: Path, options: list[str]
) -> None:
    """Kubernetes' own OpenAPI schemas, offline and strict (an unknown field is an error), for
    every file `deploy k8s` writes, as `kubectl apply --validate=strict` would check them."""
    out = tmp_path / "k8s"
    batching = tmp_path / "batching.txt"
    batching.write_text(BATCHING)
    ok(deploy("k8s", "--model-base-path", base, "--out", out, "--image", COMPATIBLE_IMAGE,
              "--batching-parameters-file", batching, *options))  # fmt: skip
    paths = sorted(out.glob("*.yaml"))
    assert paths
    kinds = []
    for path in paths:
        for document in yaml.safe_load_all(path.read_text()):
            kinds.append(document["kind"])
            for version in K8S_VERSIONS:
                try:
                    kubernetes_validate.validate(document, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    pytest.fail(f"{path.name} ({document['kind']}) for Kubernetes {version}: {exc}")
    assert {"Deployment", "Service", "ConfigMap"} <= set(kinds)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param([], id="defaults"),
        pytest.param(["--gpus", "2", "--monitoring", "--batching"], id="gpus-monitoring-batching"),
        pytest.param(["--gpus", "all", "--host", "0.0.0.0", "--grpc-port", "9500"], id="all-gpus"),
        pytest.param(["--gpus", "0", "--name", "cpu-only"], id="no-gpu"),
        pytest.param(["--gpus", "0", "--network", "host"], id="host-network"),
        pytest.param(["--ssl", "--monitoring"], id="ssl-config"),
    ],
)
def test_every_compose_file_is_valid_for_the_compose_specification(
    base: Path, tmp_path: Path, options: list[str], ssl_configs: dict[str, Path]
) -> None:
    """The compose specification, as the compose_spec parser reads it (strict: an unknown key,
    a wrong type or a malformed duration is an error), for every compose.yaml we write; and a
    broken copy is refused, so the check can fail."""
    from compose_spec import PyCompose

    project = tmp_path / "project"
    batching = tmp_path / "batching.txt"
    batching.write_text(BATCHING)
    extra = [a for a in options if a not in ("--batching", "--ssl")]
    if "--batching" in options:
        extra += ["--batching-parameters-file", str(batching)]
    if "--ssl" in options:
        extra += ["--ssl-config-file", str(ssl_configs["tls"])]
    ok(deploy("tfserving", "--model-base-path", base, "--image", COMPATIBLE_IMAGE,
              "--project-dir", project, "--dry-run", *extra))  # fmt: skip
    text = (project / "compose.yaml").read_text()
    compose = PyCompose.from_yaml(text)
    compose.validate()
    assert compose.service_names() == ["tfserving"]
    broken = text.replace("    restart: unless-stopped", "    restart: unless-stopped\n    gpu: 1")
    assert broken != text
    with pytest.raises(ValueError, match="gpu"):
        PyCompose.from_yaml(broken)


def test_the_embedded_servers_compose_file_is_valid_for_the_compose_specification() -> None:
    from compose_spec import PyOptions

    path = Path(__file__).parent.parent / "docker" / "compose.embedded.yaml"
    # Compose interpolates first: with no variable set, ${NAME:-default} is the default.
    text = re.sub(r"\$\{[A-Za-z_]+:-([^}]*)\}", r"\1", path.read_text())
    assert "${" not in text
    compose = PyOptions(apply_merge=True).from_yaml(text)  # it shares settings with <<
    compose.validate()
    assert compose.service_names() == ["graph", "eager", "compare"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model-pvc", "m", "--model-host-path", "/srv/models"], "exclude each other"),
        (["--name", "Bad_Name"], "DNS label"),
        (["--hpa", "--min-replicas", "5", "--max-replicas", "2"], "min <= max"),
        (["--memory-request", "lots"], "quantity"),
    ],
)
def test_k8s_usage_errors_exit_2(
    base: Path, tmp_path: Path, extra: list[str], message: str
) -> None:
    result = deploy("k8s", "--model-base-path", base, "--out", tmp_path / "k8s", *extra)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_k8s_ssl_config_file_is_a_secret_mounted_read_only_and_the_flag(
    base: Path, tmp_path: Path, ssl_configs: dict[str, Path]
) -> None:
    """The SSL config as a Secret (readable by its owner only: it holds a private key) mounted
    at /ssl, TF Serving's flag naming it; the probes as without TLS (a TCP connect, and a
    plaintext GET on TF Serving's REST port, which has no TLS); valid for Kubernetes' schemas."""
    import base64

    out = tmp_path / "k8s"
    ssl_config = ssl_configs["mutual"]
    ok(deploy("k8s", "--model-base-path", base, "--out", out, "--image", COMPATIBLE_IMAGE,
              "--ssl-config-file", ssl_config, "--monitoring"))  # fmt: skip
    objects = load_manifests(out)
    assert set(objects) == {"ConfigMap", "Secret", "Deployment", "Service"}
    secret = objects["Secret"]
    assert (out / "secret.yaml").stat().st_mode & 0o777 == 0o600
    assert "keep it out of version control" in (out / "secret.yaml").read_text()
    assert base64.b64decode(secret["data"]["ssl.config"]) == ssl_config.read_bytes()

    pod = objects["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = flags(container["args"])
    assert args["ssl_config_file"] == "/ssl/ssl.config"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["tls"] == {"name": "tls", "mountPath": "/ssl", "readOnly": True}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": secret["metadata"]["name"],
                                        "defaultMode": 0o400}  # fmt: skip
    assert container["startupProbe"]["tcpSocket"] == container["livenessProbe"]["tcpSocket"]
    assert "scheme" not in container["readinessProbe"]["httpGet"]  # HTTP: TF Serving's REST
    for path in sorted(out.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(document, version, strict=True)

    # A new certificate rolls the pods (TF Serving reads the file only at start) ...
    digest = objects["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    ok(deploy("k8s", "--model-base-path", base, "--out", out, "--image", COMPATIBLE_IMAGE,
              "--ssl-config-file", ssl_configs["tls"], "--monitoring"))  # fmt: skip
    again = load_manifests(out)["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert again["graphserve/config-sha256"] != digest["graphserve/config-sha256"]
    # ... and without it, the earlier secret.yaml is gone.
    ok(deploy("k8s", "--model-base-path", base, "--out", out, "--image", COMPATIBLE_IMAGE))
    assert not (out / "secret.yaml").exists()


def test_k8s_load_test_of_a_tls_deployment_exits_2(
    base: Path, tmp_path: Path, ssl_configs: dict[str, Path]
) -> None:
    result = deploy("k8s", "--model-base-path", base, "--out", tmp_path / "k8s",
                    "--ssl-config-file", ssl_configs["tls"], "--loadtest", "--loadtest-image",
                    "registry.example/graphserve:1")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "the load test's pods dial TF Serving without TLS" in result.stderr


def test_deploy_help_and_a_dry_run_import_no_tensorflow(base: Path, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from graphserve.cli import app\n"
        "runner = CliRunner()\n"
        "assert runner.invoke(app, ['deploy', '--help']).exit_code == 0\n"
        "assert runner.invoke(app, ['deploy', 'tfserving', '--help']).exit_code == 0\n"
        "result = runner.invoke(app, ['deploy', 'tfserving', '--model-base-path', sys.argv[1],\n"
        "                             '--project-dir', sys.argv[2], '--dry-run'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print('TF_IMPORTED' if 'tensorflow' in sys.modules else 'TF_NOT_IMPORTED')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(base), str(tmp_path / "p")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "TF_NOT_IMPORTED" in out.stdout


# -- with a Docker engine --------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.parametrize("network", ["bridge", "host"])
def test_compose_here_accepts_the_generated_project(
    base: Path, tmp_path: Path, network: str, ssl_configs: dict[str, Path]
) -> None:
    """Compose as this machine has it (v2, else v1: Debian 12's docker-compose 1.29, which
    refuses what v2 allows, such as a top-level `name:` or ports beside the host's network),
    with every mount: the models, the config directory and the SSL config file."""
    from graphserve.deploy.docker import require_compose

    project = tmp_path / "project"
    ok(deploy("tfserving", "--model-base-path", base, "--project-dir", project, "--dry-run",
              "--monitoring", "--network", network, "--ssl-config-file",
              ssl_configs["mutual"]))  # fmt: skip
    _, tool = require_compose()
    result = subprocess.run(
        [*tool.command, "-f", str(project / "compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
