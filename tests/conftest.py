"""Shared fixtures: a real exported MLP and real graph and eager servers on loopback.

Servers run in this process on ephemeral ports (port 0), so tests can run in parallel sessions.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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


@pytest.fixture(scope="session")
def mlp_export(tmp_path_factory: pytest.TempPathFactory) -> MlpExport:
    from exporter import ExportSpec, export_model

    base = tmp_path_factory.mktemp("models")
    result = export_model(ExportSpec(source="examples:mlp", name="mlp", base_path=base))
    return MlpExport(base_path=base, model_dir=base / "mlp", version_dir=result.path)


@pytest.fixture(scope="session")
def mlp_servers(mlp_export: MlpExport) -> Iterator[Servers]:
    from serving import ModelRegistry, ModelServer, ServerOptions

    graph_registry = ModelRegistry()
    graph_registry.load_graph("mlp", mlp_export.model_dir)
    eager_registry = ModelRegistry()
    eager_registry.load_eager("mlp", "examples:mlp")
    ephemeral = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with (
        ModelServer(graph_registry, ephemeral) as graph,
        ModelServer(eager_registry, ephemeral) as eager,
    ):
        yield Servers(
            model_name="mlp",
            graph_grpc=f"127.0.0.1:{graph.grpc_port}",
            graph_rest=f"127.0.0.1:{graph.rest_port}",
            eager_grpc=f"127.0.0.1:{eager.grpc_port}",
            eager_rest=f"127.0.0.1:{eager.rest_port}",
        )
