"""What a peer is: the server a user would pick instead of ours, how it is installed, started,
called and read. One module per peer (tools/bench/peers/<name>.py) declares `PEER`; its server is a
script under tools/bench/peers/apps/ that runs in the peer's own virtual environment (never ours).

Every app script takes the same arguments and serves the SavedModel's `serving_default`
signature function, written the way the peer's own documentation shows:

    python APP --model-dir DIR --model-name NAME --http-port P [--grpc-port G]
               [--max-batch-size N --batch-timeout-ms T] [--info FILE]

`--max-batch-size 0` (the default) is batching off. `--info FILE`: the app writes a JSON object
there once it serves (what the harness needs to know, such as an access token). The model has one
input and one output (the bench's mlp and MobileNetV2); the app finds both from the signature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Peer", "Route"]

Inputs = dict[str, np.ndarray]  # input name -> array with the batch dimension (batch 1 here)


@dataclass(frozen=True)
class Route:
    """One way to call a peer: a protocol, the API it speaks, and its request and answer."""

    protocol: str  # "rest" or "grpc"
    api: str  # "tfserving" (TF Serving's), "v2" (KServe/Triton open inference), "own"
    label: str  # how tables name it: "REST (V1)", "gRPC (V2)", "REST"
    # REST: the path, formatted with {name} (the model name)
    path: str = ""
    # REST: (model name, inputs) -> the request body, the bytes a user's client would send
    encode: Callable[[str, Inputs], bytes] | None = None
    # REST: response body -> the output array (the model's single output, batch first)
    decode: Callable[[bytes], np.ndarray] | None = None
    content_type: str = "application/json"


@dataclass(frozen=True)
class Peer:
    """A server to compare with, and how to install and run it."""

    name: str  # "kserve": the module, the venv directory, the results' key
    title: str  # "KServe"
    distribution: str  # the PyPI distribution whose version the tables give
    requirements: tuple[str, ...]  # pip install arguments, besides tensorflow==(ours)
    app: str  # the script's file name under tools/bench/peers/apps/
    health_path: str  # GET http://127.0.0.1:{http_port}{health_path} -> 200 once it serves
    routes: tuple[Route, ...]
    batching: bool  # whether the peer batches concurrent requests itself
    grpc: bool = False  # whether the app takes --grpc-port
    interpreter: str | None = None  # make the venv from this Python (default: the bench's)
    note: str = ""  # one line for the table: how it was set up
    # Why Triton's perf_analyzer cannot drive its gRPC route ("": it can)
    no_perf_analyzer: str = ""
