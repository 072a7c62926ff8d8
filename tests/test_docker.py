"""The TF Serving GPU compose file: validated here; brought up only where docker runs."""

import subprocess
from pathlib import Path

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parent.parent / "docker" / "compose.yaml"


def test_compose_runs_tf_serving_gpu_with_the_model_base_path_mounted() -> None:
    project = yaml.safe_load(COMPOSE.read_text())
    service = project["services"]["tfserving"]
    assert service["image"].startswith("${TFSERVING_IMAGE:-tensorflow/serving:")
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


@pytest.mark.docker
def test_docker_compose_accepts_the_file() -> None:
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
