"""TF Serving's `PredictionLog` records: the arrival time they carry, to the nanosecond.

A request log (serving.requestlog) and a traffic file are TFRecord files of
`tensorflow.serving.PredictionLog`s, TF Serving's own message. Its `LogMetadata` holds the
arrival time as `timestamp_secs`, whole seconds: too coarse to replay a load whose requests
come a fraction of a millisecond apart. The rest of the second, in nanoseconds, rides in the
same `LogMetadata` as field ARRIVAL_NANOS_FIELD, a number TF Serving's `logging.proto` does not
use. Proto3 keeps a field it does not know when it parses and writes a message again, so the
record stays a valid `PredictionLog` that any reader of TF Serving's protos (Python, C++, Go)
reads unchanged with the seconds where TF Serving puts them; graphserve reads the rest back with
`arrival_ns`. A record with no such field (one TF Serving's own code wrote, a warm-up record)
arrived at its whole second.
"""

from __future__ import annotations

from google.protobuf import unknown_fields
from tensorflow_serving.apis import logging_pb2, prediction_log_pb2

__all__ = ["ARRIVAL_NANOS_FIELD", "arrival_ns", "set_arrival"]

ARRIVAL_NANOS_FIELD = 1001  # in LogMetadata: the nanoseconds after timestamp_secs
_NANOS = 1_000_000_000
_VARINT = 0  # wire type


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


_TAG = _varint(ARRIVAL_NANOS_FIELD << 3 | _VARINT)


def set_arrival(metadata: logging_pb2.LogMetadata, arrived_ns: int) -> None:
    """Write `arrived_ns` (ns since the epoch) into `metadata`: the seconds in
    `timestamp_secs`, the rest in ARRIVAL_NANOS_FIELD."""
    seconds, nanos = divmod(arrived_ns, _NANOS)
    metadata.timestamp_secs = seconds
    if nanos:
        metadata.MergeFromString(_TAG + _varint(nanos))


def arrival_ns(log: prediction_log_pb2.PredictionLog) -> int:
    """When the request of `log` arrived, in ns since the epoch (its whole second if the
    record carries no nanoseconds)."""
    metadata = log.log_metadata
    nanos = 0
    for known in unknown_fields.UnknownFieldSet(metadata):
        if known.field_number == ARRIVAL_NANOS_FIELD and known.wire_type == _VARINT:
            nanos = int(known.data)
    return metadata.timestamp_secs * _NANOS + nanos
