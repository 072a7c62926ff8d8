"""Kubernetes manifests for TF Serving replicas on GPU nodes, rendered from a ServingPlan.

OUT/configmap.yaml    models.config (+ batching.config, monitoring.config), mounted at /config
OUT/secret.yaml       with --ssl-config-file, the file (it holds a private key: written 0600,
                      keep it out of version control), mounted at /ssl, --ssl_config_file passed
OUT/deployment.yaml   the TF Serving pods: `nvidia.com/gpu` limits, models at /models (read-only)
OUT/service.yaml      ClusterIP: 8500 grpc, 8501 http
OUT/hpa.yaml          autoscaling/v2 on CPU utilisation (with --hpa)
OUT/loadtest-*.yaml   with --loadtest, the load test of this deployment (deploy/loadtest_k8s.py)

Applying is yours: `kubectl apply -f OUT/`. The probes:
- readiness: HTTP GET /v1/models/NAME/metadata on 8501. TF Serving answers it 200 only while a
  version of NAME is loaded and serving; model status (/v1/models/NAME) answers 200 as soon as
  a version is known, LOADING included. TF Serving opens its ports only once every model of its
  initial config has loaded, so probing the first model speaks for all of them at start.
- liveness and startup: a TCP connect to 8500. TF Serving implements no grpc.health.v1 service,
  which Kubernetes' `grpc` probe needs. The startup probe allows 10 minutes for loading before
  liveness starts counting.
With an SSL config the probes stay as they are: a TCP connect needs no handshake (and the
`grpc` probe, which has no TLS, would not do), and TF Serving's REST port has no TLS
(tensorflow/serving#1503), so the readiness GET reads it in plaintext as before.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphserve.core.client import rest_path
from graphserve.core.errors import DeployUsageError
from graphserve.deploy.config import (
    CONTAINER_CONFIG_DIR,
    CONTAINER_MODELS_DIR,
    CONTAINER_SSL_DIR,
    MONITORING_CONFIG,
    PROMETHEUS_PATH,
    SSL_CONFIG,
)
from graphserve.deploy.files import dump_yaml, write_atomic
from graphserve.deploy.loadtest_k8s import LOADTEST_FILES, LoadTestOptions, loadtest_manifests
from graphserve.deploy.plan import CONTAINER_GRPC_PORT, CONTAINER_REST_PORT, ServingPlan

__all__ = ["MANIFEST_FILES", "K8sOptions", "manifests", "write_manifests"]

MANIFEST_FILES = (
    "configmap.yaml",
    "secret.yaml",
    "deployment.yaml",
    "service.yaml",
    "hpa.yaml",
    *LOADTEST_FILES,
)
_SECRET_FILES = frozenset({"secret.yaml"})  # written readable by their owner only
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_QUANTITY = re.compile(r"^\d+(\.\d+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$")


@dataclass(frozen=True)
class K8sOptions:
    """How the manifests run a plan: where they are written, the Deployment's name, namespace,
    replicas and GPUs per pod, where the pods find the models (a PersistentVolumeClaim, else a
    hostPath: the plan's model base path by default), the resource requests, a
    HorizontalPodAutoscaler on CPU with `hpa`, and with `loadtest` the deployment's load test."""

    out_dir: Path = Path("k8s")
    name: str = "tfserving"
    namespace: str = "default"
    replicas: int = 2
    gpus: int = 1  # nvidia.com/gpu per pod; 0: none
    model_pvc: str | None = None  # a PersistentVolumeClaim holding BASE's layout
    model_host_path: Path | None = None  # else a hostPath (default: the model base path)
    hpa: bool = False
    min_replicas: int = 1
    max_replicas: int = 8
    target_cpu: int = 70  # average CPU utilisation, percent of the request
    cpu_request: str = "1"
    memory_request: str = "2Gi"
    loadtest: LoadTestOptions | None = None  # also write the load test of this deployment

    def validate(self) -> None:
        """Raises DeployUsageError for names, counts or quantities Kubernetes would refuse."""
        for flag, value in (("--name", self.name), ("--namespace", self.namespace)):
            if not _DNS_LABEL.match(value):
                raise DeployUsageError(
                    f"{flag} {value!r}: expected a DNS label (lowercase letters, digits, '-')"
                )
        if self.model_pvc is not None and self.model_host_path is not None:
            raise DeployUsageError("--model-pvc and --model-host-path exclude each other")
        if self.replicas < 1 or self.gpus < 0:
            raise DeployUsageError("--replicas must be at least 1 and --gpus at least 0")
        if self.hpa and not 1 <= self.min_replicas <= self.max_replicas:
            raise DeployUsageError(
                f"--min-replicas {self.min_replicas} / --max-replicas {self.max_replicas}: "
                "expected 1 <= min <= max"
            )
        if not 1 <= self.target_cpu <= 100:
            raise DeployUsageError(f"--target-cpu {self.target_cpu}: expected 1..100 (percent)")
        for flag, value in (
            ("--cpu-request", self.cpu_request),
            ("--memory-request", self.memory_request),
        ):
            if not _QUANTITY.match(value):
                raise DeployUsageError(f"{flag} {value!r}: expected a quantity such as 500m, 2Gi")
        if self.loadtest is not None:
            self.loadtest.validate()
            for flag, value in (
                ("--loadtest-worker-cpu", self.loadtest.worker_cpu),
                ("--loadtest-worker-memory", self.loadtest.worker_memory),
            ):
                if not _QUANTITY.match(value):
                    raise DeployUsageError(f"{flag} {value!r}: expected a quantity such as 1, 2Gi")


def _metadata(options: K8sOptions, name: str, component: str = "tfserving") -> dict[str, Any]:
    return {
        "name": name,
        "namespace": options.namespace,
        "labels": {
            "app.kubernetes.io/name": options.name,
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/managed-by": "graphserve",
        },
    }


def _models_volume(plan: ServingPlan, options: K8sOptions) -> dict[str, Any]:
    if options.model_pvc is not None:
        return {
            "name": "models",
            "persistentVolumeClaim": {"claimName": options.model_pvc, "readOnly": True},
        }
    host_path = options.model_host_path or plan.base_path
    return {"name": "models", "hostPath": {"path": str(host_path), "type": "Directory"}}


def _escape_args(args: tuple[str, ...]) -> list[str]:
    # Kubernetes expands $(VAR) in args; $$( keeps a literal one.
    return [a.replace("$(", "$$(") for a in args]


def _container(plan: ServingPlan, options: K8sOptions) -> dict[str, Any]:
    readiness_path = rest_path(plan.models[0].name, "metadata")
    resources: dict[str, Any] = {
        "requests": {"cpu": options.cpu_request, "memory": options.memory_request}
    }
    if options.gpus:
        resources["limits"] = {"nvidia.com/gpu": options.gpus}
    mounts = [{"name": "models", "mountPath": str(CONTAINER_MODELS_DIR), "readOnly": True}]
    if plan.config_files:
        mounts.append({"name": "config", "mountPath": str(CONTAINER_CONFIG_DIR), "readOnly": True})
    if plan.ssl_config_file is not None:
        mounts.append({"name": "tls", "mountPath": str(CONTAINER_SSL_DIR), "readOnly": True})
    grpc_check = {"tcpSocket": {"port": "grpc"}}
    return {
        "name": "tfserving",
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["tensorflow_model_server"],  # the image's script would add its own flags
        "args": _escape_args(plan.args),
        "ports": [
            {"name": "grpc", "containerPort": CONTAINER_GRPC_PORT, "protocol": "TCP"},
            {"name": "http", "containerPort": CONTAINER_REST_PORT, "protocol": "TCP"},
        ],
        "resources": resources,
        "volumeMounts": mounts,
        "startupProbe": {**grpc_check, "periodSeconds": 5, "failureThreshold": 120},
        "readinessProbe": {
            "httpGet": {"path": readiness_path, "port": "http"},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
        "livenessProbe": {**grpc_check, "periodSeconds": 10, "failureThreshold": 3},
    }


def _deployment(plan: ServingPlan, options: K8sOptions) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": options.name}
    # A changed config rolls the pods: TF Serving re-reads models.config by itself, but reads
    # the batching, monitoring and SSL files only at start.
    hashed = repr(sorted(plan.config_files.items())).encode()
    if plan.ssl_config_file is not None:
        hashed += plan.ssl_config_file.read_bytes()
    digest = hashlib.sha256(hashed).hexdigest()[:16]
    annotations = {"graphserve/config-sha256": digest}
    if MONITORING_CONFIG in plan.config_files:
        annotations |= {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(CONTAINER_REST_PORT),
            "prometheus.io/path": PROMETHEUS_PATH,
        }
    volumes = [_models_volume(plan, options)]
    if plan.config_files:
        volumes.append({"name": "config", "configMap": {"name": f"{options.name}-config"}})
    if plan.ssl_config_file is not None:
        secret = {"secretName": _secret_name(options), "defaultMode": 0o400}
        volumes.append({"name": "tls", "secret": secret})
    spec: dict[str, Any] = {}
    if not options.hpa:  # with an HPA, a replicas field would reset its count on every apply
        spec["replicas"] = options.replicas
    spec |= {
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": _metadata(options, "")["labels"], "annotations": annotations},
            "spec": {"containers": [_container(plan, options)], "volumes": volumes},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(options, options.name),
        "spec": spec,
    }


def _secret_name(options: K8sOptions) -> str:
    return f"{options.name}-tls"


def _secret(ssl_config_file: Path, options: K8sOptions) -> dict[str, Any]:
    """The SSL config as a Secret, under the file name --ssl_config_file names in /ssl."""
    data = base64.b64encode(ssl_config_file.read_bytes()).decode("ascii")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(options, _secret_name(options)),
        "type": "Opaque",
        "data": {SSL_CONFIG: data},
    }


def _service(options: K8sOptions) -> dict[str, Any]:
    # ClusterIP balances connections, not requests: a client's long-lived gRPC channel stays on
    # one pod. Spread load with several channels, client-side balancing or a mesh.
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(options, options.name),
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/name": options.name},
            "ports": [
                {"name": "grpc", "port": CONTAINER_GRPC_PORT, "targetPort": "grpc"},
                {"name": "http", "port": CONTAINER_REST_PORT, "targetPort": "http"},
            ],
        },
    }


def _hpa(options: K8sOptions) -> dict[str, Any]:
    # CPU is a proxy: a GPU-bound server may scale late. GPU utilisation needs the DCGM exporter
    # and a custom-metrics adapter, which this file cannot assume.
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(options, options.name),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": options.name},
            "minReplicas": options.min_replicas,
            "maxReplicas": options.max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": options.target_cpu},
                    },
                }
            ],
        },
    }


def manifests(plan: ServingPlan, options: K8sOptions) -> dict[str, dict[str, Any]]:
    """The objects to write, by file name. Raises DeployUsageError as K8sOptions.validate, and
    for a load test of a TLS deployment (its pods do not dial TLS)."""
    options.validate()
    if plan.tls and options.loadtest is not None:
        raise DeployUsageError(
            "--loadtest with --ssl-config-file: the load test's pods dial TF Serving without "
            "TLS; write the load test for a deployment without --ssl-config-file"
        )
    objects: dict[str, dict[str, Any]] = {}
    if plan.config_files:
        objects["configmap.yaml"] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _metadata(options, f"{options.name}-config"),
            "data": dict(sorted(plan.config_files.items())),
        }
    if plan.ssl_config_file is not None:
        objects["secret.yaml"] = _secret(plan.ssl_config_file, options)
    objects["deployment.yaml"] = _deployment(plan, options)
    objects["service.yaml"] = _service(options)
    if options.hpa:
        objects["hpa.yaml"] = _hpa(options)
    if options.loadtest is not None:
        objects |= loadtest_manifests(
            plan,
            options.loadtest,
            options.name,
            options.namespace,
            lambda name: _metadata(options, name, "loadtest"),
        )
    return objects


def write_manifests(plan: ServingPlan, options: K8sOptions) -> list[Path]:
    """Write the manifests into options.out_dir, one object per file; returns their paths.

    A configmap.yaml, secret.yaml, hpa.yaml or loadtest-*.yaml an earlier run wrote and this
    one does not is removed, so `kubectl apply -f OUT/` applies exactly this set. secret.yaml
    (the SSL config, a private key in it) is readable by its owner only.
    """
    objects = manifests(plan, options)
    written = []
    for name in MANIFEST_FILES:
        path = options.out_dir / name
        if name not in objects:
            path.unlink(missing_ok=True)
            continue
        header = (
            f"# Generated by graphserve deploy k8s. Apply: kubectl apply -f {options.out_dir}\n"
        )
        if name in _SECRET_FILES:
            header += "# It holds a private key: keep it out of version control.\n"
        body = dump_yaml(objects[name])
        write_atomic(path, header + body, mode=0o600 if name in _SECRET_FILES else 0o644)
        written.append(path)
    return written
