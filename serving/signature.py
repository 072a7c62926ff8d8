"""A served signature: names, dtypes and shapes of its inputs and outputs, and its SignatureDef.

The SignatureDef is what GetModelMetadata returns. For a SavedModel it is read from the file,
exactly as TensorFlow Serving reports it; for the eager server it is built from the specs.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorflow.core.protobuf import meta_graph_pb2

from graphserve.core.codec import DTYPE_TO_ENUM, shape_proto
from graphserve.core.signature import (
    PREDICT_METHOD,
    SERVING_DEFAULT,
    TensorSpec,
    spec_from_tensor_info,
)

__all__ = ["PREDICT_METHOD", "SERVING_DEFAULT", "ServedSignature"]


@dataclass(frozen=True)
class ServedSignature:
    name: str
    method_name: str
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    signature_def: meta_graph_pb2.SignatureDef

    @classmethod
    def from_signature_def(
        cls, name: str, signature_def: meta_graph_pb2.SignatureDef
    ) -> ServedSignature:
        return cls(
            name=name,
            method_name=signature_def.method_name,
            inputs=_specs(signature_def.inputs),
            outputs=_specs(signature_def.outputs),
            signature_def=signature_def,
        )

    @classmethod
    def from_specs(
        cls, name: str, inputs: list[TensorSpec], outputs: list[TensorSpec]
    ) -> ServedSignature:
        sig = meta_graph_pb2.SignatureDef(method_name=PREDICT_METHOD)
        for spec in inputs:
            _fill(sig.inputs[spec.name], spec, f"{name}_{spec.name}:0")
        for i, spec in enumerate(outputs):
            _fill(sig.outputs[spec.name], spec, f"StatefulPartitionedCall:{i}")
        return cls(
            name=name,
            method_name=PREDICT_METHOD,
            inputs={s.name: s for s in inputs},
            outputs={s.name: s for s in outputs},
            signature_def=sig,
        )


def _fill(info: meta_graph_pb2.TensorInfo, spec: TensorSpec, tensor_name: str) -> None:
    info.name = tensor_name
    info.dtype = DTYPE_TO_ENUM[spec.dtype]
    info.tensor_shape.CopyFrom(shape_proto(spec.shape))


def _specs(infos: object) -> dict[str, TensorSpec]:
    return {key: spec_from_tensor_info(key, info) for key, info in infos.items()}  # type: ignore[attr-defined]
