"""LitServe: an `ls.LitAPI` subclass (setup / decode_request / predict / encode_response, batch /
unbatch) under `ls.LitServer` — a main process, a multiprocessing manager, one spawned inference
worker and one uvicorn API-server process, requests handed over through a queue. Its REST body is
its own: `{"input": rows}` in, `{"output": rows}` out."""

from __future__ import annotations

import json

import numpy as np

from tools.bench.peers.base import Inputs, Peer, Route


def encode(_name: str, inputs: Inputs) -> bytes:
    """`{"input": rows}`: the one input, batch first, as `decode_request` reads it."""
    ((_, array),) = inputs.items()
    return json.dumps({"input": array.tolist()}).encode()


def decode(body: bytes) -> np.ndarray:
    """`{"output": rows}` as `encode_response` writes it."""
    return np.asarray(json.loads(body)["output"], dtype=np.float32)


PEER = Peer(
    name="litserve",
    title="LitServe",
    distribution="litserve",
    requirements=("litserve",),
    app="litserve_app.py",
    health_path="/health",
    routes=(Route("rest", "own", "REST", "/predict", encode, decode),),
    batching=True,
    note=(
        "ls.LitAPI + ls.LitServer(accelerator=cpu, workers_per_device=1): 1 inference worker, "
        "1 uvicorn API process; batching: LitAPI(max_batch_size=16, batch_timeout=0.004 s)"
    ),
)
