"""TF Serving's request and response messages, built from what the data plane takes and returns.

The gRPC front end answers with the responses; the request log (serving.requestlog) writes a
REST request as the gRPC messages it is equivalent to, built here the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tensorflow.core.example import example_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    model_pb2,
    predict_pb2,
    regression_pb2,
)

from graphserve.core.codec import array_to_proto, encode_predict_response
from graphserve.serving.dataplane import model_spec
from graphserve.serving.registry import Servable, VersionRef
from graphserve.serving.signature import ServedSignature

__all__ = [
    "asked_spec",
    "classification_request",
    "classification_response",
    "predict_request",
    "predict_response",
    "regression_request",
    "regression_response",
]


def predict_response(
    servable: Servable, signature: ServedSignature, outputs: Mapping[str, np.ndarray]
) -> predict_pb2.PredictResponse | bytes:
    """The answer: serialized by hand where every output is float32 or float64 (the typed
    field is then the array's bytes, and no message is built: the gRPC front end lets the
    bytes through its response serializer), else a PredictResponse."""
    typed = {name: (array, signature.outputs[name].dtype) for name, array in outputs.items()}
    encoded = encode_predict_response(servable.name, servable.version, signature.name, typed)
    if encoded is not None:
        return encoded
    response = predict_pb2.PredictResponse()
    response.model_spec.CopyFrom(model_spec(servable, signature.name))
    for name, array in outputs.items():
        dtype = signature.outputs[name].dtype
        # Typed fields, as TF Serving answers: clients read `float_val` directly.
        response.outputs[name].CopyFrom(array_to_proto(array, dtype, typed_fields=True))
    return response


def classification_response(
    servable: Servable, signature_name: str, rows: Sequence[Sequence[tuple[str, float]]]
) -> classification_pb2.ClassificationResponse:
    response = classification_pb2.ClassificationResponse()
    response.model_spec.CopyFrom(model_spec(servable, signature_name))
    fill_classifications(response.result, rows)
    return response


def fill_classifications(
    result: classification_pb2.ClassificationResult,
    rows: Sequence[Sequence[tuple[str, float]]],
) -> None:
    for row in rows:
        classifications = result.classifications.add()
        for label, score in row:
            classifications.classes.add(label=label, score=score)


def regression_response(
    servable: Servable, signature_name: str, values: Sequence[float]
) -> regression_pb2.RegressionResponse:
    response = regression_pb2.RegressionResponse()
    response.model_spec.CopyFrom(model_spec(servable, signature_name))
    fill_regressions(response.result, values)
    return response


def fill_regressions(result: regression_pb2.RegressionResult, values: Sequence[float]) -> None:
    for value in values:
        result.regressions.add(value=value)


def asked_spec(name: str, version: VersionRef, signature_name: str) -> model_pb2.ModelSpec:
    """The ModelSpec a client sent for `version` (a number, a label, or None: the newest)."""
    spec = model_pb2.ModelSpec(name=name, signature_name=signature_name)
    if isinstance(version, int):
        spec.version.value = version
    elif version:
        spec.version_label = version
    return spec


def predict_request(
    spec: model_pb2.ModelSpec, signature: ServedSignature, inputs: Mapping[str, np.ndarray]
) -> predict_pb2.PredictRequest:
    """The PredictRequest a REST predict is equivalent to (its inputs as `tensor_content`)."""
    request = predict_pb2.PredictRequest()
    request.model_spec.CopyFrom(spec)
    for name, array in inputs.items():
        request.inputs[name].CopyFrom(array_to_proto(array, signature.inputs[name].dtype))
    return request


def _examples(input_: Any, examples: Sequence[bytes]) -> None:
    listed = input_.example_list.examples
    for data in examples:  # a REST context is already merged into each (tfexample)
        listed.append(example_pb2.Example.FromString(data))


def classification_request(
    spec: model_pb2.ModelSpec, examples: Sequence[bytes]
) -> classification_pb2.ClassificationRequest:
    request = classification_pb2.ClassificationRequest()
    request.model_spec.CopyFrom(spec)
    _examples(request.input, examples)
    return request


def regression_request(
    spec: model_pb2.ModelSpec, examples: Sequence[bytes]
) -> regression_pb2.RegressionRequest:
    request = regression_pb2.RegressionRequest()
    request.model_spec.CopyFrom(spec)
    _examples(request.input, examples)
    return request
