"""tf.train.Examples for Classify and Regress: from the gRPC `Input` proto, or from TF Serving's
REST body (`{"examples": [{feature: value, ...}], "context": {...}}`), serialized for the
signature's one string input, as TF Serving feeds them.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from tensorflow.core.example import example_pb2, feature_pb2
from tensorflow_serving.apis import input_pb2

from graphserve.core.errors import InvalidInput

__all__ = ["examples_from_input", "examples_from_json"]


def examples_from_input(proto: input_pb2.Input) -> list[bytes]:
    """Serialized Examples of an `Input`; with a context, its features join every example (the
    example's own win), as TF Serving concatenates the serialized context and example."""
    kind = proto.WhichOneof("kind")
    if kind == "example_list":
        examples = list(proto.example_list.examples)
        context = b""
    elif kind == "example_list_with_context":
        examples = list(proto.example_list_with_context.examples)
        context = proto.example_list_with_context.context.SerializeToString()
    else:
        raise InvalidInput("Input is empty: expected example_list or example_list_with_context")
    if not examples:
        raise InvalidInput("Input has no examples")
    return [context + e.SerializeToString() for e in examples]


def examples_from_json(body: Mapping[str, Any]) -> list[bytes]:
    """Serialized Examples of a REST :classify/:regress body."""
    examples = body.get("examples")
    if not isinstance(examples, list) or not examples:
        raise InvalidInput("'examples' must be a non-empty list of objects of features")
    context = body.get("context")
    if context is not None and not isinstance(context, dict):
        raise InvalidInput("'context' must be an object of features")
    prefix = _example(context, "context").SerializeToString() if context else b""
    return [
        prefix + _example(e, f"examples[{i}]").SerializeToString() for i, e in enumerate(examples)
    ]


def _example(features: Any, where: str) -> example_pb2.Example:
    if not isinstance(features, dict):
        raise InvalidInput(f"{where} must be an object mapping feature names to values")
    example = example_pb2.Example()
    for name, value in features.items():
        example.features.feature[name].CopyFrom(_feature(value, f"{where}.{name}"))
    return example


def _feature(value: Any, where: str) -> feature_pb2.Feature:
    values = value if isinstance(value, list) else [value]
    feature = feature_pb2.Feature()
    if all(isinstance(v, str) or _is_b64(v) for v in values):
        feature.bytes_list.value.extend(_bytes(v, where) for v in values)
    elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        feature.int64_list.value.extend(values)
    elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        feature.float_list.value.extend(float(v) for v in values)
    else:
        raise InvalidInput(
            f'feature {where}: expected numbers, strings or {{"b64": ...}} values of one kind, '
            f"got {value!r}"
        )
    return feature


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"b64"}


def _bytes(value: Any, where: str) -> bytes:
    if isinstance(value, str):
        return value.encode()
    try:
        return base64.b64decode(value["b64"], validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise InvalidInput(f"feature {where}: 'b64' is not valid base64") from None
