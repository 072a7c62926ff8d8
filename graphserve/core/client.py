"""The one client of the TensorFlow Serving APIs, for everything that talks to a server: the load
test's users, the benchmarks, cold start, deploy's wait, and the tests. Against TF Serving itself
or the embedded servers alike, over gRPC (the `tensorflow-serving-api` stubs' messages) and REST
(`/v1/models/...`).

Building a request and reading an answer are kept apart from sending it, so a caller that has to
send in its own way (locust's users time every call on their own OS threads: a blocking gRPC
call, or an HttpConnection on an unpatched socket) shares everything but the send:

    names        RPC_METHODS, rest_path, JSON_HEADERS, http_failure, rest_error_text,
                 grpc_error_text
    requests     predict_request, classify_request, regress_request, multi_inference_request,
                 metadata_request, status_request, model_spec, example
    answers      predict_outputs, signature_defs(_from_json), version_statuses(_from_json),
                 cold_load_seconds
    sending      GrpcClient (on its own channel or the caller's; typed calls, or raw bytes in and
                 out), RestClient (over an HttpTransport: by default one keep-alive
                 HttpConnection, the HTTP/1.1 client of graphserve.core.httpclient), model_status

Failures are the server's as it sent them: gRPC calls raise `grpc.RpcError`, REST calls answer
every status with its body (`HttpReply`), and a broken connection or an answer that is not HTTP
raises `OSError` (graphserve.core.httpclient draws the tree). A malformed answer (a message, a
JSON document) raises ValueError.

Importing this module loads neither gRPC, numpy nor TensorFlow's protobuf modules (which load
the TensorFlow runtime): the locust processes and the CLI import it cheaply; each function
imports what it needs on first use.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from graphserve.core.httpclient import HttpConnection, HttpReply
from graphserve.core.results import JsonResult
from graphserve.core.tls import ClientTls, diagnose_address, explain

if TYPE_CHECKING:
    import grpc
    import numpy as np

__all__ = [
    "JSON_HEADERS",
    "RPC_METHODS",
    "GrpcClient",
    "HttpConnection",
    "HttpReply",
    "HttpTransport",
    "RestClient",
    "VersionStatus",
    "classify_request",
    "cold_load_seconds",
    "example",
    "grpc_error_text",
    "grpc_tls_reason",
    "http_failure",
    "metadata_request",
    "model_spec",
    "model_status",
    "multi_inference_request",
    "predict_outputs",
    "predict_request",
    "regress_request",
    "rest_error_text",
    "rest_path",
    "signature_defs",
    "signature_defs_from_json",
    "status_request",
    "version_statuses",
    "version_statuses_from_json",
]

# ---------------------------------------------------------------------------------------------
# Names on the wire

_PREDICTION = "/tensorflow.serving.PredictionService/"
_MODEL = "/tensorflow.serving.ModelService/"
# Every RPC by its method name, spelled out so that naming one loads no protos; a test checks
# them against the services' descriptors.
RPC_METHODS: dict[str, str] = {
    "Predict": _PREDICTION + "Predict",
    "Classify": _PREDICTION + "Classify",
    "Regress": _PREDICTION + "Regress",
    "MultiInference": _PREDICTION + "MultiInference",
    "GetModelMetadata": _PREDICTION + "GetModelMetadata",
    "GetModelStatus": _MODEL + "GetModelStatus",
}
# The response message of each, as (module of tensorflow_serving.apis, message).
_RESPONSES: dict[str, tuple[str, str]] = {
    "Predict": ("predict_pb2", "PredictResponse"),
    "Classify": ("classification_pb2", "ClassificationResponse"),
    "Regress": ("regression_pb2", "RegressionResponse"),
    "MultiInference": ("inference_pb2", "MultiInferenceResponse"),
    "GetModelMetadata": ("get_model_metadata_pb2", "GetModelMetadataResponse"),
    "GetModelStatus": ("get_model_status_pb2", "GetModelStatusResponse"),
}

JSON_HEADERS: Mapping[str, str] = {"Content-Type": "application/json"}

_VERBS = ("predict", "classify", "regress")


def rest_path(
    model: str, verb: str | None = None, *, version: int | None = None, label: str | None = None
) -> str:
    """TF Serving's REST path: `/v1/models/NAME[/versions/V | /labels/L]`, then `:predict`,
    `:classify` or `:regress`, `/metadata` for verb "metadata", nothing for the model status.
    The name and label are percent-encoded. Raises ValueError for another verb, or both a
    version and a label."""
    if version is not None and label is not None:
        raise ValueError("a model is addressed by a version or a label, not both")
    path = f"/v1/models/{quote(model, safe='')}"
    if version is not None:
        path += f"/versions/{version}"
    elif label is not None:
        path += f"/labels/{quote(label, safe='')}"
    if verb is None:
        return path
    if verb == "metadata":
        return path + "/metadata"
    if verb not in _VERBS:
        raise ValueError(f"REST verb {verb!r}: expected one of {', '.join(_VERBS)} or metadata")
    return f"{path}:{verb}"


def http_failure(status: int, text: str) -> str:
    """How a load generator reports an answer that is not a 200: `HTTP 400: <start of body>`."""
    return f"HTTP {status}: {text[:200]}"


def rest_error_text(body: bytes) -> str:
    """TF Serving's `{"error": "..."}` message, or the start of whatever else came back."""
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace") or "(empty body)"


def grpc_error_text(
    exc: BaseException, *, address: str | None = None, tls: ClientTls | None = None
) -> str:
    """`CODE: details` of a failed RPC; the exception's text for anything else (at most 300).
    Given the `address` dialed and its `tls`, a connection that failed for TLS says why and what
    to give, in brackets (`grpc_tls_reason`)."""
    import grpc

    if not (isinstance(exc, grpc.RpcError) and hasattr(exc, "code")):
        return str(exc)[:300] or type(exc).__name__
    text = f"{exc.code().name}: {exc.details()}"[:300]
    meaning = grpc_tls_reason(exc, address, tls) if address is not None else None
    return f"{text} [{meaning}]" if meaning else text


def grpc_tls_reason(exc: BaseException, address: str, tls: ClientTls | None) -> str | None:
    """Why a call to `address` dialed with `tls` (None: plaintext) failed, if TLS is why, and
    what to give (graphserve.core.tls): by the error's text, or by a handshake of our own when
    gRPC's text says only "Socket closed". None for any other failure."""
    import grpc

    if not isinstance(exc, grpc.RpcError) or not hasattr(exc, "code"):
        return None
    if exc.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    meaning = explain(exc.details() or "", tls=tls is not None)
    return meaning if meaning is not None else diagnose_address(address, tls, grpc=True)


# ---------------------------------------------------------------------------------------------
# Requests


def _apis(module: str) -> Any:
    return importlib.import_module(f"tensorflow_serving.apis.{module}")


def model_spec(
    name: str, *, signature_name: str = "", version: int | None = None, label: str | None = None
) -> Any:
    """A ModelSpec: the model, its signature ("" is the server's default) and version or label."""
    if version is not None and label is not None:
        raise ValueError("a model is addressed by a version or a label, not both")
    spec = _apis("model_pb2").ModelSpec(name=name, signature_name=signature_name)
    if version is not None:
        spec.version.value = version
    elif label is not None:
        spec.version_label = label
    return spec


def predict_request(
    model: str,
    inputs: Mapping[str, Any],
    *,
    signature_name: str = "",
    version: int | None = None,
    label: str | None = None,
    output_filter: Iterable[str] = (),
) -> Any:
    """A PredictRequest. Each input is an array (encoded by the codec: numbers as
    `tensor_content`, strings as `string_val`) or a TensorProto taken as it is."""
    import numpy as np
    from tensorflow.core.framework import tensor_pb2

    from graphserve.core.codec import array_to_proto

    request = _apis("predict_pb2").PredictRequest(
        model_spec=model_spec(model, signature_name=signature_name, version=version, label=label)
    )
    for name, value in inputs.items():
        if isinstance(value, tensor_pb2.TensorProto):
            request.inputs[name].CopyFrom(value)
        else:
            request.inputs[name].CopyFrom(array_to_proto(np.asarray(value)))
    request.output_filter.extend(output_filter)
    return request


def example(**features: Any) -> Any:
    """A tf.Example of the given features: floats as float_list, integers (and bools) as
    int64_list, bytes and str as bytes_list; a scalar or a sequence each."""
    import numpy as np
    from tensorflow.core.example import example_pb2

    message = example_pb2.Example()
    for name, value in features.items():
        values = np.asarray(value).reshape(-1)
        feature = message.features.feature[name]
        if values.dtype.kind == "f":
            feature.float_list.value.extend(values.tolist())
        elif values.dtype.kind in "iub":
            feature.int64_list.value.extend(int(v) for v in values.tolist())
        else:
            feature.bytes_list.value.extend(
                v if isinstance(v, bytes) else str(v).encode() for v in values.tolist()
            )
    return message


def _fill_input(target: Any, examples: Iterable[Any], context: Any | None) -> None:
    """An Input's example list, or example list with context when `context` is given. With
    neither examples nor context the Input stays unset, as TF Serving's own clients leave it."""
    examples = list(examples)
    if context is None:
        if examples:
            target.example_list.examples.extend(examples)
    else:
        target.example_list_with_context.examples.extend(examples)
        target.example_list_with_context.context.CopyFrom(context)


def classify_request(
    model: str,
    examples: Iterable[Any],
    *,
    signature_name: str = "",
    version: int | None = None,
    label: str | None = None,
    context: Any | None = None,
) -> Any:
    """A ClassificationRequest of tf.Examples (see `example`), with a context when given."""
    request = _apis("classification_pb2").ClassificationRequest(
        model_spec=model_spec(model, signature_name=signature_name, version=version, label=label)
    )
    _fill_input(request.input, examples, context)
    return request


def regress_request(
    model: str,
    examples: Iterable[Any],
    *,
    signature_name: str = "",
    version: int | None = None,
    label: str | None = None,
    context: Any | None = None,
) -> Any:
    """A RegressionRequest of tf.Examples (see `example`), with a context when given."""
    request = _apis("regression_pb2").RegressionRequest(
        model_spec=model_spec(model, signature_name=signature_name, version=version, label=label)
    )
    _fill_input(request.input, examples, context)
    return request


def multi_inference_request(
    tasks: Iterable[tuple[str, str, str]], examples: Iterable[Any], context: Any | None = None
) -> Any:
    """A MultiInferenceRequest: one task per (model, signature name, method name), such as
    ("m", "regress_x_to_y", "tensorflow/serving/regress"), all on the same examples."""
    request = _apis("inference_pb2").MultiInferenceRequest()
    for model, signature_name, method_name in tasks:
        task = request.tasks.add()
        task.model_spec.CopyFrom(model_spec(model, signature_name=signature_name))
        task.method_name = method_name
    _fill_input(request.input, examples, context)
    return request


def metadata_request(
    model: str,
    *,
    signature_name: str = "",
    version: int | None = None,
    label: str | None = None,
    fields: Sequence[str] = ("signature_def",),
) -> Any:
    """A GetModelMetadataRequest, for the signature_def field (the one TF Serving offers)."""
    spec = model_spec(model, signature_name=signature_name, version=version, label=label)
    return _apis("get_model_metadata_pb2").GetModelMetadataRequest(
        model_spec=spec, metadata_field=list(fields)
    )


def status_request(model: str, *, version: int | None = None, label: str | None = None) -> Any:
    """A GetModelStatusRequest: every version of `model`, or the one named."""
    spec = model_spec(model, version=version, label=label)
    return _apis("get_model_status_pb2").GetModelStatusRequest(model_spec=spec)


# ---------------------------------------------------------------------------------------------
# Answers


def predict_outputs(response: Any) -> dict[str, np.ndarray]:
    """The outputs of a PredictResponse (or its serialized bytes) as arrays, by name."""
    from graphserve.core.codec import array_from_proto

    if isinstance(response, bytes):
        response = _apis("predict_pb2").PredictResponse.FromString(response)
    return {name: array_from_proto(tensor) for name, tensor in response.outputs.items()}


def signature_defs(response: Any) -> Any:
    """The SignatureDefMap packed in a GetModelMetadataResponse. Raises ValueError when it has no
    'signature_def' entry or the entry holds another message."""
    if "signature_def" not in response.metadata:
        raise ValueError("the model metadata has no 'signature_def' entry")
    signature_map = _apis("get_model_metadata_pb2").SignatureDefMap()
    packed = response.metadata["signature_def"]
    if not packed.Unpack(signature_map):
        raise ValueError(
            f"the metadata's 'signature_def' holds a {packed.TypeName()}, expected "
            "tensorflow.serving.SignatureDefMap"
        )
    return signature_map


def signature_defs_from_json(document: Any) -> Any:
    """The SignatureDefMap of `GET /v1/models/NAME/metadata`'s JSON (protobuf's JSON form under
    `metadata.signature_def`). Raises ValueError when it is missing or malformed."""
    from google.protobuf import json_format

    try:
        raw = document["metadata"]["signature_def"]
    except (KeyError, TypeError):
        raise ValueError("the model metadata has no 'metadata.signature_def' entry") from None
    signature_map = _apis("get_model_metadata_pb2").SignatureDefMap()
    try:
        json_format.ParseDict(raw, signature_map, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(f"the model metadata's signature_def is malformed: {exc}") from None
    return signature_map


@dataclass(frozen=True)
class VersionStatus(JsonResult):
    """One version of a model as GetModelStatus reports it: its number, its state, and the error
    of a load that failed (code 0 and no message when none did)."""

    version: int
    state: str  # START, LOADING, AVAILABLE, UNLOADING, END
    error_code: int  # tensorflow.error.Code; 0 is OK
    error_message: str


def version_statuses(response: Any) -> list[VersionStatus]:
    """The versions a GetModelStatusResponse lists, in its order."""
    state_name = _apis("get_model_status_pb2").ModelVersionStatus.State.Name
    return [
        VersionStatus(
            int(v.version), state_name(v.state), int(v.status.error_code), v.status.error_message
        )
        for v in response.model_version_status
    ]


def version_statuses_from_json(document: Any) -> list[VersionStatus]:
    """The versions of `GET /v1/models/NAME`'s JSON (versions as strings, codes by name).
    Raises ValueError when it is not a model status."""
    from google.protobuf import json_format

    response = _apis("get_model_status_pb2").GetModelStatusResponse()
    try:
        json_format.ParseDict(document, response, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(f"not a model status: {exc}") from None
    return version_statuses(response)


def cold_load_seconds(pairs: Iterable[tuple[str | bytes, str | bytes]]) -> float | None:
    """The seconds an answer waited for its model to load on demand, from its headers (REST,
    raw or decoded) or trailing metadata (gRPC): the COLD_LOAD_HEADER pair; None without one
    (a warm answer, or a server that does not mark them). A mark whose value is not a number
    reads as 0.0: cold all the same."""
    from graphserve.core.defaults import COLD_LOAD_HEADER

    for name, value in pairs:
        key = name.decode("latin-1") if isinstance(name, bytes) else name
        if key.lower() == COLD_LOAD_HEADER:
            try:
                return float(value.decode("latin-1") if isinstance(value, bytes) else value)
            except ValueError:
                return 0.0
    return None


# ---------------------------------------------------------------------------------------------
# gRPC


def _serialize(message: Any) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


class GrpcClient:
    """TF Serving's gRPC APIs over one channel: `connect(address)` opens one (closed with the
    client), or pass the caller's own (an intercepted or gevent-patched channel stays theirs).

    The typed calls take a request message (or its serialized bytes) and return the response
    message; `raw(rpc)` is bytes in, bytes out, for load generators that send one pre-encoded
    request again and again and must not parse every answer.
    """

    def __init__(
        self,
        channel: grpc.Channel,
        *,
        timeout: float = 30.0,
        wait_for_ready: bool | None = None,
        owns_channel: bool = False,
        address: str | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        self.channel = channel
        self.address = address  # HOST:PORT dialed (connect's), for failure messages
        self.tls = tls
        self.timeout = timeout
        self.wait_for_ready = wait_for_ready
        self._owns_channel = owns_channel
        self._calls: dict[str, Callable[..., Any]] = {}

    @classmethod
    def connect(
        cls,
        address: str,
        *,
        timeout: float = 30.0,
        wait_for_ready: bool | None = None,
        max_message_bytes: int | None = None,
        tls: ClientTls | None = None,
    ) -> GrpcClient:
        """A client on a new channel to `address` (HOST:PORT, unix:PATH, grpc://HOST:PORT;
        grpcs://HOST:PORT dials TLS with the system's CAs), over TLS with `tls`;
        `max_message_bytes` -1 lifts gRPC's 4 MB limit on both directions."""
        import grpc

        target, tls = ClientTls.for_address(address, tls)
        options: list[tuple[str, Any]] = []
        if max_message_bytes is not None:
            options = [
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes),
            ]
        if tls is None:
            channel = grpc.insecure_channel(target, options=options)
        else:
            channel = tls.grpc_channel(target, options)
        return cls(
            channel,
            timeout=timeout,
            wait_for_ready=wait_for_ready,
            owns_channel=True,
            address=target,
            tls=tls,
        )

    def error_text(self, exc: BaseException) -> str:
        """grpc_error_text of a failure on this client's channel, TLS's reason included."""
        return grpc_error_text(exc, address=self.address, tls=self.tls)

    def tls_reason(self, exc: BaseException) -> str | None:
        """grpc_tls_reason of a failure on this client's channel: TLS's reason, or None."""
        if self.address is None:
            return None
        return grpc_tls_reason(exc, self.address, self.tls)

    def close(self) -> None:
        """Close the channel if `connect` opened it; a channel passed in stays open."""
        if self._owns_channel:
            self.channel.close()

    def __enter__(self) -> GrpcClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def wait_until_connected(self, timeout: float) -> None:
        """Block until the channel is connected; grpc.FutureTimeoutError after `timeout` s."""
        import grpc

        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def method(self, rpc: str) -> Any:
        """gRPC's multicallable of `rpc` (a key of RPC_METHODS), for `.future()` or
        `.with_call()`: it takes a request message (or its bytes), returns the response."""
        method = self._calls.get(rpc)
        if method is None:
            module, message = _RESPONSES[rpc]
            method = self.channel.unary_unary(
                RPC_METHODS[rpc],
                request_serializer=_serialize,
                response_deserializer=getattr(_apis(module), message).FromString,
            )
            self._calls[rpc] = method
        return method

    def call(
        self,
        rpc: str,
        request: Any,
        *,
        timeout: float | None = None,
        wait_for_ready: bool | None = None,
        **options: Any,
    ) -> Any:
        """Call `rpc` with `request`; its response message. `options` go to gRPC as they are
        (`metadata=`, `compression=`)."""
        ready = self.wait_for_ready if wait_for_ready is None else wait_for_ready
        return self.method(rpc)(
            request, timeout=timeout or self.timeout, wait_for_ready=ready, **options
        )

    def raw(self, rpc: str = "Predict") -> Callable[..., bytes]:
        """`rpc` with no (de)serializers: call it with the request's bytes (and `timeout=`), it
        returns the answer's bytes."""
        return self.channel.unary_unary(RPC_METHODS[rpc])

    def predict(self, request: Any, **options: Any) -> Any:
        """Call Predict with a PredictRequest (see `predict_request`); its response."""
        return self.call("Predict", request, **options)

    def classify(self, request: Any, **options: Any) -> Any:
        """Call Classify with a ClassificationRequest (see `classify_request`); its response."""
        return self.call("Classify", request, **options)

    def regress(self, request: Any, **options: Any) -> Any:
        """Call Regress with a RegressionRequest (see `regress_request`); its response."""
        return self.call("Regress", request, **options)

    def multi_inference(self, request: Any, **options: Any) -> Any:
        """Call MultiInference with a MultiInferenceRequest; its response."""
        return self.call("MultiInference", request, **options)

    def metadata(self, request: Any, **options: Any) -> Any:
        """Call GetModelMetadata with a request from `metadata_request`; its response."""
        return self.call("GetModelMetadata", request, **options)

    def status(self, request: Any, **options: Any) -> Any:
        """Call GetModelStatus with a request from `status_request`; its response."""
        return self.call("GetModelStatus", request, **options)


def model_status(
    address: str, model_name: str, timeout: float = 2.0, *, tls: ClientTls | None = None
) -> list[VersionStatus]:
    """The versions of `model_name` the server at `address` knows; [] when it is not reachable
    yet or does not know the model (yet)."""
    import grpc

    # A fresh channel per poll: a channel that failed to connect backs off for longer and longer,
    # and would notice a server that has just come up late.
    with GrpcClient.connect(address, timeout=timeout, tls=tls) as client:
        try:
            return version_statuses(client.status(status_request(model_name)))
        except grpc.RpcError:
            return []


# ---------------------------------------------------------------------------------------------
# REST


class HttpTransport(Protocol):
    """How a RestClient sends: one request, its whole answer."""

    def request(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpReply: ...

    def close(self) -> None: ...


class RestClient:
    """TF Serving's REST API at `address` (HOST:PORT, http:// or https://HOST:PORT), over
    `transport` (a keep-alive HttpConnection unless given, over TLS with `tls`). A body is
    bytes sent as they are, or anything else sent as JSON; every answer comes back whatever its
    status."""

    def __init__(
        self,
        address: str,
        *,
        timeout: float = 30.0,
        transport: HttpTransport | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        self.address = address
        self.transport = transport or HttpConnection(address, timeout, tls=tls)

    def close(self) -> None:
        """Close the transport (its connection)."""
        self.transport.close()

    def __enter__(self) -> RestClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpReply:
        """Send one request (JSON headers, plus `headers`) and return the answer, whatever its
        status. OSError when the connection fails (see graphserve.core.httpclient)."""
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        sent = {**JSON_HEADERS, **headers} if headers else JSON_HEADERS
        return self.transport.request(method, path, data, sent)

    def get(self, path: str) -> HttpReply:
        """GET `path`."""
        return self.request("GET", path)

    def post(self, path: str, body: Any, headers: Mapping[str, str] | None = None) -> HttpReply:
        """POST `body` to `path`."""
        return self.request("POST", path, body, headers)

    def predict(
        self, model: str, body: Any, *, version: int | None = None, label: str | None = None
    ) -> HttpReply:
        """POST `body` (TF Serving's predict JSON) to `model`'s `:predict`, of the newest version
        or the one named by `version` or `label`."""
        return self.post(rest_path(model, "predict", version=version, label=label), body)

    def classify(
        self, model: str, body: Any, *, version: int | None = None, label: str | None = None
    ) -> HttpReply:
        """POST `body` (TF Serving's classify JSON) to `model`'s `:classify`, of the newest version
        or the one named by `version` or `label`."""
        return self.post(rest_path(model, "classify", version=version, label=label), body)

    def regress(
        self, model: str, body: Any, *, version: int | None = None, label: str | None = None
    ) -> HttpReply:
        """POST `body` (TF Serving's regress JSON) to `model`'s `:regress`, of the newest version
        or the one named by `version` or `label`."""
        return self.post(rest_path(model, "regress", version=version, label=label), body)

    def metadata(
        self, model: str, *, version: int | None = None, label: str | None = None
    ) -> HttpReply:
        """GET `model`'s metadata (its signatures), of the newest version or the one named."""
        return self.get(rest_path(model, "metadata", version=version, label=label))

    def status(
        self, model: str, *, version: int | None = None, label: str | None = None
    ) -> HttpReply:
        """GET `model`'s status: every version, or the one named (see
        `version_statuses_from_json`)."""
        return self.get(rest_path(model, version=version, label=label))
