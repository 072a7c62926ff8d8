import base64
import json

import numpy as np
import pytest
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2

from graphserve.core.codec import (
    array_from_proto,
    array_to_proto,
    decode_json_request,
    encode_json_response,
    encode_predict_response,
    parse_json_body,
    shape_proto,
    validate_inputs,
)
from graphserve.core.errors import InvalidInput
from graphserve.core.signature import TensorSpec

IMAGES = {"images": TensorSpec("images", "float32", (None, 3))}
TWO = {"a": TensorSpec("a", "float32", (None, 2)), "ids": TensorSpec("ids", "int64", (None,))}
TEXT = {"text": TensorSpec("text", "string", (None,))}


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.arange(6, dtype=np.float64).reshape(3, 2),
        np.array([[1, -2]], dtype=np.int32),
        np.array([2**40, -5], dtype=np.int64),
        np.array([0, 255], dtype=np.uint8),
        np.array([True, False, True]),
        np.array([0.5, -1.25], dtype=np.float16),
        np.array([b"a", b"\xff\x00"], dtype=object),
    ],
)
def test_proto_round_trip_keeps_values_dtype_and_shape(array: np.ndarray) -> None:
    decoded = array_from_proto(
        tensor_pb2.TensorProto.FromString(array_to_proto(array).SerializeToString())
    )
    assert decoded.shape == array.shape
    assert decoded.dtype == array.dtype
    np.testing.assert_array_equal(decoded, array)


def test_numbers_travel_as_tensor_content() -> None:
    proto = array_to_proto(np.ones((2, 3), dtype=np.float32))
    assert proto.dtype == types_pb2.DT_FLOAT
    assert len(proto.tensor_content) == 24 and not proto.float_val


def _typed(dtype: int, shape: tuple[int, ...], **values: list) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape_proto(shape))
    for field, vals in values.items():
        getattr(proto, field).extend(vals)
    return proto


def test_typed_value_fields_are_decoded() -> None:
    floats = array_from_proto(_typed(types_pb2.DT_FLOAT, (2, 2), float_val=[1, 2, 3, 4]))
    np.testing.assert_array_equal(floats, np.array([[1, 2], [3, 4]], dtype=np.float32))
    ints = array_from_proto(_typed(types_pb2.DT_INT64, (3,), int64_val=[7, 8, 9]))
    assert ints.dtype == np.int64 and ints.tolist() == [7, 8, 9]
    strings = array_from_proto(_typed(types_pb2.DT_STRING, (2,), string_val=[b"x", b"y"]))
    assert strings.tolist() == [b"x", b"y"]
    half_bits = np.array([1.5, -2.0], dtype=np.float16).view(np.uint16).tolist()
    halves = array_from_proto(_typed(types_pb2.DT_HALF, (2,), half_val=half_bits))
    assert halves.tolist() == [1.5, -2.0]


def test_single_typed_value_fills_the_shape_as_tensorflow_does() -> None:
    filled = array_from_proto(_typed(types_pb2.DT_FLOAT, (2, 3), float_val=[0.5]))
    np.testing.assert_array_equal(filled, np.full((2, 3), 0.5, dtype=np.float32))


def test_wrong_value_count_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match=r"input 'x': float_val holds 3 values, expected 4"):
        array_from_proto(_typed(types_pb2.DT_FLOAT, (2, 2), float_val=[1, 2, 3]), "x")
    bad = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_FLOAT, tensor_shape=shape_proto((2,)), tensor_content=b"123"
    )
    with pytest.raises(InvalidInput, match="tensor_content holds 3 bytes, expected 8"):
        array_from_proto(bad, "x")


def test_row_format_single_input() -> None:
    inputs, fmt = decode_json_request({"instances": [[1, 2, 3], [4, 5, 6]]}, IMAGES)
    assert fmt == "row"
    assert inputs["images"].dtype == np.float32 and inputs["images"].shape == (2, 3)


def test_row_format_named_inputs_are_stacked() -> None:
    body = {"instances": [{"a": [1, 2], "ids": 3}, {"a": [3, 4], "ids": 4}]}
    inputs, _ = decode_json_request(body, TWO)
    assert inputs["a"].tolist() == [[1, 2], [3, 4]] and inputs["a"].dtype == np.float32
    assert inputs["ids"].tolist() == [3, 4] and inputs["ids"].dtype == np.int64


def test_columnar_format_and_b64_strings() -> None:
    inputs, fmt = decode_json_request({"inputs": {"a": [[1, 2]], "ids": [9]}}, TWO)
    assert fmt == "columnar" and inputs["ids"].tolist() == [9]
    encoded = base64.b64encode(b"\x00\xff").decode()
    text, _ = decode_json_request({"instances": ["hi", {"b64": encoded}]}, TEXT)
    assert text["text"].tolist() == [b"hi", b"\x00\xff"]


@pytest.mark.parametrize(
    ("body", "specs", "message"),
    [
        (
            {"instances": [[1, 2, 3]], "inputs": [[1, 2, 3]]},
            IMAGES,
            "both 'instances' and 'inputs'",
        ),
        ({"signature_name": "x"}, IMAGES, "must have 'instances'"),
        ({"instances": [[1, 2, 3], [4, 5]]}, IMAGES, "input 'images' is ragged"),
        ({"instances": [["a", "b", "c"]]}, IMAGES, "input 'images' expects float32 .* got strings"),
        (
            {"instances": [{"a": [1.5, 2]}], "x": 1},
            {"a": TensorSpec("a", "int32", (None, 2))},
            "expects int32 .* got floating-point",
        ),
        ({"instances": [300]}, {"u": TensorSpec("u", "uint8", (None,))}, "out of range for uint8"),
        ({"instances": [{"b64": "!!"}]}, TEXT, "not valid base64"),
        ({"instances": [[1, 2]]}, TWO, "each instance must be an object keyed by input name"),
        ({"instances": []}, IMAGES, "No values in 'instances' array: send at least one row"),
    ],
)
def test_bad_json_requests_say_what_is_wrong(body: dict, specs: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        decode_json_request(body, specs)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "JSON Parse error: The document is empty"),
        (b"{nope", "not valid JSON"),
        (b"[1]", "must be a JSON object"),
    ],
)
def test_bodies_that_are_not_json_objects(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_json_body(raw)


def test_validate_inputs_names_input_expected_and_got() -> None:
    with pytest.raises(InvalidInput, match=r"missing input 'images': expected float32"):
        validate_inputs({}, IMAGES)
    with pytest.raises(InvalidInput, match=r"unknown input 'x': this signature takes 'images'"):
        validate_inputs({"x": np.zeros(1)}, IMAGES)
    with pytest.raises(
        InvalidInput,
        match=r"input 'images' expects float32 of shape \[-1, 3\], got int64 of shape \[2, 4\]",
    ):
        validate_inputs({"images": np.zeros((2, 4), dtype=np.int64)}, IMAGES)
    ok = validate_inputs({"images": np.zeros((5, 3), dtype=np.float32)}, IMAGES)
    assert ok["images"].shape == (5, 3)


def test_responses_in_tf_serving_shapes() -> None:
    one = {"output_0": np.array([[1.5, 2.0]], dtype=np.float32)}
    assert json.loads(encode_json_response(one, row_format=True)) == {"predictions": [[1.5, 2.0]]}
    assert json.loads(encode_json_response(one, row_format=False)) == {"outputs": [[1.5, 2.0]]}
    two = {"scores": np.array([[1.0], [2.0]]), "best": np.array([0, 1])}
    assert json.loads(encode_json_response(two, row_format=True)) == {
        "predictions": [{"scores": [1.0], "best": 0}, {"scores": [2.0], "best": 1}]
    }
    assert json.loads(encode_json_response(two, row_format=False)) == {
        "outputs": {"scores": [[1.0], [2.0]], "best": [0, 1]}
    }
    text = {
        "label": np.array([b"cat"], dtype=object),
        "raw_bytes": np.array([b"\x01"], dtype=object),
    }
    assert json.loads(encode_json_response(text, row_format=False)) == {
        "outputs": {"label": ["cat"], "raw_bytes": [{"b64": "AQ=="}]}
    }


def _message_answer(
    model: str, version: int, signature: str, outputs: dict[str, tuple[np.ndarray, str]]
) -> predict_pb2.PredictResponse:
    """The PredictResponse as the server built it before answers were written out: a ModelSpec
    and each output through array_to_proto's typed fields."""
    response = predict_pb2.PredictResponse()
    response.model_spec.name = model
    response.model_spec.version.value = version
    response.model_spec.signature_name = signature
    for name, (array, dtype) in outputs.items():
        response.outputs[name].CopyFrom(array_to_proto(array, dtype, typed_fields=True))
    return response


_RNG = np.random.default_rng(3)


@pytest.mark.parametrize(
    ("model", "version", "signature", "outputs"),
    [
        ("mlp", 1, "serving_default", {"probs": (_RNG.random((1, 10), np.float32), "float32")}),
        # a scalar, an empty tensor, version 0 (an empty Int64Value), no signature name
        ("m", 0, "", {"a": (np.float32(3.5), "float32"), "b": (np.zeros((0, 3)), "float64")}),
        # no model name, float64, a float64 array declared float32, non-contiguous
        ("", 300, "s", {"x": (_RNG.random((2, 3, 4)), "float64"),
                        "y": (np.arange(12.0).reshape(3, 4)[:, ::2], "float32")}),
        # lengths past one varint byte: a long name, a large version, 1000 values
        ("big", 2**40, "sig", {"o" * 200: (_RNG.random(1000).astype(np.float32), "float32")}),
        # values protobuf writes specially: NaN, infinities, negative zero, subnormals
        ("v", 7, "x", {"s": (np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45], np.float32),
                             "float32")}),
    ],
)  # fmt: skip
def test_a_written_out_predict_response_parses_to_the_message_the_server_built(
    model: str, version: int, signature: str, outputs: dict[str, tuple[np.ndarray, str]]
) -> None:
    encoded = encode_predict_response(model, version, signature, outputs)
    assert encoded is not None
    got = predict_pb2.PredictResponse.FromString(encoded)
    want = _message_answer(model, version, signature, outputs)
    assert got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool", "string", "float16", "uint8"])
def test_an_answer_with_an_output_of_another_dtype_is_left_to_the_message(dtype: str) -> None:
    outputs = {
        "f": (np.zeros(2, np.float32), "float32"),
        "o": (np.zeros(2, "U1" if dtype == "string" else dtype), dtype),
    }
    assert encode_predict_response("m", 1, "", outputs) is None
