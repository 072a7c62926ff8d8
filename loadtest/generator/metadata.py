"""A served model's input signature, read from its metadata (gRPC or REST).

TF Serving describes a model by a `SignatureDefMap` (tensorflow_serving/apis/get_model_metadata
.proto): packed in an `Any` under the "signature_def" key of a gRPC `GetModelMetadataResponse`, and
the same message in protobuf's JSON form under `metadata.signature_def` of
`GET /v1/models/NAME/metadata` (dtypes as "DT_FLOAT", dimension sizes as strings such as "-1").
The client (graphserve.core.client) asks and unpacks; both paths end in
`specs_from_signature_map`, so the two protocols cannot disagree on a signature.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc
from tensorflow_serving.apis import get_model_metadata_pb2

from graphserve.core import client
from graphserve.core.errors import PayloadError, SignatureError
from graphserve.core.execution import (
    EXECUTION_FIELD,
    EXECUTION_HEADER,
    RUNNER_FIELD,
    RUNNER_HEADER,
)
from graphserve.core.signature import TensorSpec, spec_from_tensor_info
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.reach import tls_failure
from graphserve.loadtest.generator.targets import http_base_url

__all__ = [
    "fetch_grpc_specs",
    "fetch_rest_specs",
    "fetch_specs",
    "served_as",
    "specs_from_grpc_metadata",
    "specs_from_rest_metadata",
    "specs_from_signature_map",
]

_HINT = (
    "pass --payload-file with inputs saved by graphserve.loadtest.generator.payloads.save_payload"
)


def specs_from_signature_map(
    signature_map: get_model_metadata_pb2.SignatureDefMap, signature_name: str
) -> list[TensorSpec]:
    """The input specs of one signature, in name order.

    Raises PayloadError when the signature is missing, or an input has a dtype we cannot
    generate samples for. An input of unknown rank gets samples of one row per batch entry
    (a vector), the shape tf.Example inputs take.
    """
    signatures = signature_map.signature_def
    if signature_name not in signatures:
        available = ", ".join(repr(k) for k in sorted(signatures)) or "none"
        raise PayloadError(f"the model has no signature {signature_name!r}: it has {available}")
    specs: list[TensorSpec] = []
    # Sorted so that a payload built from gRPC and one built from REST metadata are identical.
    for name, info in sorted(signatures[signature_name].inputs.items()):
        try:
            specs.append(spec_from_tensor_info(name, info))
        except SignatureError as exc:
            raise PayloadError(
                f"cannot build a sample for input {name!r}: {exc}; {_HINT}"
            ) from None
    return specs


def specs_from_grpc_metadata(
    response: get_model_metadata_pb2.GetModelMetadataResponse, signature_name: str
) -> list[TensorSpec]:
    """Input specs from a gRPC GetModelMetadataResponse; PayloadError if it has no signatures."""
    try:
        signature_map = client.signature_defs(response)
    except ValueError as exc:
        raise PayloadError(str(exc)) from None
    return specs_from_signature_map(signature_map, signature_name)


def specs_from_rest_metadata(document: Mapping[str, Any], signature_name: str) -> list[TensorSpec]:
    """Input specs from the JSON of `GET /v1/models/NAME/metadata`; PayloadError if malformed."""
    try:
        signature_map = client.signature_defs_from_json(document)
    except ValueError as exc:
        raise PayloadError(str(exc)) from None
    return specs_from_signature_map(signature_map, signature_name)


def fetch_grpc_specs(
    address: str,
    model_name: str,
    signature_name: str,
    timeout_s: float = 10.0,
    tls: ClientTls | None = None,
) -> list[TensorSpec]:
    """Ask a gRPC server (`HOST:PORT`, `grpcs://HOST:PORT`; over TLS with `tls`) for a model's
    input specs; PayloadError on any failure, saying why when TLS is why."""
    request = client.metadata_request(model_name, signature_name=signature_name)
    # wait_for_ready: a server that was started a moment ago gets the timeout to come up.
    with client.GrpcClient.connect(
        address, timeout=timeout_s, wait_for_ready=True, tls=tls
    ) as grpc_client:
        try:
            response = grpc_client.metadata(request)
        except grpc.RpcError as exc:
            code = exc.code()
            unreachable = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            # Waiting for a channel that never becomes ready hides why: ask once more, without
            # waiting, for a handshake's reason.
            why = tls_failure("grpc", address, tls, model_name) if unreachable else None
            hint = f" (no answer in {timeout_s:g} s: is a server listening?)" if unreachable else ""
            said = why or f"{code.name}: {exc.details()}{hint}"
            raise PayloadError(
                f"GetModelMetadata for model {model_name!r} at {address} failed: {said}"
            ) from None
    return specs_from_grpc_metadata(response, signature_name)


def fetch_rest_specs(
    address: str,
    model_name: str,
    signature_name: str,
    timeout_s: float = 10.0,
    tls: ClientTls | None = None,
) -> list[TensorSpec]:
    """GET a model's metadata from a REST server (`HOST:PORT` or URL; over TLS with `tls`);
    PayloadError on failure (a TLS failure says why)."""
    url = f"{http_base_url(address)}{client.rest_path(model_name, 'metadata')}"
    try:
        with client.RestClient(address, timeout=timeout_s, tls=tls) as rest:
            reply = rest.metadata(model_name)
    except OSError as exc:  # every failure of the HTTP client is one
        raise PayloadError(f"GET {url} failed: {exc}") from None
    if reply.status != 200:
        raise PayloadError(
            f"GET {url} answered {reply.status}: {client.rest_error_text(reply.body)}"
        )
    try:
        document = reply.json()
    except ValueError as exc:
        raise PayloadError(f"GET {url} did not return JSON: {exc}") from None
    return specs_from_rest_metadata(document, signature_name)


def fetch_specs(
    protocol: str,
    address: str,
    model_name: str,
    signature_name: str,
    timeout_s: float = 10.0,
    tls: ClientTls | None = None,
) -> list[TensorSpec]:
    """`fetch_grpc_specs` or `fetch_rest_specs`, by protocol ("grpc" or "rest")."""
    if protocol == "grpc":
        return fetch_grpc_specs(address, model_name, signature_name, timeout_s, tls)
    if protocol == "rest":
        return fetch_rest_specs(address, model_name, signature_name, timeout_s, tls)
    raise ValueError(f"protocol {protocol!r}: expected 'grpc' or 'rest'")


def served_as(
    protocol: str,
    address: str,
    model_name: str,
    timeout_s: float = 10.0,
    tls: ClientTls | None = None,
) -> dict[str, str]:
    """How a graphserve server runs the model, as it says in its metadata: {"runner": "eager",
    "execution": "tf.function"} (graphserve.core.execution). Empty for a server that does not
    say (TF Serving refuses the fields) or cannot be asked: the load test goes on without it."""
    from google.protobuf import wrappers_pb2

    try:
        if protocol == "grpc":
            request = client.metadata_request(model_name, fields=(RUNNER_FIELD, EXECUTION_FIELD))
            with client.GrpcClient.connect(address, timeout=timeout_s, tls=tls) as grpc_client:
                metadata = grpc_client.metadata(request).metadata
            said = {}
            for field in (RUNNER_FIELD, EXECUTION_FIELD):
                value = wrappers_pb2.StringValue()
                if field in metadata and metadata[field].Unpack(value):
                    said[field] = value.value
        else:
            with client.RestClient(address, timeout=timeout_s, tls=tls) as rest:
                reply = rest.metadata(model_name)
            if reply.status != 200:
                return {}
            headers = {RUNNER_FIELD: RUNNER_HEADER, EXECUTION_FIELD: EXECUTION_HEADER}
            said = {f: reply.headers.get(h.lower(), "") for f, h in headers.items()}
    except (grpc.RpcError, OSError, ValueError):
        return {}
    return {k: v for k, v in said.items() if v}
