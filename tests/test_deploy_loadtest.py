"""`graphserve deploy k8s --loadtest`: the load test of a TF Serving deployment on Kubernetes.

Every manifest is checked against Kubernetes' own schemas (kubernetes-validate, strict, offline),
the objects against each other (the workers find the master's Service, the Job mounts the
ConfigMap), the payload against the SavedModel's signature, and the plan by running it: the
master's arguments, read from the ConfigMap as the Job reads them, drive a real comparison that a
`graphserve loadtest worker` joins over TCP, against a real server on loopback.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import numpy as np
import pytest
import yaml
from typer.testing import CliRunner, Result

from graphserve.cli import app
from graphserve.core.processes import free_port
from graphserve.core.savedmodel import signature_defs
from graphserve.core.signature import spec_from_tensor_info
from graphserve.loadtest.generator.payloads import load_payload

K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())
IMAGE = "tensorflow/serving:2.21.0-gpu"
LOADTEST_IMAGE = "registry.example/graphserve:0.1.0"


def deploy_k8s(base: Path, out: Path, *extra: object) -> Result:
    args = ["deploy", "k8s", "--model-base-path", str(base / "mlp"), "--image", IMAGE,
            "--out", str(out), *map(str, extra)]  # fmt: skip
    return CliRunner().invoke(app, args)


def objects(out: Path) -> dict[str, dict[str, Any]]:
    return {path.name: yaml.safe_load(path.read_text()) for path in sorted(out.glob("*.yaml"))}


@pytest.fixture(scope="module")
def base(mlp_export) -> Path:  # type: ignore[no-untyped-def]
    return Path(mlp_export.base_path)


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param([], id="defaults"),
        pytest.param(
            [
                "--loadtest-workers",
                "8",
                "--loadtest-protocol",
                "rest",
                "--loadtest-report-pvc",
                "reports",
                "--loadtest-worker-cpu",
                "1500m",
                "--namespace",
                "perf",
                "--hpa",
            ],
            id="rest-pvc-namespace",
        ),
    ],
)
def test_every_loadtest_manifest_is_valid_for_the_kubernetes_schemas(
    base: Path, tmp_path: Path, extra: list[str]
) -> None:
    result = deploy_k8s(base, tmp_path, "--loadtest", "--loadtest-image", LOADTEST_IMAGE, *extra)
    assert result.exit_code == 0, result.output
    written = objects(tmp_path)
    assert {"loadtest-configmap.yaml", "loadtest-master.yaml", "loadtest-service.yaml",
            "loadtest-workers.yaml"} <= set(written)  # fmt: skip
    for name, document in written.items():
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name} ({document['kind']}) for Kubernetes {version}: {exc}")


def test_the_objects_find_each_other(base: Path, tmp_path: Path) -> None:
    result = deploy_k8s(base, tmp_path, "--loadtest", "--loadtest-image", LOADTEST_IMAGE,
                        "--loadtest-workers", "6", "--loadtest-worker-cpu", "2",
                        "--namespace", "perf", "--name", "mlp-serving")  # fmt: skip
    assert result.exit_code == 0, result.output
    o = objects(tmp_path)
    job, service, workers = (
        o["loadtest-master.yaml"],
        o["loadtest-service.yaml"],
        o["loadtest-workers.yaml"],
    )
    config = o["loadtest-configmap.yaml"]
    assert (job["kind"], service["kind"], workers["kind"]) == ("Job", "Service", "Deployment")
    # The workers dial the master's Service by DNS, on the port the Job's pod listens on.
    pod = job["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    master_port = pod["spec"]["containers"][0]["ports"][0]
    assert service["spec"]["ports"][0]["targetPort"] == master_port["name"] == "locust"
    worker = workers["spec"]["template"]["spec"]["containers"][0]
    assert worker["command"] == ["graphserve", "loadtest", "worker"]
    assert worker["args"][:4] == [
        "--master-host", "mlp-serving-loadtest-master.perf.svc.cluster.local",
        "--master-port", str(service["spec"]["ports"][0]["port"]),
    ]  # fmt: skip
    assert workers["spec"]["replicas"] == 6
    assert worker["resources"]["requests"]["cpu"] == "2" and worker["image"] == LOADTEST_IMAGE
    # The tfserving Service selects none of the load test's pods.
    tfserving = o["service.yaml"]["spec"]["selector"]
    for labels in (pod["metadata"]["labels"], workers["spec"]["template"]["metadata"]["labels"]):
        assert not tfserving.items() <= labels.items()
    # The Job reads the plan from the ConfigMap and expects every worker, against the Service.
    mounts = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert mounts["plan"]["configMap"]["name"] == config["metadata"]["name"]
    args = config["data"]["loadtest.args"].splitlines()
    assert args[args.index("--expect-workers") + 1] == "6"
    assert args[args.index("--arm") + 1] == "tfserving=mlp-serving.perf.svc.cluster.local:8500"
    assert job["spec"]["backoffLimit"] == 0 and pod["spec"]["restartPolicy"] == "Never"


def test_the_payload_fits_the_signature(base: Path, tmp_path: Path, mlp_export) -> None:  # type: ignore[no-untyped-def]
    result = deploy_k8s(base, tmp_path, "--loadtest", "--loadtest-image", LOADTEST_IMAGE)
    assert result.exit_code == 0, result.output
    config = objects(tmp_path)["loadtest-configmap.yaml"]
    npz = tmp_path / "payload.npz"
    npz.write_bytes(base64.b64decode(config["binaryData"]["payload.npz"]))
    inputs = load_payload(npz)  # what the master's --payload-file reads
    signature = signature_defs(mlp_export.version_dir)["serving_default"]
    for name, info in signature.inputs.items():
        spec = spec_from_tensor_info(name, info)
        assert inputs[name].dtype == spec.np_dtype
        assert list(inputs[name].shape[1:]) == [d for d in spec.shape[1:]]
        assert inputs[name].shape[0] == 1


def test_a_payload_over_a_configmap_is_refused(base: Path, tmp_path: Path) -> None:
    big = tmp_path / "big.npz"
    buffer = io.BytesIO()
    np.savez(buffer, x=np.zeros((1, 400_000), np.float32))  # 1.6 MB
    big.write_bytes(buffer.getvalue())
    result = deploy_k8s(base, tmp_path / "k8s", "--loadtest", "--loadtest-image", LOADTEST_IMAGE,
                        "--loadtest-payload", big)  # fmt: skip
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "1,600," in text and "a ConfigMap holds at most 1 MiB" in text


def test_the_loadtest_needs_an_image(base: Path, tmp_path: Path) -> None:
    result = deploy_k8s(base, tmp_path, "--loadtest")
    assert result.exit_code == 2, result.output
    assert "--loadtest-image" in " ".join(result.output.split())


def test_without_loadtest_its_files_go(base: Path, tmp_path: Path) -> None:
    assert (
        deploy_k8s(base, tmp_path, "--loadtest", "--loadtest-image", LOADTEST_IMAGE).exit_code == 0
    )
    assert deploy_k8s(base, tmp_path).exit_code == 0
    assert not list(tmp_path.glob("loadtest-*.yaml"))


@pytest.mark.slow
def test_the_masters_plan_runs_a_comparison_a_worker_joins(
    base: Path, tmp_path: Path, mlp_export
) -> None:  # type: ignore[no-untyped-def]
    """The Job's arguments, as the ConfigMap holds them, run for real: only the cluster's
    addresses and paths are swapped for loopback and tmp_path ones."""
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

    result = deploy_k8s(base, tmp_path / "k8s", "--loadtest", "--loadtest-image", LOADTEST_IMAGE,
                        "--loadtest-workers", "1", "--loadtest-users", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    config = objects(tmp_path / "k8s")["loadtest-configmap.yaml"]
    (tmp_path / "payload.npz").write_bytes(base64.b64decode(config["binaryData"]["payload.npz"]))
    args = config["data"]["loadtest.args"].splitlines()
    port = free_port()
    registry = ModelRegistry()
    registry.load_graph("mlp", mlp_export.model_dir)
    with ModelServer(registry, ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)) as server:
        swap = {
            "--arm": f"tfserving=127.0.0.1:{server.grpc_port}",
            "--payload-file": str(tmp_path / "payload.npz"),
            "--master-bind-host": "127.0.0.1",
            "--master-bind-port": str(port),
            "--out": str(tmp_path / "report"),
        }
        run = [swap.get(args[i - 1], a) if i else a for i, a in enumerate(args)]
        run += ["--warmup", "0.5s", "--window", "1s", "--min-windows", "2", "--max-windows", "2"]
        worker = subprocess.Popen(
            [sys.executable, "-m", "graphserve", "loadtest", "worker", "--master-host",
             "127.0.0.1", "--master-port", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            compared = CliRunner().invoke(app, ["loadtest", "compare", *run])
        finally:
            code = worker.wait(timeout=60)
    assert compared.exit_code == 0, compared.output
    assert code == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["settings"]["expect_workers"] == 1
    assert len(report["workers"]["nodes"]) == 1
    arm = report["steps"][0]["arms"]["tfserving"]
    assert arm["measured_requests"] > 0 and arm["failures"] == 0
