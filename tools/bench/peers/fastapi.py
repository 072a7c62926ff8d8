"""FastAPI + uvicorn: the server users write themselves, a pydantic request model and a plain
`def` endpoint (run in FastAPI's threadpool) calling the SavedModel loaded at start-up, on TF
Serving's REST predict body. No batching."""

from __future__ import annotations

from tools.bench.peers.base import Peer, Route
from tools.bench.peers.bodies import tfserving_decode, tfserving_encode

V1_PATH = "/v1/models/{name}:predict"  # TF Serving's REST predict

PEER = Peer(
    name="fastapi",
    title="FastAPI + uvicorn",
    distribution="fastapi",
    requirements=("fastapi", "uvicorn[standard]"),
    app="fastapi_app.py",
    health_path="/health",
    routes=(Route("rest", "tfserving", "REST", V1_PATH, tfserving_encode, tfserving_decode),),
    batching=False,
    note="pydantic models, sync def endpoint in FastAPI's threadpool, 1 uvicorn worker, no batcher",
)
