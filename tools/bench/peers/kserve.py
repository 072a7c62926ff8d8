"""KServe: its Python model server (`kserve.ModelServer`, FastAPI/uvicorn REST + grpc.aio gRPC)
around a `kserve.Model` subclass that calls the SavedModel; V1 (TF Serving's body) and V2 REST,
V2 gRPC. The model server has no batcher of its own: KServe's batcher is the agent sidecar that
an InferenceService on Kubernetes gets, not part of the Python package."""

from __future__ import annotations

from tools.bench.peers.base import Peer, Route
from tools.bench.peers.bodies import tfserving_decode, tfserving_encode, v2_decode, v2_encode

V1_PATH = "/v1/models/{name}:predict"  # TF Serving's REST predict

PEER = Peer(
    name="kserve",
    title="KServe",
    distribution="kserve",
    requirements=("kserve",),
    app="kserve_app.py",
    health_path="/v2/models/{name}/ready",
    routes=(
        Route("rest", "tfserving", "REST (V1)", V1_PATH, tfserving_encode, tfserving_decode),
        Route("rest", "v2", "REST (V2)", "/v2/models/{name}/infer", v2_encode, v2_decode),
        Route("grpc", "v2", "gRPC (V2)"),
    ),
    batching=False,
    grpc=True,
    note="kserve.Model with a sync predict, ModelServer: 1 uvicorn worker + gRPC, no batcher",
    no_perf_analyzer="perf_analyzer asks for the model config first; KServe's V2 gRPC has no "
    "ModelConfig ('Method not found') and its REST no /config (404)",
)
