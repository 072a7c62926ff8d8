"""Warm-up records: `assets.extra/tf_serving_warmup_requests`, as TensorFlow Serving reads them.

A TFRecord file of `PredictionLog` protos, each holding one `PredictRequest`. TF Serving replays
them when it loads a version, before the version takes traffic, so the first real request does not
pay for allocation and cold caches; it refuses files with more than 1000 records. Our servers replay
the same file the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from graphserve.core.codec import array_to_proto
from graphserve.core.inputs import sample_inputs
from graphserve.core.signature import SERVING_DEFAULT, TensorSpec, ValueRange

__all__ = [
    "MAX_WARMUP_RECORDS",
    "WARMUP_FILE",
    "read_warmup_records",
    "replay_warmup",
    "warmup_requests",
    "write_warmup_records",
]

WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
MAX_WARMUP_RECORDS = 1000  # TF Serving's limit (saved_model_warmup_util.cc)

# Batch sizes the records cycle through, so each common size is warm (clamped to fixed dims).
_BATCH_SIZES = (1, 2, 4, 8, 16, 32)


def warmup_requests(
    model_name: str,
    signatures: Mapping[str, Sequence[TensorSpec]],
    samples: int,
    *,
    seed: int = 0,
    fixed: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    ranges: Mapping[str, ValueRange] | None = None,
) -> list[predict_pb2.PredictRequest]:
    """`samples` requests per signature, at batch sizes cycling 1, 2, 4, ...

    `fixed` gives user samples per signature (name → arrays) to slice batches from instead of
    generated inputs (within `ranges`, by input name). Raises ValueError if the total passes
    TF Serving's limit.
    """
    total = samples * len(signatures)
    if total > MAX_WARMUP_RECORDS:
        raise ValueError(
            f"{samples} warm-up samples for {len(signatures)} signatures make {total} records; "
            f"TensorFlow Serving reads at most {MAX_WARMUP_RECORDS}"
        )
    requests = []
    for sig_name, specs in signatures.items():
        for i in range(samples):
            batch = _BATCH_SIZES[i % len(_BATCH_SIZES)]
            user = (fixed or {}).get(sig_name)
            if user:
                rows = len(next(iter(user.values())))
                start = (i * batch) % max(rows, 1)
                arrays = {k: v[start : start + batch] for k, v in user.items()}
            else:
                arrays = sample_inputs(specs, batch_size=batch, seed=seed + i, ranges=ranges)
            request = predict_pb2.PredictRequest()
            request.model_spec.name = model_name
            request.model_spec.signature_name = sig_name
            for name, array in arrays.items():
                request.inputs[name].CopyFrom(array_to_proto(array))
            requests.append(request)
    return requests


def write_warmup_records(version_dir: Path, requests: Sequence[predict_pb2.PredictRequest]) -> Path:
    """Write `requests` as PredictionLog records under `version_dir`; returns the file."""
    path = Path(version_dir) / WARMUP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())
    return path


def read_warmup_records(version_dir: Path) -> Iterator[prediction_log_pb2.PredictionLog]:
    """The PredictionLogs of `version_dir`'s warm-up file (none if it has no such file)."""
    path = Path(version_dir) / WARMUP_FILE
    if not path.is_file():
        return
    # TFRecord's own reader (CRCs checked), not tf.data: a tf.data pipeline costs 20 ms to build
    # and run for four records, half of what loading the example MLP on demand took.
    for record in tf.compat.v1.io.tf_record_iterator(str(path)):
        yield prediction_log_pb2.PredictionLog.FromString(record)


def replay_warmup(version_dir: Path, run: Callable[[str, dict[str, np.ndarray]], object]) -> int:
    """Run every warm-up record through `run(signature, inputs)`, as a server does on load.

    Returns the number of records; exceptions from `run` propagate (a record the model rejects).
    """
    from graphserve.core.codec import array_from_proto

    count = 0
    for log in read_warmup_records(version_dir):
        request = log.predict_log.request
        signature = request.model_spec.signature_name or SERVING_DEFAULT
        run(signature, {k: array_from_proto(v, k) for k, v in request.inputs.items()})
        count += 1
    return count
