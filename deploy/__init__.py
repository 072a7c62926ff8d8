"""graphserve deploy: TensorFlow Serving GPU containers (docker compose) and Kubernetes manifests.

    from graphserve.deploy import ComposeOptions, TFServingSpec, deploy_tfserving, plan_serving

    serving = plan_serving(TFServingSpec(model_base_path=Path("models"), monitoring=True))
    result = deploy_tfserving(serving, ComposeOptions(gpus=1), timeout=300)

Importing this package imports neither TensorFlow nor docker; the functions do what they need.
"""

from graphserve.core.errors import (
    DeployError,
    DeployUsageError,
    DockerError,
    IncompatibleImageError,
    NoModelsError,
    NotAvailableError,
)
from graphserve.deploy.api import (
    ComposeResult,
    K8sResult,
    compose_down,
    deploy_tfserving,
    write_k8s,
)
from graphserve.deploy.compose import ComposeOptions
from graphserve.deploy.k8s import K8sOptions
from graphserve.deploy.plan import ServingPlan, TFServingSpec, plan_serving

__all__ = [
    "ComposeOptions",
    "ComposeResult",
    "DeployError",
    "DeployUsageError",
    "DockerError",
    "IncompatibleImageError",
    "K8sOptions",
    "K8sResult",
    "NoModelsError",
    "NotAvailableError",
    "ServingPlan",
    "TFServingSpec",
    "compose_down",
    "deploy_tfserving",
    "plan_serving",
    "write_k8s",
]
