"""The REST front end: TF Serving's `/v1/models/...` API over HTTP/1.1 with keep-alive.

    GET  /v1/models/NAME[/versions/V|/labels/L]  model status (GetModelStatusResponse as JSON)
    GET  /v1/models/NAME[/versions/V]/metadata   model metadata (signature_def as JSON)
    POST /v1/models/NAME[/versions/V]:predict    row (`instances`) or columnar (`inputs`) format
    POST /v1/models/NAME[/versions/V]:classify   tf.Example features (`examples`, `context`)
    POST /v1/models/NAME[/versions/V]:regress    the same, for regression signatures

Errors are `{"error": "..."}` with the HTTP status of the ServingError (see graphserve.core.errors).
Bodies may be gzip-compressed (`Content-Encoding: gzip`, as TF Serving accepts); the limit
applies to the body as sent and as decompressed (413 past it). A `Grpc-Timeout` header sets the
request's deadline (graphserve.serving.deadline; 504 once it passes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format, wrappers_pb2
from google.protobuf.message import Message
from tensorflow_serving.apis import get_model_metadata_pb2

from graphserve.core.codec import (
    decode_json_request,
    encode_json_response,
    parse_json_body,
    signature_name_of,
)
from graphserve.core.defaults import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_JSON_DEPTH
from graphserve.core.errors import InvalidInput, PayloadTooLarge, ServingError
from graphserve.serving.dataplane import RUNNER_FIELD, SIGNATURE_DEF_FIELD, DataPlane
from graphserve.serving.deadline import TIMEOUT_HEADER, deadline_scope, parse_timeout
from graphserve.serving.registry import Servable, VersionRef
from graphserve.serving.signature import ServedSignature
from graphserve.serving.tfexample import examples_from_json

__all__ = ["RUNNER_HEADER", "RestServer"]

log = logging.getLogger("graphserve.rest")

MAX_VERSION = 2**63 - 1  # versions are int64, as in TF Serving
RUNNER_HEADER = "X-Graphserve-Runner"  # on metadata responses: graph, eager, eager-predict, ...
LINGER_BYTES = 64 * 1024 * 1024  # the most of a refused body read (and dropped) after a 413

_ROUTE = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)"
    r"(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?"
    r"(?:/(?P<metadata>metadata)|:(?P<verb>predict|classify|regress))?$"
)


def _proto_json(message: Message) -> Any:
    return json_format.MessageToDict(
        message, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
    )


def _gunzip(body: bytes, limit: int) -> bytes:
    """A gzip body decompressed, refused with 413 once it passes `limit` bytes (a small body
    can inflate a thousandfold) and with 400 when it is not gzip or is cut short."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # expect the gzip header and trailer
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidInput(
            f"request body is not valid gzip (Content-Encoding: gzip): {exc}"
        ) from None
    if len(data) > limit:
        raise PayloadTooLarge(
            f"gzip request body decompresses past the limit of {limit} bytes (--max-message-bytes)"
        )
    if not inflater.eof:
        raise InvalidInput("gzip request body is truncated: the compressed stream does not end")
    return data


@contextmanager
def _resolve(
    plane: DataPlane, name: str, version: VersionRef, body: bytes, max_depth: int
) -> Iterator[tuple[Servable, ServedSignature, dict[str, Any]]]:
    """The servable, signature and parsed body of a POST, resolved inside its measurement."""
    with plane.measure(name, "rest") as measure:
        servable = measure.servable = plane.servable(name, version)
        # The signature name sits inside the body, so the body is parsed once, up front.
        request = parse_json_body(body, max_depth)
        signature = plane.signature(servable, signature_name_of(request))
        measure.signature = signature.name
        yield servable, signature, request


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: load generators reuse connections
    # One write per response and no Nagle: written as headers, then body, a response would wait
    # for the client's delayed ACK of the headers (40 ms on Linux) before the body left.
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True
    server: RestServer
    _unread = 0  # bytes of a refused body left in the socket
    _runner = ""  # the RUNNER_HEADER value, on metadata responses

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        content_type = "application/json"
        status: int
        self._unread = 0
        self._runner = ""
        metrics = self.server.plane.metrics
        try:
            body = self._read_body() if method == "POST" else b""
            if metrics is not None and method == "GET" and self.path == metrics.path:
                status, (payload, content_type) = HTTPStatus.OK, metrics.render()
            else:
                timeout = self.headers.get(TIMEOUT_HEADER)
                with deadline_scope(
                    parse_timeout(timeout) if timeout else self.server.default_timeout
                ):
                    status, payload = self._dispatch(method, body)
        except ServingError as exc:
            status, payload = exc.http_status, json.dumps({"error": exc.message}).encode()
        except Exception as exc:  # the server must survive anything a request does
            log.exception("unexpected error while serving %s %s", method, self.path)
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            payload = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if self._runner:
            self.send_header(RUNNER_HEADER, self._runner)
        if self.close_connection:  # an unread body: tell the client this connection is done
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)
        if self._unread:
            self._linger(self._unread)

    def _read_body(self) -> bytes:
        """The body, decompressed; a body left unread closes the connection after the answer,
        so that it is never taken for the next request."""
        limit = self.server.max_body_bytes
        length = self.headers.get("Content-Length") or "0"
        if self.headers.get("Transfer-Encoding") or not length.isdigit():
            self.close_connection = True
            raise InvalidInput(
                f"request body needs a Content-Length (got {length!r}, Transfer-Encoding "
                f"{self.headers.get('Transfer-Encoding')!r}); chunked bodies are not supported"
            )
        if int(length) > limit:
            self.close_connection = True
            self._unread = int(length)
            raise PayloadTooLarge(
                f"request body of {length} bytes exceeds the limit of {limit} bytes "
                "(--max-message-bytes)"
            )
        body = self.rfile.read(int(length))
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding == "gzip":
            return _gunzip(body, limit)
        if encoding != "identity":
            raise InvalidInput(f"Content-Encoding {encoding!r} is not supported: use gzip or none")
        return body

    def _linger(self, unread: int) -> None:
        """After answering, read and drop a body that was refused unread (up to LINGER_BYTES,
        for up to a second), so that a client still sending it reads the 413 instead of a reset
        connection."""
        self.wfile.flush()
        self.connection.settimeout(1.0)
        left = min(unread, LINGER_BYTES)
        with contextlib.suppress(OSError):
            while left > 0:
                chunk = self.rfile.read1(min(left, 1 << 16))  # type: ignore[attr-defined]
                if not chunk:
                    break
                left -= len(chunk)

    def _dispatch(self, method: str, body: bytes) -> tuple[int, bytes]:
        path = self.path.split("?", 1)[0]
        if method == "GET" and path.rstrip("/") == "/v1/models":
            raise InvalidInput("Missing model name in request: GET /v1/models/NAME")
        match = _ROUTE.match(path)
        verb = match and match["verb"]
        if not match or (method == "GET") == bool(verb):
            raise InvalidInput(f"Malformed request: {method} {path}")
        plane = self.server.plane
        name = match["name"]
        version: VersionRef = int(match["version"]) if match["version"] else match["label"]
        if isinstance(version, int) and version > MAX_VERSION:
            raise InvalidInput(f"Failed to convert version: {match['version']} is not an int64")
        if method == "GET" and match["metadata"]:
            return HTTPStatus.OK, self._metadata_json(plane, name, version)
        if method == "GET":
            return HTTPStatus.OK, json.dumps(_proto_json(plane.status(name, version))).encode()
        if verb == "predict":
            return HTTPStatus.OK, self._predict(plane, name, version, body)
        return HTTPStatus.OK, self._examples(plane, name, version, body, str(verb))

    def _metadata_json(self, plane: DataPlane, name: str, version: VersionRef) -> bytes:
        """TF Serving's body exactly; how this server runs the model (graph, eager, ...) goes
        in a response header of our own, where no TF Serving client looks."""
        response = plane.metadata(name, version, (SIGNATURE_DEF_FIELD, RUNNER_FIELD))
        sigmap = get_model_metadata_pb2.SignatureDefMap()
        response.metadata[SIGNATURE_DEF_FIELD].Unpack(sigmap)
        runner = wrappers_pb2.StringValue()
        response.metadata[RUNNER_FIELD].Unpack(runner)
        self._runner = runner.value
        return json.dumps(
            {
                "model_spec": _proto_json(response.model_spec),
                "metadata": {SIGNATURE_DEF_FIELD: _proto_json(sigmap)},
            }
        ).encode()

    def _predict(self, plane: DataPlane, name: str, version: VersionRef, body: bytes) -> bytes:
        depth = self.server.max_json_depth
        with _resolve(plane, name, version, body, depth) as (servable, signature, request):
            inputs, fmt = decode_json_request(request, signature.inputs)
            outputs = plane.predict(servable, signature, inputs)
            return encode_json_response(outputs, row_format=fmt == "row")

    def _examples(
        self, plane: DataPlane, name: str, version: VersionRef, body: bytes, verb: str
    ) -> bytes:
        """:classify and :regress: tf.Example features in, TF Serving's `results` out."""
        depth = self.server.max_json_depth
        with _resolve(plane, name, version, body, depth) as (servable, signature, request):
            examples = examples_from_json(request)
            if verb == "classify":
                result: list[Any] = [
                    [[label, score] for label, score in row]
                    for row in plane.classify(servable, signature, examples)
                ]
            else:
                result = plane.regress(servable, signature, examples)
            # "results", as TF Serving's code writes it (json_tensor.cc) and its tests read it;
            # its api_rest.md says "result" in one place, which no TF Serving server sends.
            return json.dumps({"results": result}).encode()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class RestServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        plane: DataPlane,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
        default_timeout: float | None = None,
    ) -> None:
        self.plane = plane
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth
        # The deadline of a request that sets none (TF Serving's --rest_api_timeout_in_ms).
        self.default_timeout = default_timeout
        super().__init__(address, _Handler)
