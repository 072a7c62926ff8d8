"""BentoML: a `@bentoml.service` class with one `@bentoml.api` numpy method (adaptive batching
when on), run by `bentoml.serve` — a circus arbiter plus one worker process (in a session of its
own: it goes on SIGTERM to the arbiter). Its REST body is its own: the API method's parameters as
JSON keys, `{"instances": [[...]]}` in, the returned array as a JSON list out."""

from __future__ import annotations

import json

import numpy as np

from tools.bench.peers.base import Peer, Route
from tools.bench.peers.bodies import tfserving_encode


def decode(body: bytes) -> np.ndarray:
    """The returned `np.ndarray`, serialised by BentoML as a (nested) JSON list."""
    return np.asarray(json.loads(body), dtype=np.float32)


PEER = Peer(
    name="bentoml",
    title="BentoML",
    distribution="bentoml",
    requirements=("bentoml",),
    app="bentoml_app.py",
    health_path="/readyz",
    # The API method's parameter by name, `{"instances": rows}`: TF Serving's row body, by chance.
    routes=(Route("rest", "own", "REST", "/predict", tfserving_encode, decode),),
    batching=True,
    note=(
        "@bentoml.service (workers=1) + @bentoml.api numpy predict, bentoml.serve; batching: "
        "batchable, max_batch_size=16, max_latency_ms left at 60 s (a latency budget that "
        "503s, not a queue delay: its CORK dispatcher picks the window)"
    ),
)
