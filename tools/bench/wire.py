"""Codec benchmark: the server-side cost of one image tensor on the wire, per encoding.

For a float32 tensor (by default one 224x224x3 image), times in-process what a server does with
it: decode a request into a numpy array, and encode a same-shape array into a response.

- `tensor_content`: gRPC PredictRequest/PredictResponse with raw bytes in `tensor_content`.
- `typed_fields`: the same messages with the values in the repeated `float_val` field.
- `json`: the REST row format (`instances` in, `predictions` out), as the REST server reads and
  writes it (pysimdjson in, orjson out).

`json_suite` times that JSON codec against the one before issue 15 (`json_stdlib`: the standard
library's json, lists into numpy, floats through str) on the same request bytes.

Decoding and encoding go through `core.codec`, the code the servers run; request bytes come
from `loadtest.payloads`, the code the load test sends. Each path is checked to give back exactly
the array sent before it is timed, so a broken path fails instead of being measured.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import numpy as np
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import predict_pb2

from graphserve.core.codec import (
    array_from_proto,
    array_to_proto,
    decode_json_request,
    encode_json_response,
    json_depth,
    parse_predict_body,
    shape_proto,
    to_json_value,
)
from graphserve.core.results import JsonResult
from graphserve.core.signature import TensorSpec
from graphserve.loadtest.generator.payloads import build_payload, grpc_request_bytes, rest_body
from tools.bench.timing import Timing, interleave

__all__ = [
    "ENCODINGS",
    "JSON_SHAPES",
    "CodecMismatchError",
    "CodecTiming",
    "codec_suite",
    "json_suite",
]

ENCODINGS: tuple[str, ...] = ("tensor_content", "typed_fields", "json")
# The REST JSON codec before and after issue 15 C, on the shapes of its goals.
JSON_SHAPES: dict[str, tuple[int, ...]] = {"image": (1, 224, 224, 3), "mlp/b32": (32, 784)}

_MODEL, _INPUT, _OUTPUT = "bench", "images", "scores"


class CodecMismatchError(RuntimeError):
    """A codec path did not give back exactly the array that went in."""


@dataclass(frozen=True)
class CodecTiming(JsonResult):
    """Median server-side cost (ms per call) of one encoding, and its request size."""

    json_keys: ClassVar = (..., "total_ms")

    encoding: str
    request_bytes: int
    decode_ms: float
    encode_ms: float
    samples: int

    @property
    def total_ms(self) -> float:
        return self.decode_ms + self.encode_ms


@dataclass(frozen=True)
class _Codec:
    encoding: str
    request: bytes
    decode: Callable[[bytes], np.ndarray]
    encode: Callable[[np.ndarray], bytes]
    read_response: Callable[[bytes], np.ndarray]


def _decode_grpc(body: bytes) -> np.ndarray:
    request = predict_pb2.PredictRequest.FromString(body)
    return array_from_proto(request.inputs[_INPUT], _INPUT)


def _encode_tensor_content(array: np.ndarray) -> bytes:
    response = predict_pb2.PredictResponse()
    response.outputs[_OUTPUT].CopyFrom(array_to_proto(array, "float32"))
    return response.SerializeToString()


def _encode_typed_fields(array: np.ndarray) -> bytes:
    response = predict_pb2.PredictResponse()
    proto = response.outputs[_OUTPUT]
    proto.dtype = types_pb2.DT_FLOAT
    proto.tensor_shape.CopyFrom(shape_proto(array.shape))
    # .tolist() first: extending from the numpy array directly was ~6x slower (upb protobuf
    # converts numpy scalars one by one).
    proto.float_val.extend(array.ravel().tolist())
    return response.SerializeToString()


def _typed_request_bytes(array: np.ndarray) -> bytes:
    """A PredictRequest like the load test's, with the values in `float_val` instead."""
    request = predict_pb2.PredictRequest.FromString(grpc_request_bytes({_INPUT: array}, _MODEL))
    proto = request.inputs[_INPUT]
    proto.ClearField("tensor_content")
    proto.float_val.extend(array.ravel().tolist())
    return request.SerializeToString()


def _read_grpc_response(body: bytes) -> np.ndarray:
    return array_from_proto(predict_pb2.PredictResponse.FromString(body).outputs[_OUTPUT])


def _decode_json(body: bytes, specs: dict[str, TensorSpec]) -> np.ndarray:
    arrays, _ = decode_json_request(parse_predict_body(body), specs)
    return arrays[_INPUT]


def _encode_json(array: np.ndarray) -> bytes:
    return encode_json_response({_OUTPUT: array}, row_format=True)


def _decode_json_stdlib(body: bytes, specs: dict[str, TensorSpec]) -> np.ndarray:
    """The REST decode before issue 15: the depth check, json.loads, lists into numpy."""
    json_depth(body)
    arrays, _ = decode_json_request(json.loads(body), specs)
    return arrays[_INPUT]


def _encode_json_stdlib(array: np.ndarray) -> bytes:
    """The REST encode before issue 15: shortest float32 digits by way of str, json.dumps."""
    return json.dumps({"predictions": to_json_value(_OUTPUT, array)}).encode()


def _read_json_response(body: bytes) -> np.ndarray:
    return np.asarray(json.loads(body)["predictions"], dtype=np.float32)


def _codecs(array: np.ndarray) -> list[_Codec]:
    specs = {_INPUT: TensorSpec(_INPUT, "float32", (None, *array.shape[1:]))}
    return [
        _Codec(
            "tensor_content",
            grpc_request_bytes({_INPUT: array}, _MODEL),
            _decode_grpc,
            _encode_tensor_content,
            _read_grpc_response,
        ),
        _Codec(
            "typed_fields",
            _typed_request_bytes(array),
            _decode_grpc,
            _encode_typed_fields,
            _read_grpc_response,
        ),
        _Codec(
            "json",
            rest_body({_INPUT: array}, columnar=False),
            partial(_decode_json, specs=specs),
            _encode_json,
            _read_json_response,
        ),
    ]


def _check_round_trip(codec: _Codec, array: np.ndarray) -> None:
    """Raises CodecMismatchError unless decode and encode both give back `array` exactly."""
    for direction, got in (
        ("decoding the request", codec.decode(codec.request)),
        ("encoding the response", codec.read_response(codec.encode(array))),
    ):
        if got.dtype != array.dtype or not np.array_equal(got, array):
            raise CodecMismatchError(
                f"{codec.encoding}: {direction} gave {got.dtype} of shape {list(got.shape)} "
                f"that differs from the {array.dtype} of shape {list(array.shape)} sent"
            )


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Garbage collection off, as timeit does: JSON's ~50k lists per call set off collections of
    the whole heap (~100 ms with TensorFlow loaded) that land on decode or encode by chance and
    made their medians jump 3x from run to run. The codec paths make no cycles, so nothing
    piles up meanwhile."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def codec_suite(
    shape: tuple[int, ...] = (1, 224, 224, 3),
    *,
    budget_s: float = 3.0,
    min_samples: int = 5,
    seed: int = 0,
) -> list[CodecTiming]:
    """Median decode and encode time of a float32 tensor of `shape`, for each of ENCODINGS.

    The six calls (decode and encode of each encoding) are timed side by side in rounds by
    `bench.timing.interleave`, each about the same wall time per round, until `budget_s` has
    passed and every call has `min_samples`. `samples` is the smaller count of the two
    directions. Garbage collection is off while timing (see `_gc_paused`).

    Raises ValueError for an empty shape, a dimension below 1, a negative budget or min_samples
    below 1, and CodecMismatchError when a path does not give back the array sent.
    """
    array, _ = _sample(shape, budget_s, min_samples, seed)
    codecs = _codecs(array)
    for codec in codecs:
        _check_round_trip(codec, array)

    return _time(codecs, array, budget_s, min_samples)


def json_suite(
    shapes: dict[str, tuple[int, ...]] = JSON_SHAPES,
    *,
    budget_s: float = 3.0,
    min_samples: int = 5,
    seed: int = 0,
) -> dict[str, list[CodecTiming]]:
    """The REST JSON codec as it was before issue 15 (`json_stdlib`: the standard library) and
    as it is (`json`: pysimdjson in, orjson out), timed side by side as `codec_suite` times,
    for each named shape of float32 (`budget_s` each). Both decode the same request bytes and
    must give back exactly the array sent; raises as `codec_suite`."""
    out = {}
    for name, shape in shapes.items():
        array, specs = _sample(shape, budget_s, min_samples, seed)
        request = rest_body({_INPUT: array}, columnar=False)
        codecs = [
            _Codec(
                "json_stdlib",
                request,
                partial(_decode_json_stdlib, specs=specs),
                _encode_json_stdlib,
                _read_json_response,
            ),
            _Codec(
                "json",
                request,
                partial(_decode_json, specs=specs),
                _encode_json,
                _read_json_response,
            ),
        ]
        for codec in codecs:
            _check_round_trip(codec, array)
        out[name] = _time(codecs, array, budget_s, min_samples)
    return out


def _sample(
    shape: tuple[int, ...], budget_s: float, min_samples: int, seed: int
) -> tuple[np.ndarray, dict[str, TensorSpec]]:
    if not shape or min(shape) < 1:
        raise ValueError(f"shape must have a batch dimension and sizes >= 1, got {list(shape)}")
    if budget_s < 0 or min_samples < 1:
        raise ValueError(
            f"need budget_s >= 0 and min_samples >= 1, got {budget_s} and {min_samples}"
        )
    spec = TensorSpec(_INPUT, "float32", (None, *shape[1:]))
    array = build_payload([spec], batch_size=shape[0], seed=seed)[_INPUT]
    return array, {_INPUT: spec}


def _time(
    codecs: list[_Codec], array: np.ndarray, budget_s: float, min_samples: int
) -> list[CodecTiming]:
    calls: dict[str, Callable[[], object]] = {}
    for c in codecs:
        calls[f"{c.encoding} decode"] = partial(c.decode, c.request)
        calls[f"{c.encoding} encode"] = partial(c.encode, array)
    with _gc_paused():
        # One warm-up call: the round-trip check already ran every path once.
        timings = interleave(calls, budget_s=budget_s, warmup=1, min_samples=min_samples)
    return [
        _codec_timing(c, timings[f"{c.encoding} decode"], timings[f"{c.encoding} encode"])
        for c in codecs
    ]


def _codec_timing(codec: _Codec, decode: Timing, encode: Timing) -> CodecTiming:
    return CodecTiming(
        encoding=codec.encoding,
        request_bytes=len(codec.request),
        decode_ms=decode.p50_ms,
        encode_ms=encode.p50_ms,
        samples=min(decode.samples, encode.samples),
    )
