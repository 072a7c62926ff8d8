"""PyTriton: NVIDIA's Triton Inference Server (its C++ HTTP/gRPC front end and dynamic batcher,
shipped in the wheel) around a Python `@batch` infer function that calls the SavedModel."""

from __future__ import annotations

from tools.bench.peers.base import Peer, Route
from tools.bench.peers.bodies import v2_decode, v2_encode

PEER = Peer(
    name="pytriton",
    title="PyTriton",
    distribution="nvidia-pytriton",
    # Unpinned, pip may pick numpy 2 and backtrack to nvidia-pytriton 0.5.7 (no numpy<2 pin, no
    # access token); 0.7 needs numpy<2, which TensorFlow 2.21 accepts (numpy>=1.26).
    requirements=("nvidia-pytriton>=0.7",),
    app="pytriton_app.py",
    health_path="/v2/models/{name}/ready",
    routes=(
        Route("rest", "v2", "REST (V2)", "/v2/models/{name}/infer", v2_encode, v2_decode),
        Route("grpc", "v2", "gRPC (V2)"),
    ),
    batching=True,
    grpc=True,
    # The wheel's Python backend stub links Debian's libpython3.11 (package libpython3.11) and
    # fails under pyenv's 3.11.7; a venv from Debian's own python3.11 works.
    interpreter="/usr/bin/python3.11",
    note=(
        "wheel's tritonserver (HTTP+gRPC) and Python backend stub, @batch infer function in the "
        "app process; on: DynamicBatcher(4 ms), max_batch_size 16; off: no dynamic batcher"
    ),
)
