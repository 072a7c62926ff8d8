"""The REST front end: TF Serving's `/v1/models/...` API over HTTP/1.1 with keep-alive.

    GET  /v1/models/NAME[/versions/V|/labels/L]  model status (GetModelStatusResponse as JSON)
    GET  /v1/models/NAME[/versions/V]/metadata   model metadata (signature_def as JSON)
    POST /v1/models/NAME[/versions/V]:predict    row (`instances`) or columnar (`inputs`) format
    POST /v1/models/NAME[/versions/V]:classify   tf.Example features (`examples`, `context`)
    POST /v1/models/NAME[/versions/V]:regress    the same, for regression signatures

Errors are `{"error": "..."}` with the HTTP status of the ServingError (see graphserve.core.errors).
Bodies may be gzip-compressed (`Content-Encoding: gzip`, as TF Serving accepts); the limit
applies to the body as sent and as decompressed (413 past it). A `Grpc-Timeout` header sets the
request's deadline (graphserve.serving.deadline; 504 once it passes); a request without one
gets `RestOptions.default_timeout` (TF Serving's --rest_api_timeout_in_ms).

The transport is graphserve.serving.http_server (uvicorn, in this process, the handler on a
pool of threads): chunked bodies and `Expect: 100-continue` are served as TF Serving serves
them, and idle connections, slow headers and slow bodies time out (`RestOptions`).
"""

from __future__ import annotations

import json
import logging
import re
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http import HTTPStatus
from ssl import SSLContext
from typing import Any

from google.protobuf import json_format, wrappers_pb2
from google.protobuf.message import Message
from tensorflow_serving.apis import get_model_metadata_pb2

from graphserve.core.codec import (
    decode_json_request,
    encode_json_response,
    parse_json_body,
    parse_predict_body,
    signature_name_of,
)
from graphserve.core.defaults import (
    COLD_LOAD_HEADER,
    DEFAULT_GRPC_WORKERS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
)
from graphserve.core.errors import InvalidInput, PayloadTooLarge, ServingError
from graphserve.core.execution import (
    EXECUTION_FIELD,
    EXECUTION_HEADER,
    RUNNER_FIELD,
    RUNNER_HEADER,
)
from graphserve.serving.dataplane import SIGNATURE_DEF_FIELD, DataPlane, Prepared
from graphserve.serving.deadline import TIMEOUT_HEADER, deadline_scope, parse_timeout
from graphserve.serving.http_server import (
    AWAIT,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    LOOP,
    THREAD,
    HttpServer,
    Request,
    Response,
    TransportLimits,
    error_body,
)
from graphserve.serving.messages import (
    asked_spec,
    classification_request,
    classification_response,
    predict_request,
    predict_response,
    regression_request,
    regression_response,
)
from graphserve.serving.metrics import Measure
from graphserve.serving.registry import Servable, VersionRef
from graphserve.serving.signature import ServedSignature
from graphserve.serving.tfexample import examples_from_json

__all__ = ["RestOptions", "RestServer"]

log = logging.getLogger("graphserve.rest")

MAX_VERSION = 2**63 - 1  # versions are int64, as in TF Serving

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
    plane: DataPlane,
    name: str,
    version: VersionRef,
    body: bytes,
    parse: Callable[[bytes, int], dict[str, Any]],
    max_depth: int,
    headers: list[tuple[str, str]],
    prepared: Prepared | None,
) -> Iterator[tuple[Servable, ServedSignature, dict[str, Any], Measure]]:
    """The servable, signature and parsed body of a POST, resolved inside its measurement
    (yielded last); an answer that waited for its version to load on demand says how long in a
    header."""
    with plane.measure(name, "rest") as measure:
        plane.take_prepared(measure, prepared)
        servable = measure.servable = plane.servable(name, version, measure)
        if measure.cold_load is not None:
            headers.append((COLD_LOAD_HEADER, f"{measure.cold_load:.6f}"))
        # The signature name sits inside the body, so the body is parsed once, up front.
        request = parse(body, max_depth)
        signature = plane.signature(servable, signature_name_of(request))
        measure.signature = signature.name
        yield servable, signature, request, measure


@dataclass(frozen=True)
class RestOptions:
    """The REST server's limits; times are seconds, None is none.

    max_body_bytes   the largest body, as sent and after gzip decompression (413 past it)
    max_json_depth   the deepest nesting of a body's arrays and objects (400 past it)
    default_timeout  the deadline of a request without a Grpc-Timeout header (504 once passed)
    idle_timeout     a connection with no request in progress for this long is closed, a new
                     one that sends nothing included
    header_timeout   from a request's first byte to the end of its headers (408, closed)
    body_timeout     from the end of the headers to the end of the body (408, closed)
    max_connections  connections open at once; one past it is answered 503 and closed, those
                     within it are served as usual
    workers          threads that run requests (the model, batching queues), at most: a few
                     start at once, the rest as load needs them; the connections
                     themselves wait on one event loop and take no thread while idle
    strict_json_numbers  a predict body's finite number past a float input's range is refused
                     (400), where TF Serving (and this server by default) reads it as ±inf
    """

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    default_timeout: float | None = None
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_S
    header_timeout: float | None = DEFAULT_HEADER_TIMEOUT_S
    body_timeout: float | None = DEFAULT_BODY_TIMEOUT_S
    max_connections: int | None = DEFAULT_MAX_CONNECTIONS
    workers: int = DEFAULT_GRPC_WORKERS
    strict_json_numbers: bool = False


# A predict run on the REST event loop (`_Handler.here`): a body this small at most (a JSON
# parse well under a millisecond), and a model that ran lately in under this (seconds).
HERE_MAX_BODY_BYTES = 64 * 1024
HERE_MAX_RUN_S = 0.001
# A predict that awaits its batch on the loop: a body this large at most (parsed on the loop).
AWAIT_MAX_BODY_BYTES = 1024 * 1024


def _failed(exc: Exception, request: Request) -> tuple[int, bytes]:
    """The status and body of a request that raised `exc`: a ServingError's own; anything else
    is a 500, logged (the server must survive anything a request does)."""
    if isinstance(exc, ServingError):
        return exc.http_status, error_body(exc.message)
    log.exception("unexpected error while serving %s %s", request.method, request.path)
    return HTTPStatus.INTERNAL_SERVER_ERROR, error_body(f"{type(exc).__name__}: {exc}")


class _Handler:
    """One request, on a pool thread or the event loop (`here`): route, decode, run through the
    data plane, encode."""

    def __init__(self, plane: DataPlane, options: RestOptions) -> None:
        self.plane = plane
        self.options = options

    def __call__(self, request: Request) -> Response:
        metrics = self.plane.metrics
        headers: list[tuple[str, str]] = []
        try:
            if metrics is not None and request.method == "GET" and request.path == metrics.path:
                payload, content_type = metrics.render()
                return Response(HTTPStatus.OK, payload, content_type)
            body = self._body(request) if request.method == "POST" else b""
            timeout = request.headers.get(TIMEOUT_HEADER.lower())
            with deadline_scope(
                parse_timeout(timeout) if timeout else self.options.default_timeout
            ):
                status, payload = self._dispatch(
                    request.method, request.path, body, headers, request.prepared,
                    request.here == LOOP,
                )  # fmt: skip
        except Exception as exc:
            status, payload = _failed(exc, request)
        return Response(status, payload, headers=headers)

    def here(self, method: str, target: str, size: int) -> str:
        """Where a request is served (http_server's THREAD, LOOP or AWAIT). A predict on a
        resident model: on the loop (LOOP) when its body is small, its model runs on its
        caller and ran lately in under HERE_MAX_RUN_S, the Session's graph on the loop's thread
        too (Runner.run_inline); as a coroutine (AWAIT) when batching runs its model and its
        body is at most AWAIT_MAX_BODY_BYTES, awaiting its batch with no thread held. Every
        other request on a worker thread (THREAD): metadata, status, metrics, classify,
        regress, a request that fails to route (the thread answers its error), a model loaded
        on demand or slower."""
        if method != "POST" or size > AWAIT_MAX_BODY_BYTES:
            return THREAD
        try:
            name, version, verb, _ = self._route(method, target)
            servable = self.plane.registry.get(name, version)
        except ServingError:
            return THREAD
        if verb != "predict":
            return THREAD
        if not servable.runner.on_caller:
            return AWAIT
        mean = servable.run_time.mean
        if size <= HERE_MAX_BODY_BYTES and mean is not None and mean < HERE_MAX_RUN_S:
            return LOOP
        return THREAD

    async def answer_async(self, request: Request) -> Response:
        """A predict (`here` said AWAIT), as a coroutine on the event loop: parsed there, its
        model awaited (batching: its batch) with no thread held."""
        headers: list[tuple[str, str]] = []
        try:
            body = self._body(request)
            timeout = request.headers.get(TIMEOUT_HEADER.lower())
            with deadline_scope(
                parse_timeout(timeout) if timeout else self.options.default_timeout
            ):
                name, version, _, _ = self._route(request.method, request.path)
                plane, depth, parse = self.plane, self.options.max_json_depth, parse_predict_body
                with _resolve(plane, name, version, body, parse, depth, headers, None) as parts:
                    servable, signature, parsed, measure = parts
                    inputs, fmt = decode_json_request(
                        parsed, signature.inputs, strict_numbers=self.options.strict_json_numbers
                    )
                    outputs = await plane.predict_async(servable, signature, inputs)
                    payload = encode_json_response(outputs, row_format=fmt == "row")
                    if plane.request_logs is not None:
                        _log_predict(plane, measure, signature, version, parsed, inputs, outputs)
                    status: int = HTTPStatus.OK
        except Exception as exc:
            status, payload = _failed(exc, request)
        return Response(status, payload, headers=headers)

    def _body(self, request: Request) -> bytes:
        """The body, decompressed (its size as sent was checked by the transport)."""
        encoding = (request.headers.get("content-encoding") or "identity").strip().lower()
        if encoding == "gzip":
            return _gunzip(request.body, self.options.max_body_bytes)
        if encoding != "identity":
            raise InvalidInput(f"Content-Encoding {encoding!r} is not supported: use gzip or none")
        return request.body

    async def prepare(self, request: Request) -> Request:
        """On the event loop: a model request's version loaded on demand, if it is not
        resident, awaited without holding one of the threads requests run on."""
        if self.plane.demand is None or request.method != "POST":
            return request
        try:
            name, version, verb, _ = self._route(request.method, request.path)
            timeout = request.headers.get(TIMEOUT_HEADER.lower())
            seconds = parse_timeout(timeout) if timeout else self.options.default_timeout
        except ServingError:
            return request  # the handler answers it
        if not verb:
            return request
        return replace(request, prepared=await self.plane.prepare(name, version, seconds))

    @staticmethod
    def _route(method: str, target: str) -> tuple[str, VersionRef, str | None, bool]:
        """A model request's model, version, verb (predict, ...) and whether it asks for
        metadata; InvalidInput for a path that is not one."""
        path = target.split("?", 1)[0]
        if method == "GET" and path.rstrip("/") == "/v1/models":
            raise InvalidInput("Missing model name in request: GET /v1/models/NAME")
        match = _ROUTE.match(path)
        verb = match and match["verb"]
        if method not in ("GET", "POST") or not match or (method == "GET") == bool(verb):
            raise InvalidInput(f"Malformed request: {method} {path}")
        version: VersionRef = int(match["version"]) if match["version"] else match["label"]
        if isinstance(version, int) and version > MAX_VERSION:
            raise InvalidInput(f"Failed to convert version: {match['version']} is not an int64")
        return match["name"], version, verb or None, bool(match["metadata"])

    def _dispatch(
        self,
        method: str,
        target: str,
        body: bytes,
        headers: list[tuple[str, str]],
        prepared: Prepared | None = None,
        here: bool = False,
    ) -> tuple[int, bytes]:
        plane = self.plane
        name, version, verb, metadata = self._route(method, target)
        if method == "GET" and metadata:
            return HTTPStatus.OK, self._metadata_json(name, version, headers)
        if method == "GET":
            return HTTPStatus.OK, json.dumps(_proto_json(plane.status(name, version))).encode()
        if verb == "predict":
            return HTTPStatus.OK, self._predict(name, version, body, headers, prepared, here)
        return HTTPStatus.OK, self._examples(name, version, body, str(verb), headers, prepared)

    def _metadata_json(
        self, name: str, version: VersionRef, headers: list[tuple[str, str]]
    ) -> bytes:
        """TF Serving's body exactly; how this server runs the model (graph, eager, ...) and
        what executes it go in response headers of our own, where no TF Serving client looks."""
        fields = (SIGNATURE_DEF_FIELD, RUNNER_FIELD, EXECUTION_FIELD)
        response = self.plane.metadata(name, version, fields)
        sigmap = get_model_metadata_pb2.SignatureDefMap()
        response.metadata[SIGNATURE_DEF_FIELD].Unpack(sigmap)
        for field, header in ((RUNNER_FIELD, RUNNER_HEADER), (EXECUTION_FIELD, EXECUTION_HEADER)):
            value = wrappers_pb2.StringValue()
            response.metadata[field].Unpack(value)
            if value.value:
                headers.append((header, value.value))
        return json.dumps(
            {
                "model_spec": _proto_json(response.model_spec),
                "metadata": {SIGNATURE_DEF_FIELD: _proto_json(sigmap)},
            }
        ).encode()

    def _predict(
        self,
        name: str,
        version: VersionRef,
        body: bytes,
        headers: list[tuple[str, str]],
        prepared: Prepared | None,
        here: bool,
    ) -> bytes:
        plane, depth, parse = self.plane, self.options.max_json_depth, parse_predict_body
        with _resolve(plane, name, version, body, parse, depth, headers, prepared) as resolved:
            servable, signature, request, measure = resolved
            inputs, fmt = decode_json_request(
                request, signature.inputs, strict_numbers=self.options.strict_json_numbers
            )
            outputs = plane.predict(servable, signature, inputs, inline=here)
            if plane.request_logs is not None:
                _log_predict(plane, measure, signature, version, request, inputs, outputs)
            return encode_json_response(outputs, row_format=fmt == "row")

    def _examples(
        self,
        name: str,
        version: VersionRef,
        body: bytes,
        verb: str,
        headers: list[tuple[str, str]],
        prepared: Prepared | None,
    ) -> bytes:
        """:classify and :regress: tf.Example features in, TF Serving's `results` out."""
        plane, depth, parse = self.plane, self.options.max_json_depth, parse_json_body
        with _resolve(plane, name, version, body, parse, depth, headers, prepared) as resolved:
            servable, signature, request, measure = resolved
            examples = examples_from_json(request)
            if verb == "classify":
                rows = plane.classify(servable, signature, examples)
                result: list[Any] = [[[label, score] for label, score in row] for row in rows]
                if plane.request_logs is not None:
                    spec = asked_spec(name, version, signature_name_of(request))
                    plane.log(
                        measure,
                        "classify",
                        lambda: classification_request(spec, examples),
                        lambda: classification_response(servable, signature.name, rows),
                    )
            else:
                result = plane.regress(servable, signature, examples)
                if plane.request_logs is not None:
                    spec = asked_spec(name, version, signature_name_of(request))
                    values = result
                    plane.log(
                        measure,
                        "regress",
                        lambda: regression_request(spec, examples),
                        lambda: regression_response(servable, signature.name, values),
                    )
            # "results", as TF Serving's code writes it (json_tensor.cc) and its tests read it;
            # its api_rest.md says "result" in one place, which no TF Serving server sends.
            return json.dumps({"results": result}).encode()


def _log_predict(
    plane: DataPlane,
    measure: Measure,
    signature: ServedSignature,
    version: VersionRef,
    request: Mapping[str, Any],
    inputs: dict[str, Any],
    outputs: dict[str, Any],
) -> None:
    """A REST predict to the request log, as the PredictRequest and PredictResponse it is
    equivalent to (built by the log's writer, off the request's path)."""
    servable = measure.servable
    assert servable is not None
    spec = asked_spec(servable.name, version, signature_name_of(request))
    plane.log(
        measure,
        "predict",
        lambda: predict_request(spec, signature, inputs),
        lambda: predict_response(servable, signature, outputs),
    )


class RestServer:
    """TF Serving's REST API for `plane` on host:port (port 0: a free one, then `.port` says
    which), from `start()` (returns at once, serving in background threads) to `stop()`
    (closes the listener and every connection)."""

    def __init__(
        self,
        host: str,
        port: int,
        plane: DataPlane,
        options: RestOptions | None = None,
        *,
        ssl: SSLContext | None = None,
        reuse_port: bool = False,
    ) -> None:
        self.options = options or RestOptions()
        self.plane = plane
        limits = TransportLimits(
            max_body_bytes=self.options.max_body_bytes,
            idle_timeout=self.options.idle_timeout,
            header_timeout=self.options.header_timeout,
            body_timeout=self.options.body_timeout,
            max_connections=self.options.max_connections,
            body_limit_hint="--max-message-bytes",
        )
        handler = _Handler(plane, self.options)
        self._http = HttpServer(
            host,
            port,
            handler,
            limits,
            workers=self.options.workers,
            prepare=handler.prepare,
            here=handler.here,
            handler_async=handler.answer_async,
            ssl=ssl,
            reuse_port=reuse_port,
        )
        self.port = self._http.port

    def start(self) -> RestServer:
        self._http.start()
        return self

    def prime(self, work: Callable[[], object]) -> None:
        """Run `work` once on each request thread (e.g. the warm-up that gRPC's threads get)."""
        self._http.prime(work)

    def stop(self) -> None:
        self._http.stop()
