"""The REST front end at the socket level: one write per response, so no Nagle/delayed-ACK
stall between headers and body; and the gRPC threads the server starts warmed."""

from __future__ import annotations

import json
import socket
import threading

from tests.conftest import Servers


def test_a_response_arrives_whole_in_one_read(mlp_servers: Servers) -> None:
    host, port = mlp_servers.graph_rest.rsplit(":", 1)
    body = json.dumps({"instances": [[0.5] * 784]}).encode()
    request = (
        f"POST /v1/models/mlp:predict HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for _ in range(3):  # keep-alive: every response on the connection, not just the first
            sock.sendall(request)
            data = sock.recv(1 << 20)  # what has arrived when the first bytes do
            head, _, payload = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )  # fmt: skip
            assert len(payload) == length, "headers and body came in separate writes"
            assert len(json.loads(payload)["predictions"][0]) == 10


def test_grpc_threads_exist_before_the_first_request(mlp_servers: Servers) -> None:
    from graphserve.core.defaults import DEFAULT_GRPC_WORKERS

    names = [t.name for t in threading.enumerate() if t.name.startswith("grpc_")]
    # two in-process servers (graph and eager), each with its pool started at start()
    assert len(names) >= 2 * DEFAULT_GRPC_WORKERS
