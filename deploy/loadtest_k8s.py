"""The load test of a TF Serving deployment on Kubernetes (`graphserve deploy k8s --loadtest`).

OUT/loadtest-configmap.yaml   the plan (`loadtest.args`: the compare command's arguments) and
                              the payload (`payload.npz`, binaryData), mounted at /loadtest
OUT/loadtest-master.yaml      a Job: `graphserve loadtest compare --expect-workers N` against
                              the TF Serving Service, the report written to /reports
OUT/loadtest-service.yaml     ClusterIP on locust's master port, so workers find the master
OUT/loadtest-workers.yaml     a Deployment of N `graphserve loadtest worker` pods, CPU requested

The workers get the plan and the request from the master over locust's messaging; only the
master reads the ConfigMap. The report stays in the master pod after the run, `--linger` long,
for `kubectl cp` (or lives on a PersistentVolumeClaim with --loadtest-report-pvc). The payload is
built here from the newest version's serving signature (the seed is fixed), so the load is
reproducible; it must fit a ConfigMap (1 MiB with everything else).
"""

from __future__ import annotations

import base64
import io
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphserve.core.errors import DeployUsageError
from graphserve.deploy.plan import CONTAINER_GRPC_PORT, CONTAINER_REST_PORT, ServingPlan

__all__ = ["LOADTEST_FILES", "LoadTestOptions", "loadtest_manifests", "payload_npz"]

LOADTEST_FILES = (
    "loadtest-configmap.yaml",
    "loadtest-master.yaml",
    "loadtest-service.yaml",
    "loadtest-workers.yaml",
)
MASTER_PORT = 5557  # locust's own default
CONFIGMAP_LIMIT = 1024 * 1024  # Kubernetes refuses a ConfigMap over 1 MiB
_PLAN_DIR = "/loadtest"
_REPORTS_DIR = "/reports"


@dataclass(frozen=True)
class LoadTestOptions:
    image: str  # holds graphserve (docker/ builds one)
    workers: int = 2
    users: str = "1,4,16,64"
    protocol: str = "grpc"
    window: str = "5s"
    worker_cpu: str = "1"
    worker_memory: str = "1Gi"
    payload: Path | None = None  # an .npz of inputs; default: built from the signature
    report_pvc: str | None = None  # else the report stays in the master pod for `linger`
    linger: str = "1h"
    workers_timeout: str = "10m"

    def validate(self) -> None:
        if self.workers < 1:
            raise DeployUsageError(f"--loadtest-workers {self.workers}: expected at least 1")
        if self.protocol not in ("grpc", "rest"):
            raise DeployUsageError(f"--loadtest-protocol {self.protocol!r}: expected grpc or rest")
        if not self.image:
            raise DeployUsageError(
                "--loadtest needs --loadtest-image: an image with graphserve installed (build "
                "one from docker/ and push it where the cluster pulls from)"
            )


def payload_npz(plan: ServingPlan, payload: Path | None, signature: str) -> bytes:
    """The request inputs as an .npz (what `loadtest compare --payload-file` reads).

    Raises DeployUsageError for a signature with string inputs (pass --loadtest-payload, e.g.
    a comparison's OUT/payload.npz) or a model without versions.
    """
    if payload is not None:
        return payload.read_bytes()
    from graphserve.core.inputs import sample_inputs
    from graphserve.core.savedmodel import signature_defs
    from graphserve.core.signature import spec_from_tensor_info
    from graphserve.core.versions import version_dirs

    model = plan.models[0]
    dirs = version_dirs(model.host_path)
    if not dirs:
        raise DeployUsageError(f"{model.host_path} holds no version to build a payload from")
    signatures = signature_defs(dirs[max(dirs)])
    if signature not in signatures:
        raise DeployUsageError(
            f"signature {signature!r} is not in {dirs[max(dirs)]}: {', '.join(sorted(signatures))}"
        )
    specs = [spec_from_tensor_info(k, v) for k, v in sorted(signatures[signature].inputs.items())]
    strings = [spec.name for spec in specs if spec.dtype == "string"]
    if strings:
        raise DeployUsageError(
            f"inputs {strings} are strings: pass --loadtest-payload FILE.npz (a comparison's "
            "OUT/payload.npz, or `graphserve loadtest compare` writes one)"
        )
    buffer = io.BytesIO()
    np.savez(buffer, **sample_inputs(specs, batch_size=1, seed=0))  # type: ignore[arg-type]
    return buffer.getvalue()


def loadtest_manifests(
    plan: ServingPlan,
    options: LoadTestOptions,
    name: str,
    namespace: str,
    metadata: Any,
    signature: str = "serving_default",
) -> dict[str, dict[str, Any]]:
    """The load test's objects by file name; `metadata(name)` gives each its metadata."""
    options.validate()
    npz = payload_npz(plan, options.payload, signature)
    encoded = base64.b64encode(npz).decode()
    if len(encoded) > CONFIGMAP_LIMIT - 4096:
        raise DeployUsageError(
            f"the payload is {len(npz):,} bytes ({len(encoded):,} in base64): a ConfigMap holds "
            f"at most 1 MiB. Use a smaller batch or input, or put it on a volume"
        )
    master = f"{name}-loadtest-master"
    port = CONTAINER_GRPC_PORT if options.protocol == "grpc" else CONTAINER_REST_PORT
    target = f"{name}.{namespace}.svc.cluster.local:{port}"
    args = [
        "--arm", f"tfserving={target}",
        "--model-name", plan.models[0].name,
        "--signature-name", signature,
        "--protocol", options.protocol,
        "--users", options.users,
        "--window", options.window,
        "--payload-file", f"{_PLAN_DIR}/payload.npz",
        "--expect-workers", str(options.workers),
        "--workers-timeout", options.workers_timeout,
        "--master-bind-host", "0.0.0.0",
        "--master-bind-port", str(MASTER_PORT),
        "--allow-remote",
        "--out", f"{_REPORTS_DIR}/report",
    ]  # fmt: skip
    return {
        "loadtest-configmap.yaml": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(f"{name}-loadtest"),
            "data": {"loadtest.args": "\n".join(args) + "\n"},
            "binaryData": {"payload.npz": encoded},
        },
        "loadtest-master.yaml": _master_job(options, master, name, metadata),
        "loadtest-service.yaml": {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(master),
            "spec": {
                "type": "ClusterIP",
                "selector": {"app.kubernetes.io/name": master},
                "ports": [{"name": "locust", "port": MASTER_PORT, "targetPort": "locust"}],
            },
        },
        "loadtest-workers.yaml": _workers(options, name, namespace, master, metadata),
    }


def _master_job(options: LoadTestOptions, master: str, name: str, metadata: Any) -> dict[str, Any]:
    # The arguments come from the ConfigMap, one per line, so they need no shell quoting; the
    # pod keeps the report for `kubectl cp` until `linger` ends (or on the claim).
    linger = shlex.quote(_seconds(options.linger))
    script = (
        f"set -u; mkdir -p {_REPORTS_DIR}/report; "
        f"mapfile -t args < {_PLAN_DIR}/loadtest.args; "
        'graphserve loadtest compare "${args[@]}"; code=$?; '
        f"echo $code > {_REPORTS_DIR}/report/exit-code; "
        f"echo 'report in {_REPORTS_DIR}/report (kubectl cp)'; sleep {linger}; exit $code"
    )
    reports: dict[str, Any] = (
        {"name": "reports", "persistentVolumeClaim": {"claimName": options.report_pvc}}
        if options.report_pvc
        else {"name": "reports", "emptyDir": {}}
    )
    labels = {"app.kubernetes.io/name": master, "app.kubernetes.io/part-of": name}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(master),
        "spec": {
            "backoffLimit": 0,  # a failed comparison is a result, not something to retry
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "master",
                            "image": options.image,
                            "command": ["bash", "-c", script],
                            "ports": [
                                {"name": "locust", "containerPort": MASTER_PORT, "protocol": "TCP"}
                            ],
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                            "volumeMounts": [
                                {"name": "plan", "mountPath": _PLAN_DIR, "readOnly": True},
                                {"name": "reports", "mountPath": _REPORTS_DIR},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "plan", "configMap": {"name": f"{name}-loadtest"}},
                        reports,
                    ],
                },
            },
        },
    }


def _workers(
    options: LoadTestOptions, name: str, namespace: str, master: str, metadata: Any
) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": f"{name}-loadtest-worker"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(f"{name}-loadtest-worker"),
        "spec": {
            "replicas": options.workers,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": {**labels, "app.kubernetes.io/part-of": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "worker",
                            "image": options.image,
                            "command": ["graphserve", "loadtest", "worker"],
                            "args": [
                                "--master-host",
                                f"{master}.{namespace}.svc.cluster.local",
                                "--master-port",
                                str(MASTER_PORT),
                                "--allow-remote",  # the TF Serving Service is another pod
                            ],
                            "resources": {
                                "requests": {
                                    "cpu": options.worker_cpu,
                                    "memory": options.worker_memory,
                                },
                                # one locust process uses one core: more CPU would sit idle
                                "limits": {"cpu": options.worker_cpu},
                            },
                        }
                    ],
                },
            },
        },
    }


def _seconds(duration: str) -> str:
    """`sleep`'s argument for a duration like 1h, 30m, 90s, 90."""
    units = {"h": 3600, "m": 60, "s": 1}
    text = duration.strip()
    unit = units.get(text[-1:])
    number = text[:-1] if unit else text
    if not number.isdigit():
        raise DeployUsageError(f"--loadtest-linger {duration!r}: expected e.g. 1h, 30m or 90s")
    return str(int(number) * (unit or 1))
