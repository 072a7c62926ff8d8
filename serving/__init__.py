"""graphserve's servers: one TF Serving-compatible server (gRPC and REST) with two runners.

    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
    registry = ModelRegistry()
    registry.load_graph("mlp", Path("models/mlp"))  # or .load_eager("mlp", "examples:mlp")
    with ModelServer(registry, ServerOptions(grpc_port=0, rest_port=0)) as server:
        ...

Importing this package is light; TensorFlow is imported by the modules that need it.
"""

from typing import TYPE_CHECKING, Any

__all__ = ["ModelLoadError", "ModelRegistry", "ModelServer", "ServerOptions"]

if TYPE_CHECKING:
    from graphserve.serving.registry import ModelLoadError, ModelRegistry
    from graphserve.serving.server import ModelServer, ServerOptions


def __getattr__(name: str) -> Any:
    # Lazy: `graphserve --help` imports graphserve.serving.cli, which must not pull TensorFlow in.
    if name in ("ModelLoadError", "ModelRegistry"):
        from graphserve.serving import registry

        return getattr(registry, name)
    if name in ("ModelServer", "ServerOptions"):
        from graphserve.serving import server

        return getattr(server, name)
    raise AttributeError(f"module 'serving' has no attribute {name!r}")
