from pathlib import Path

from graphserve.serving import ServeConfig, ServerOptions, build_server
from graphserve.serving.config import ModelConfig

config = ServeConfig(
    # or, the Python model run eagerly: eager=(EagerModel("mlp", "examples:mlp"),)
    models=(ModelConfig("mlp", Path("models/mlp")),),
    options=ServerOptions(grpc_port=0, rest_port=0),  # 0: a free port each
    file_system_poll_seconds=1.0,
)
with build_server(config) as server:  # loaded by build_server, listening inside `with`
    print(server.grpc_port, server.rest_port)
