"""The open inference protocol's gRPC (V2: KServe's and Triton's `inference.GRPCInferenceService`),
the two messages the benchmark sends and reads, built from their field numbers at import.

Only ModelInfer is needed: a request of typed contents or raw bytes, and an answer whose output
comes back as raw bytes (Triton, KServe) or typed contents. The fields are those of
kserve/kserve's `grpc_predict_v2.proto` (Triton's `grpc_service.proto` is the same for these two
messages); nothing else of the service is declared.
"""

from __future__ import annotations

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tools.bench.peers.bodies import V2_DATATYPES

__all__ = ["MODEL_INFER", "decode_response", "encode_request"]

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"

_F = descriptor_pb2.FieldDescriptorProto
_NUMPY = {v: k for k, v in V2_DATATYPES.items()}


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="bench_v2_inference.proto", package="inference", syntax="proto3"
    )

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        m = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            field = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name

    one, many = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
    s, i64, b = _F.TYPE_STRING, _F.TYPE_INT64, _F.TYPE_BYTES
    msg = _F.TYPE_MESSAGE
    message(
        "InferTensorContents",
        ("int_contents", 3, _F.TYPE_INT32, many, ""),
        ("int64_contents", 4, i64, many, ""),
        ("fp32_contents", 6, _F.TYPE_FLOAT, many, ""),
        ("fp64_contents", 7, _F.TYPE_DOUBLE, many, ""),
    )
    tensor = (
        ("name", 1, s, one, ""),
        ("datatype", 2, s, one, ""),
        ("shape", 3, i64, many, ""),
        ("contents", 5, msg, one, ".inference.InferTensorContents"),
    )
    message("InferInputTensor", *tensor)
    message("InferOutputTensor", *tensor)
    message(
        "ModelInferRequest",
        ("model_name", 1, s, one, ""),
        ("model_version", 2, s, one, ""),
        ("inputs", 5, msg, many, ".inference.InferInputTensor"),
        ("raw_input_contents", 7, b, many, ""),
    )
    message(
        "ModelInferResponse",
        ("model_name", 1, s, one, ""),
        ("outputs", 5, msg, many, ".inference.InferOutputTensor"),
        ("raw_output_contents", 6, b, many, ""),
    )
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())
_Request = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("inference.ModelInferRequest")
)
_Response = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("inference.ModelInferResponse")
)


def encode_request(model_name: str, inputs: dict[str, np.ndarray]) -> bytes:
    """A serialized ModelInferRequest carrying `inputs` as raw little-endian bytes, as Triton's
    own clients send them."""
    request = _Request(model_name=model_name)
    for name, array in inputs.items():
        tensor = request.inputs.add(name=name, datatype=V2_DATATYPES[str(array.dtype)])
        tensor.shape.extend(array.shape)
        little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        request.raw_input_contents.append(little.tobytes())
    return bytes(request.SerializeToString())


def decode_response(body: bytes) -> np.ndarray:
    """The single output of a serialized ModelInferResponse, raw bytes or typed contents."""
    response = _Response.FromString(body)
    (output,) = response.outputs
    dtype = np.dtype(_NUMPY[output.datatype]).newbyteorder("<")
    if response.raw_output_contents:
        values = np.frombuffer(response.raw_output_contents[0], dtype=dtype)
    else:
        field = {"FP32": "fp32_contents", "FP64": "fp64_contents", "INT32": "int_contents",
                 "INT64": "int64_contents"}[output.datatype]  # fmt: skip
        values = np.asarray(getattr(output.contents, field), dtype=dtype)
    return values.reshape(tuple(output.shape)).astype(np.float32)
