"""`build_server(ServeConfig)`, the way scripts and the CLI assemble a server: it loads, serves
over both front ends, and closes every runner when it stops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from graphserve.core import client
from graphserve.core.batchingparams import BatchingParameters
from graphserve.core.errors import ModelLoadError, Unavailable
from graphserve.model.examples import mlp
from graphserve.serving import EagerModel, ServeConfig, ServerOptions, build_server
from graphserve.serving.config import ModelConfig

EPHEMERAL = ServerOptions(grpc_port=0, rest_port=0)
X = np.random.default_rng(3).normal(size=(2, 784)).astype(np.float32)


@pytest.mark.parametrize("kind", ["graph", "eager"])
def test_build_server_serves_and_closes_its_runners_at_stop(mlp_export: Any, kind: str) -> None:
    config = (
        ServeConfig(models=(ModelConfig("mlp", mlp_export.model_dir),), options=EPHEMERAL)
        if kind == "graph"
        else ServeConfig(eager=(EagerModel("mlp", "examples:mlp"),), options=EPHEMERAL)
    )
    config = ServeConfig(**{**config.__dict__, "batching": BatchingParameters()})
    server = build_server(config)
    runner = server.registry.get("mlp").runner
    with server:
        with client.GrpcClient.connect(f"127.0.0.1:{server.grpc_port}") as grpc_client:
            response = grpc_client.predict(client.predict_request("mlp", {"images": X}))
        (logits,) = client.predict_outputs(response).values()
        np.testing.assert_allclose(logits, mlp.build()(X).numpy(), atol=1e-5)
        assert runner.kind == kind
    # Stopped: the batching wrapper and what it wraps are closed.
    with pytest.raises(Unavailable):
        runner.run("serving_default", {"images": X})
    if kind == "graph":  # ... and the Session under it is freed
        with pytest.raises(Unavailable, match="unloaded"):
            runner.runner.run("serving_default", {"images": X})


def test_build_server_refuses_a_model_with_nothing_to_load(tmp_path: Any) -> None:
    config = ServeConfig(models=(ModelConfig("m", tmp_path / "absent"),), options=EPHEMERAL)
    with pytest.raises(ModelLoadError, match=r"base path .*absent does not exist"):
        build_server(config)


def test_serve_config_takes_one_kind_of_model(mlp_export: Any) -> None:
    with pytest.raises(ValueError, match=r"SavedModels .* or Python sources"):
        build_server(ServeConfig(options=EPHEMERAL))
