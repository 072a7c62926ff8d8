"""The request bodies and answers the peers share: TF Serving's REST predict (V1) and the open
inference protocol's REST infer (V2, KServe's and Triton's), as their clients write them."""

from __future__ import annotations

import json

import numpy as np

from tools.bench.peers.base import Inputs

__all__ = ["V2_DATATYPES", "tfserving_decode", "tfserving_encode", "v2_decode", "v2_encode"]

V2_DATATYPES = {"float32": "FP32", "float64": "FP64", "int32": "INT32", "int64": "INT64"}


def tfserving_encode(_name: str, inputs: Inputs) -> bytes:
    """`{"instances": [...]}`, rows: one input, so each instance is its row."""
    ((_, array),) = inputs.items()
    return json.dumps({"instances": array.tolist()}).encode()


def tfserving_decode(body: bytes) -> np.ndarray:
    """`{"predictions": [...]}` with one output."""
    return np.asarray(json.loads(body)["predictions"], dtype=np.float32)


def v2_encode(_name: str, inputs: Inputs) -> bytes:
    """`{"inputs": [{"name", "shape", "datatype", "data"}]}`, data flat in row-major order."""
    tensors = [
        {
            "name": name,
            "shape": list(array.shape),
            "datatype": V2_DATATYPES[str(array.dtype)],
            "data": array.ravel().tolist(),
        }
        for name, array in inputs.items()
    ]
    return json.dumps({"inputs": tensors}).encode()


def v2_decode(body: bytes) -> np.ndarray:
    """The single output of `{"outputs": [{"name", "shape", "datatype", "data"}]}`."""
    (output,) = json.loads(body)["outputs"]
    return np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])
