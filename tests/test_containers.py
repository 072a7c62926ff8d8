"""Every container path, run for real on a Docker engine (Debian's docker.io; Compose v2 where
installed, v1 otherwise), every container on the host's network so all traffic stays on
127.0.0.1.

- `graphserve deploy tfserving` with the TF Serving stand-in (the graph server behind TF
  Serving's image contract; tensorflow/serving cannot be pulled here): up, waited for, every API
  through the project's client, a load test, a new version and a new model picked up while it
  serves, a distributed load test from the project's image, down with nothing left;
- `deploy tfserving --ssl-config-file` with mutual TLS (certificates made at test time): the
  SSL config mounted and passed as TF Serving's flag, the wait over TLS, gRPC over TLS and REST
  over HTTPS (graphserve's; TF Serving's REST has no TLS), plaintext clients refused saying why;
- the failures a user meets: a model that fails to load, a container that exits at start,
  `--timeout`, an image that is not there, no daemon, no compose;
- docker/compose.embedded.yaml: the graph and eager containers, compared by `loadtest compare`.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from typer.testing import CliRunner, Result

from graphserve.cli import app
from graphserve.core.client import (
    GrpcClient,
    RestClient,
    classify_request,
    example,
    grpc_error_text,
    metadata_request,
    model_status,
    predict_outputs,
    predict_request,
    regress_request,
    signature_defs,
    status_request,
)
from graphserve.core.httpclient import TlsError
from graphserve.core.processes import free_port, free_ports
from graphserve.core.tls import ClientTls
from tests.certs import make_certs
from tests.conftest import MlpExport, Servers
from tests.containers import (
    BASE_IMAGE,
    GRAPH_IMAGE,
    ROOT,
    STANDIN_IMAGE,
    compose_tool,
    docker,
    images,
    make_readable,
    readable_copy,
    readable_dir,
    unique,
)
from tests.tf1_models import write_tf1_half_plus_two

__all__ = ["images", "readable_dir"]  # fixtures, used by name

# The first test's setup may build the images (docker/build-images, which also waits for a
# build already under way): more than pyproject.toml's per-test timeout allows the rest.
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]
runner = CliRunner()


def cli(*args: object) -> Result:
    return runner.invoke(app, [str(a) for a in args])


@dataclass
class Deployment:
    base: Path
    project_dir: Path
    name: str
    grpc_port: int
    rest_port: int

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def rest(self) -> str:
        return f"127.0.0.1:{self.rest_port}"

    def deploy(self, *extra: object, image: str = STANDIN_IMAGE, timeout: int = 180) -> Result:
        return cli(
            "deploy", "tfserving", "--model-base-path", self.base, "--image", image,
            "--gpus", "0", "--network", "host", "--grpc-port", self.grpc_port,
            "--rest-port", self.rest_port, "--name", self.name, "--project-dir",
            self.project_dir, "--config-poll-seconds", "1", "--timeout", timeout,
            "--output", "json", *extra,
        )  # fmt: skip

    def container_id(self) -> str:
        label = f"label=com.docker.compose.project={self.name}"
        return docker().run("ps", "--all", "--quiet", "--filter", label).strip()

    def down(self) -> Result:
        """`deploy down`, then nothing of the project may be left."""
        result = cli("deploy", "down", "--project-dir", self.project_dir)
        assert result.exit_code == 0, result.output
        assert docker().project_leftovers(self.name) == []
        return result


def new_deployment(base: Path, tmp_path: Path, prefix: str = "gs-test") -> Deployment:
    return Deployment(base, tmp_path / "project", unique(prefix), *free_ports(2))


@pytest.fixture(scope="module")
def base(images: None, readable_dir: Path, mlp_export: MlpExport) -> Path:
    """BASE with the exported mlp (version 1) and TF Serving's half_plus_two as its TF1
    generator writes it, in a zero-padded version directory as in TF Serving's testdata."""
    base = readable_dir / unique("models")
    readable_copy(mlp_export.model_dir, base / "mlp")
    write_tf1_half_plus_two(base / "half" / "00000123")
    make_readable(base)
    return base


@pytest.fixture(scope="module")
def standin(
    base: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Deployment, dict[str, Any]]]:
    """The stand-in deployed by `deploy tfserving --network host`, with its JSON summary."""
    deployment = new_deployment(base, tmp_path_factory.mktemp("standin"))
    started = time.monotonic()
    result = deployment.deploy()
    try:
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        summary["seconds_to_available"] = time.monotonic() - started
        yield deployment, summary
    finally:
        if deployment.container_id():
            deployment.down()


# -- deploy tfserving, for real ---------------------------------------------------------------


def test_deploy_writes_starts_and_waits_until_every_model_is_available(
    standin: tuple[Deployment, dict[str, Any]],
) -> None:
    deployment, summary = standin
    project = deployment.project_dir
    assert summary["started"] is True and summary["network"] == "host"
    assert summary["compose"].startswith(f"Compose v{compose_tool().major} (")
    assert {Path(f).name for f in summary["files"]} == {"compose.yaml", "models.config"}
    assert (project / "config" / "models.config").is_file()
    states = {
        name: [(s["version"], s["state"]) for s in v] for name, v in summary["status"].items()
    }
    assert states == {"half": [(123, "AVAILABLE")], "mlp": [(1, "AVAILABLE")]}
    (container,) = docker().project_states(deployment.name).values()
    assert (container.state, container.restarts) == ("running", 0)


def test_the_projects_client_gets_every_api_from_the_deployment(
    standin: tuple[Deployment, dict[str, Any]], mlp_export: MlpExport
) -> None:
    import tensorflow as tf

    deployment, _ = standin
    rows = np.random.default_rng(0).random((2, 784), dtype=np.float32)
    expected = (
        tf.saved_model.load(str(mlp_export.version_dir))
        .signatures["serving_default"](images=tf.constant(rows))["logits"]
        .numpy()
    )
    with GrpcClient.connect(deployment.grpc) as client:
        response = client.predict(predict_request("mlp", {"images": rows}), timeout=30)
        np.testing.assert_allclose(predict_outputs(response)["logits"], expected, rtol=1e-5)
        assert response.model_spec.version.value == 1

        x = example(x=[3.0])
        scores = client.classify(classify_request("half", [x], signature_name="classify_x_to_y"))
        assert [c.score for c in scores.result.classifications[0].classes] == [3.5]
        values = client.regress(regress_request("half", [x], signature_name="regress_x_to_y"))
        assert [r.value for r in values.result.regressions] == [3.5]

        metadata = client.metadata(metadata_request("half"), timeout=10)
        assert metadata.model_spec.version.value == 123
        assert {"serving_default", "classify_x_to_y", "regress_x_to_y"} <= set(
            signature_defs(metadata).signature_def
        )
    assert [(s.version, s.state) for s in model_status(deployment.grpc, "half")] == [
        (123, "AVAILABLE")
    ]
    with RestClient(deployment.rest) as rest:
        reply = rest.predict("half", {"instances": [1.0, 2.0]})
        assert (reply.status, reply.json()) == (200, {"predictions": [2.5, 3.0]})
        metadata_reply = rest.get("/v1/models/mlp/metadata")
        assert metadata_reply.status == 200
        assert metadata_reply.json()["model_spec"]["version"] == "1"


def test_graphserve_conformance_holds_against_the_deployment(
    standin: tuple[Deployment, dict[str, Any]],
) -> None:
    """`graphserve conformance` against the stand-in in its container: the model-independent
    cases of TF Serving's tests on the exported mlp and on TF Serving's TF1 half_plus_two."""
    deployment, _ = standin
    for model in ("mlp", "half"):
        result = cli("conformance", deployment.grpc, "--rest", deployment.rest, "--model", model,
                     "--output", "json")  # fmt: skip
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["counts"]["fail"] == 0, report
        passed = {r["case"] for r in report["results"] if r["outcome"] == "pass"}
        assert f"REST POST /v1/models/{model}:predict (gzip body, equal to gRPC's answer)" in (
            passed
        )
        assert "gRPC Predict (extra and missing inputs)" in passed


def test_a_load_test_through_the_deployment(
    standin: tuple[Deployment, dict[str, Any]], tmp_path: Path
) -> None:
    deployment, _ = standin
    out = tmp_path / "report"
    result = cli("loadtest", "compare", "--arm", f"tfserving={deployment.grpc}",
                 "--model-name", "mlp", "--users", "2", "--warmup", "1s", "--duration", "2s",
                 "--out", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    (arm,) = report["steps"][0]["arms"].values()
    assert arm["failures"] == 0 and arm["measured_requests"] > 50


def test_a_recording_replays_through_the_deployment(
    standin: tuple[Deployment, dict[str, Any]], mlp_servers: Servers, tmp_path: Path
) -> None:
    """Traffic of 1 to 8 rows replayed at its times against the stand-in in its container and
    the graph server in this process, over gRPC and REST: every answer alike."""
    deployment, _ = standin
    traffic = tmp_path / "mlp.tfrecord"
    made = cli("traffic", "make", deployment.base / "mlp", "--out", traffic, "--count", "40",
               "--batch-sizes", "1-8", "--rate", "100")  # fmt: skip
    assert made.exit_code == 0, made.output
    for protocol, tfserving, graph in (
        ("grpc", deployment.grpc, mlp_servers.graph_grpc),
        ("rest", deployment.rest, mlp_servers.graph_rest),
    ):
        out = tmp_path / protocol
        result = cli(
            "loadtest", "replay", traffic, "--protocol", protocol,
            "--arm", f"tfserving={tfserving}", "--arm", f"graph={graph}",
            "--slo", "errors==0", "--slo", "answers.mismatch==0", "--out", out,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        report = json.loads((out / "replay.json").read_text())
        assert [(a["name"], a["requests"], a["failed"]) for a in report["arms"]] == [
            ("tfserving", 40, 0), ("graph", 40, 0),
        ]  # fmt: skip
        (across,) = report["arms"][0]["answers"]
        assert (across["reference"], across["compared"], across["mismatched"]) == ("graph", 40, 0)


def test_a_new_version_copied_in_is_served_with_no_failed_request(
    standin: tuple[Deployment, dict[str, Any]],
) -> None:
    """As a deployment script pushes one: written under a hidden name, renamed into place.
    Predict runs all along; the old version is unloaded only once the new one serves."""
    deployment, _ = standin
    model = deployment.base / "mlp"
    rows = np.ones((1, 784), np.float32)
    answered: collections.Counter[int] = collections.Counter()
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with GrpcClient.connect(deployment.grpc) as client:
            request = predict_request("mlp", {"images": rows})
            while not stop.is_set():
                try:
                    response = client.predict(request, timeout=10)
                    answered[response.model_spec.version.value] += 1
                except grpc.RpcError as exc:
                    failures.append(grpc_error_text(exc))

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 90
        while answered[1] < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        incoming = model / ".incoming-2"
        shutil.copytree(model / "1", incoming)
        make_readable(incoming)
        incoming.rename(model / "2")
        while time.monotonic() < deadline:
            states = {s.version: s.state for s in model_status(deployment.grpc, "mlp")}
            if states.get(1) == "END" and answered[2] >= 20:
                break
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert failures == []
    assert answered[1] >= 20 and answered[2] >= 20, answered
    assert states == {1: "END", 2: "AVAILABLE"}


def test_loadtest_rollout_through_the_deployments_file_system_source(
    standin: tuple[Deployment, dict[str, Any]], mlp_export: MlpExport, tmp_path: Path
) -> None:
    """`graphserve loadtest rollout` against TF Serving's image contract: the version is copied
    into the base path the container mounts, the server in the container finds it by polling,
    and no request fails while it swaps."""
    deployment, _ = standin
    source = readable_copy(mlp_export.version_dir, tmp_path / "new")  # the container reads it
    result = cli("loadtest", "rollout", "--address", deployment.grpc, "--model-base-path",
                 deployment.base / "mlp", "--new-version", source, "--rate", "50", "--before",
                 "2s", "--after", "3s", "--slo", "errors==0", "--out", tmp_path / "out",
                 "--output", "json")  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    swap = report["swap"]
    assert swap["completed"] and swap["new_version"] == swap["old_version"] + 1, swap
    assert {s.version: s.state for s in model_status(deployment.grpc, "mlp")}[
        swap["new_version"]
    ] == "AVAILABLE"
    (run,) = [w for w in report["windows"] if w["name"] == "run"]
    assert run["errors"] == 0 and run["requests"] == run["answered"] > 0
    assert set(run["versions"]) == {str(swap["old_version"]), str(swap["new_version"])}


def test_a_model_added_to_models_config_is_served_without_a_restart(
    standin: tuple[Deployment, dict[str, Any]],
) -> None:
    """Deploying again rewrites models.config (atomically); the running server reads it on its
    next poll, so the container is the same one and the old models keep serving."""
    deployment, _ = standin
    before = deployment.container_id()
    shutil.copytree(deployment.base / "half", deployment.base / "half2")
    make_readable(deployment.base / "half2")
    result = deployment.deploy()
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert [s["state"] for s in summary["status"]["half2"]] == ["AVAILABLE"]
    assert deployment.container_id() == before
    with RestClient(deployment.rest) as rest:
        assert rest.predict("half2", {"instances": [2.0]}).json() == {"predictions": [3.0]}


def test_a_distributed_load_test_in_containers(
    standin: tuple[Deployment, dict[str, Any]], tmp_path: Path
) -> None:
    """`loadtest compare --expect-workers 2` in one container of the project's image, two
    `loadtest worker` containers joining it, all on the host's network."""
    deployment, _ = standin
    engine = docker()
    master_port, names = (
        free_port(),
        [unique("gs-master"), unique("gs-worker"), unique("gs-worker")],
    )
    out = tmp_path / "report"
    out.mkdir()
    run = ["run", "--detach", "--network", "host", "--entrypoint", "graphserve"]
    try:
        engine.run(
            *run, "--name", names[0], "--user", "0", "--env", "HOME=/tmp",
            "--volume", f"{out}:/reports", GRAPH_IMAGE,
            "loadtest", "compare", "--arm", f"tfserving={deployment.grpc}", "--model-name", "mlp",
            "--users", "4", "--warmup", "1s", "--duration", "3s", "--expect-workers", "2",
            "--master-bind-port", str(master_port), "--workers-timeout", "120s",
            "--out", "/reports",
        )  # fmt: skip
        for name in names[1:]:
            engine.run(*run, "--name", name, GRAPH_IMAGE, "loadtest", "worker",
                       "--master-host", "127.0.0.1", "--master-port", str(master_port))  # fmt: skip
        code = engine.run("wait", names[0], timeout=300).strip()
        logs = subprocess.run(["docker", "logs", names[0]], capture_output=True, text=True)
        assert code == "0", logs.stdout + logs.stderr
        for name in names[1:]:
            assert engine.run("wait", name, timeout=120).strip() == "0"
    finally:
        subprocess.run(["docker", "rm", "--force", *names], capture_output=True, check=False)
    report = json.loads((out / "report.json").read_text())
    assert report["workers"]["expected"] == 2
    assert len(report["workers"]["nodes"]) == 2
    assert all(node["lost_s"] is None for node in report["workers"]["nodes"])
    (arm,) = report["steps"][0]["arms"].values()
    assert arm["failures"] == 0 and arm["measured_requests"] > 50


def test_deploy_down_leaves_no_container_network_or_volume(
    standin: tuple[Deployment, dict[str, Any]],
) -> None:
    deployment, _ = standin
    result = deployment.down()  # asserts nothing is left
    assert f"{deployment.name}: down" in result.stderr
    assert model_status(deployment.grpc, "mlp") == []  # nothing answers there any more


# -- deploy tfserving --ssl-config-file, for real ---------------------------------------------


def test_a_mutual_tls_deployment_waits_and_serves_over_tls_only(base: Path, tmp_path: Path) -> None:
    """The stand-in with an SSL config asking for client certificates: the file mounted
    read-only and named by TF Serving's flag, which the stand-in's `tensorflow_model_server`
    passes through as it is; the wait dials TLS with the client certificate; Predict over gRPC
    with TLS and over REST with HTTPS (graphserve's servers serve REST with the same
    certificate; TF Serving's REST would stay plaintext); plaintext clients and a client
    without a certificate are refused, each told why."""
    certs = make_certs(tmp_path / "certs")
    ssl_config = certs.ssl_config(tmp_path / "ssl.pbtxt", custom_ca=certs.ca, client_verify=True)
    tls = ClientTls(ca=certs.ca, cert=certs.client.cert, key=certs.client.key)
    deployment = new_deployment(base, tmp_path, "gs-tls")
    started = time.monotonic()
    try:
        result = deployment.deploy("--ssl-config-file", ssl_config, "--tls-ca", certs.ca,
                                   "--tls-cert", certs.client.cert, "--tls-key",
                                   certs.client.key)  # fmt: skip
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["grpc"] == f"grpcs://{deployment.grpc}"
        assert summary["status"]["half"][0]["state"] == "AVAILABLE"
        assert f"on grpcs://{deployment.grpc}" in result.stderr
        command = docker().run("inspect", "--format", "{{json .Args}}", deployment.container_id())
        assert "--ssl_config_file=/ssl/ssl.config" in json.loads(command)

        with GrpcClient.connect(deployment.grpc, tls=tls, timeout=30) as client:
            request = regress_request("half", [example(x=[3.0])], signature_name="regress_x_to_y")
            assert [r.value for r in client.regress(request).result.regressions] == [3.5]
            response = client.predict(predict_request("half", {"x": np.float32([1.0, 2.0])}))
            np.testing.assert_allclose(predict_outputs(response)["y"], [2.5, 3.0])
        with RestClient(f"https://{deployment.rest}", tls=tls, timeout=30) as rest:
            reply = rest.predict("half", {"instances": [1.0, 2.0]})
            assert (reply.status, reply.json()) == (200, {"predictions": [2.5, 3.0]})

        speaks_tls = "the server speaks TLS on this port: dial https:// or grpcs://"
        with GrpcClient.connect(deployment.grpc, timeout=5) as plaintext:
            with pytest.raises(grpc.RpcError) as refused:
                plaintext.status(status_request("half"))
            assert speaks_tls in plaintext.error_text(refused.value)
        with RestClient(deployment.rest, timeout=5) as rest, pytest.raises(TlsError) as caught:
            rest.get("/v1/models/half")
        assert speaks_tls in str(caught.value)
        anonymous = ClientTls(ca=certs.ca)
        with GrpcClient.connect(deployment.grpc, tls=anonymous, timeout=5) as client:
            with pytest.raises(grpc.RpcError) as refused:
                client.status(status_request("half"))
            assert "asks for a client certificate (mutual TLS): give --tls-cert and --tls-key" in (
                client.error_text(refused.value)
            )

        # graphserve conformance over mutual TLS, against the container
        report = cli("conformance", f"grpcs://{deployment.grpc}", "--rest",
                     f"https://{deployment.rest}", "--model", "half", "--tls-ca", certs.ca,
                     "--tls-cert", certs.client.cert, "--tls-key", certs.client.key,
                     "--output", "json")  # fmt: skip
        assert report.exit_code == 0, report.output
        assert json.loads(report.stdout)["counts"]["fail"] == 0
    finally:
        if deployment.container_id():
            deployment.down()
    print(f"mutual TLS deployment: {time.monotonic() - started:.1f}s, deploy to down")


# -- the failures a user meets ----------------------------------------------------------------


def test_a_model_that_fails_to_load_exits_1_with_the_log_and_leaves_the_container(
    base: Path, readable_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = readable_dir / unique("broken")
    readable_copy(base / "mlp", broken / "mlp")
    (broken / "bad" / "1").mkdir(parents=True)
    (broken / "bad" / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    make_readable(broken)
    deployment = new_deployment(broken, tmp_path)
    monkeypatch.chdir(tmp_path)  # the default --project-dir is relative: .graphserve/deploy
    deployment.project_dir = Path(".graphserve/deploy")
    try:
        result = deployment.deploy(timeout=240)
        assert result.exit_code == 1, result.output
        assert "the tfserving container exited" in result.stderr
        assert "logs --tail 50" in result.stderr
        assert "bad: version 1 failed to load" in result.stderr  # the container's own log
        assert "is not a valid SavedModel" in result.stderr
        assert "docker inspect" in result.stderr  # left as documented
        assert set(docker().project_states(deployment.name)) == {"tfserving"}
    finally:
        deployment.down()


FAILING_IMAGE = f"""
FROM {BASE_IMAGE}
RUN printf '#!/bin/sh\\necho "tensorflow_model_server: unknown flag --port=$*" >&2\\nexit 1\\n' \\
      > /usr/bin/tensorflow_model_server \\
    && chmod +x /usr/bin/tensorflow_model_server
"""
# Never ready, and stops at once when asked (sh acts on TERM between sleeps).
SILENT_IMAGE = f"""
FROM {BASE_IMAGE}
RUN printf '#!/bin/sh\\ntrap "exit 0" TERM\\nwhile :; do sleep 0.2; done\\n' \\
      > /usr/bin/tensorflow_model_server \\
    && chmod +x /usr/bin/tensorflow_model_server
"""


def build_from_text(tag: str, dockerfile: str) -> str:
    """Build a Dockerfile given as text, with no context."""
    result = subprocess.run(["docker", "build", "--quiet", "--tag", tag, "-"], input=dockerfile,
                            capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return tag


def test_a_container_that_exits_at_start_fails_before_the_timeout(
    base: Path, tmp_path: Path
) -> None:
    image = build_from_text("graphserve-test-exits:local", FAILING_IMAGE)
    deployment = new_deployment(base, tmp_path)
    try:
        started = time.monotonic()
        result = deployment.deploy(image=image, timeout=300)
        assert result.exit_code == 1, result.output
        assert time.monotonic() - started < 120
        assert "the tfserving container exited" in result.stderr
        assert "tensorflow_model_server: unknown flag --port=" in result.stderr
    finally:
        deployment.down()


def test_timeout_passing_exits_1_naming_what_the_server_said(base: Path, tmp_path: Path) -> None:
    image = build_from_text("graphserve-test-silent:local", SILENT_IMAGE)
    deployment = new_deployment(base, tmp_path)
    try:
        result = deployment.deploy(image=image, timeout=3)
        assert result.exit_code == 1, result.output
        assert f"not AVAILABLE after 3s at {deployment.grpc}" in result.stderr
        assert "half: no answer" in result.stderr and "mlp: no answer" in result.stderr
        assert docker().project_states(deployment.name)["tfserving"].state == "running"
    finally:
        deployment.down()


def test_an_image_that_is_not_there_exits_1_and_starts_nothing(base: Path, tmp_path: Path) -> None:
    # A registry on loopback where none listens: the pull fails without leaving this machine.
    deployment = new_deployment(base, tmp_path)
    result = deployment.deploy(image="127.0.0.1:9/graphserve/no-such-image:1")
    assert result.exit_code == 1, result.output
    assert (
        "image 127.0.0.1:9/graphserve/no-such-image:1 is not on this machine and could not be "
        "pulled" in result.stderr
    )
    assert docker().project_leftovers(deployment.name) == []


def test_no_daemon_exits_1_saying_how_to_start_one(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A socket path nobody serves, and short: docker refuses one over 108 bytes (a long
    # temporary directory's) before it tries to connect, and says so instead.
    monkeypatch.setenv("DOCKER_HOST", f"unix:///nonexistent/{unique('gs')}/no-docker.sock")
    deployment = new_deployment(base, tmp_path)
    result = deployment.deploy()
    assert result.exit_code == 1
    assert "the Docker daemon does not answer" in result.stderr
    assert "no-docker.sock" in result.stderr and "dockerd" in result.stderr
    assert (deployment.project_dir / "compose.yaml").is_file()  # written, to run later


def test_no_compose_exits_1_naming_the_packages(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real docker and daemon, but neither Compose: a docker that knows no `compose`
    (as the CLI answers without its plugin) and no docker-compose on PATH."""
    real = shutil.which("docker")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "docker"
    wrapper.write_text(
        "#!/bin/sh\n"
        '[ "$1" = compose ] && { echo "docker: unknown command: docker compose" >&2; exit 1; }\n'
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    result = new_deployment(base, tmp_path).deploy()
    assert result.exit_code == 1
    assert "neither `docker compose` (Compose v2) nor `docker-compose` (Compose v1)" in (
        result.stderr
    )
    assert "docker-compose package" in result.stderr and "docker-compose-plugin" in result.stderr


# -- docker/compose.embedded.yaml -------------------------------------------------------------


def test_the_embedded_compose_file_serves_both_arms_for_a_comparison(
    base: Path, tmp_path: Path
) -> None:
    from graphserve.deploy.wait import wait_until_available

    keys = ("GRAPH_GRPC", "GRAPH_REST", "EAGER_GRPC", "EAGER_REST")
    ports = {k: str(port) for k, port in zip(keys, free_ports(len(keys)), strict=True)}
    env = {**os.environ, "MODEL_BASE_PATH": str(base), "MODEL_NAME": "mlp"}
    env["PYTHON_IMAGE"] = BASE_IMAGE  # no registry here: the base make images built
    env.update({f"{key}_PORT": port for key, port in ports.items()})
    project = unique("gs-embedded")
    compose = [
        *compose_tool().command,
        "-p",
        project,
        "-f",
        str(ROOT / "docker/compose.embedded.yaml"),
    ]
    graph, eager = f"127.0.0.1:{ports['GRAPH_GRPC']}", f"127.0.0.1:{ports['EAGER_GRPC']}"
    try:
        up = subprocess.run([*compose, "up", "-d"], env=env, capture_output=True, text=True)
        assert up.returncode == 0, up.stderr
        for address in (graph, eager):
            wait_until_available(address, ["mlp"], timeout=180)
        out = tmp_path / "report"
        result = cli("loadtest", "compare", "--graph", graph, "--eager", eager, "--model-name",
                     "mlp", "--warmup", "1s", "--duration", "2s", "--out", out)  # fmt: skip
        assert result.exit_code == 0, result.output
        report = json.loads((out / "report.json").read_text())
        arms = report["steps"][0]["arms"]
        assert set(arms) == {"graph", "eager"}
        assert all(a["failures"] == 0 and a["measured_requests"] > 20 for a in arms.values())
        # Both really are containers: the servers' own start lines, in their logs.
        logs = subprocess.run([*compose, "logs", "--no-color"], env=env, capture_output=True,
                              text=True).stdout  # fmt: skip
        assert f"gRPC {graph}" in logs and f"gRPC {eager}" in logs
    finally:
        down = subprocess.run([*compose, "down", "--volumes", "--remove-orphans"], env=env,
                              capture_output=True, text=True)  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert docker().project_leftovers(project) == []
