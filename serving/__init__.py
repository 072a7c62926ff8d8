"""graphserve's servers: one TF Serving-compatible server (gRPC and REST) with two runners.

    from graphserve.serving import ServeConfig, ServerOptions, build_server
    from graphserve.serving.config import ModelConfig

    config = ServeConfig(models=(ModelConfig("mlp", Path("models/mlp")),),
                         options=ServerOptions(grpc_port=0, rest_port=0))
    with build_server(config) as server:  # or ServeConfig(eager=(EagerModel(...),))
        ...

Importing this package is light; TensorFlow is imported by the modules that need it.
"""

from typing import TYPE_CHECKING, Any

__all__ = [
    "EagerModel",
    "ModelLoadError",
    "ModelRegistry",
    "ModelServer",
    "ServeConfig",
    "ServerOptions",
    "build_server",
]

if TYPE_CHECKING:
    from graphserve.serving.build import EagerModel, ServeConfig, build_server
    from graphserve.serving.registry import ModelLoadError, ModelRegistry
    from graphserve.serving.server import ModelServer, ServerOptions


def __getattr__(name: str) -> Any:
    # Lazy: `graphserve --help` imports graphserve.serving.cli, which must not pull TensorFlow in.
    if name in ("ModelLoadError", "ModelRegistry"):
        from graphserve.serving import registry

        return getattr(registry, name)
    if name in ("EagerModel", "ServeConfig", "build_server"):
        from graphserve.serving import build

        return getattr(build, name)
    if name in ("ModelServer", "ServerOptions"):
        from graphserve.serving import server

        return getattr(server, name)
    raise AttributeError(f"module 'serving' has no attribute {name!r}")
