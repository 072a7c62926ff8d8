"""Request payloads: built once from a signature, saved to `.npz`, encoded once per protocol.

Every arm of a comparison gets the same inputs (one `.npz` file), and each locust process encodes
them once: the gRPC user sends the same serialized PredictRequest bytes every time, the REST user
the same JSON body, so the load generator spends its time waiting on the server, not encoding.

The `.npz` holds plain arrays and is read with `allow_pickle=False`. A string input NAME is stored
as two arrays, `NAME:bytes` (all values concatenated, uint8) and `NAME:lengths` (int64, the tensor's
shape), which keeps arbitrary bytes exact without pickling.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from graphserve.core import fastjson
from graphserve.core.client import predict_request
from graphserve.core.codec import as_bytes, tensor_json_values
from graphserve.core.errors import PayloadError
from graphserve.core.inputs import InputSource
from graphserve.core.signature import SERVING_DEFAULT, TensorSpec

__all__ = [
    "build_payload",
    "grpc_request_bytes",
    "load_payload",
    "rest_body",
    "save_payload",
]

_BYTES, _LENGTHS = ":bytes", ":lengths"


def build_payload(
    specs: Iterable[TensorSpec],
    batch_size: int = 1,
    seed: int = 0,
    inputs: InputSource | None = None,
    signature: str = SERVING_DEFAULT,
) -> dict[str, np.ndarray]:
    """Inputs for `specs` with `batch_size` rows, the same for the same seed: from `inputs`
    (what the export recorded: the user's samples, or generated within its ranges), else
    generated (graphserve.core.inputs)."""
    if batch_size < 1:
        raise PayloadError(f"batch size must be at least 1, got {batch_size}")
    specs = list(specs)
    if not specs:
        raise PayloadError("the signature has no inputs, so there is nothing to send")
    return (inputs or InputSource()).batch(signature, specs, batch_size, seed)


def save_payload(path: Path, inputs: Mapping[str, np.ndarray]) -> None:
    """Write `inputs` to an `.npz` file that `load_payload` reads without pickle."""
    arrays: dict[str, np.ndarray] = {}
    for name, array in inputs.items():
        if array.dtype.kind in "OSU":
            values = [as_bytes(v) for v in array.reshape(-1)]
            arrays[name + _BYTES] = np.frombuffer(b"".join(values), dtype=np.uint8)
            arrays[name + _LENGTHS] = np.array([len(v) for v in values], np.int64).reshape(
                array.shape
            )
        else:
            arrays[name] = array
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]


def load_payload(path: Path) -> dict[str, np.ndarray]:
    """Read an `.npz` written by `save_payload` (or plain numeric/text arrays saved by numpy).

    Raises PayloadError when the file is missing, not an `.npz`, or holds pickled objects.
    """
    try:
        with np.load(path, allow_pickle=False) as npz:
            stored = {key: npz[key] for key in npz.files}
    except FileNotFoundError:
        raise PayloadError(f"payload file {str(path)!r} does not exist") from None
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise PayloadError(
            f"payload file {str(path)!r} is not a pickle-free .npz of arrays: {exc}"
        ) from None
    inputs: dict[str, np.ndarray] = {}
    for key, array in stored.items():
        if key.endswith(_LENGTHS):
            continue
        if key.endswith(_BYTES):
            name = key.removesuffix(_BYTES)
            if name + _LENGTHS not in stored:
                raise PayloadError(
                    f"payload file {str(path)!r}: {key!r} has no {name + _LENGTHS!r} beside it"
                )
            inputs[name] = _split_bytes(array, stored[name + _LENGTHS])
        elif array.dtype.kind in "SU":
            inputs[key] = _to_object_bytes(array)
        else:
            inputs[key] = array
    if not inputs:
        raise PayloadError(f"payload file {str(path)!r} holds no inputs")
    return inputs


def grpc_request_bytes(
    inputs: Mapping[str, np.ndarray], model_name: str, signature_name: str = "serving_default"
) -> bytes:
    """A serialized `PredictRequest`: numbers as `tensor_content`, strings as `string_val`."""
    request = predict_request(model_name, inputs, signature_name=signature_name)
    return request.SerializeToString()


def rest_body(
    inputs: Mapping[str, np.ndarray],
    signature_name: str = "serving_default",
    columnar: bool | None = None,
) -> bytes:
    """A TF Serving predict body, columnar (`inputs`) or row (`instances`) format, numbers as TF
    Serving writes them (core.codec.tensor_json_values).

    `columnar=None` picks the row format when every input has the same batch size, else the
    columnar format, which has no such constraint. Raises PayloadError when the row format is
    asked for inputs it cannot express.
    """
    values, fast = tensor_json_values(inputs)
    body: dict[str, Any] = {"signature_name": signature_name}
    batches = {array.shape[0] if array.ndim else -1 for array in inputs.values()}
    row_ok = len(batches) == 1 and -1 not in batches
    if columnar is False and not row_ok:
        raise PayloadError(
            "the row format (instances) needs every input batched alike, got batch sizes "
            f"{sorted(batches)}: use the columnar format"
        )
    if columnar or not row_ok:
        body["inputs"] = values
    elif len(values) == 1:
        body["instances"] = next(iter(values.values()))
    else:
        (rows,) = batches
        body["instances"] = [{name: v[i] for name, v in values.items()} for i in range(rows)]
    if fast:  # orjson writes the arrays themselves (a 224×224×3 image: ms, not a third of a s)
        return fastjson.dump(body)
    return json.dumps(body, separators=(",", ":")).encode()  # NaN and infinities: bare tokens


def _split_bytes(data: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    raw = data.tobytes()
    if int(lengths.sum()) != len(raw):
        raise PayloadError(
            f"string payload holds {len(raw)} bytes but its lengths add up to {int(lengths.sum())}"
        )
    sizes = lengths.reshape(-1).tolist()
    ends = np.cumsum(sizes, dtype=np.int64).tolist()
    flat = np.empty(len(sizes), dtype=object)
    flat[:] = [raw[end - n : end] for end, n in zip(ends, sizes, strict=True)]
    return flat.reshape(lengths.shape)


def _to_object_bytes(array: np.ndarray) -> np.ndarray:
    flat = np.empty(array.size, dtype=object)
    flat[:] = [as_bytes(v) for v in array.reshape(-1).tolist()]
    return flat.reshape(array.shape)
