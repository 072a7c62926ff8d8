"""A rollout under recorded traffic: the requests its locust users cycle through, and the
answers they keep, in two files of OUT/raw that both processes read without TensorFlow.

    REQUESTS   each serialized PredictRequest, after its length (4 bytes, little-endian)
    ANSWERS    each version's first answer to each record: record (4 bytes, signed), version
               (8), the PredictResponse's length (4), its bytes

The controller writes REQUESTS from the traffic file (its predict records of the model, sent to
the rollout's model with no version pinned, so whichever version serves answers); the locust
process writes ANSWERS when its users stop.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from graphserve.core.errors import LoadTestError

if TYPE_CHECKING:
    from graphserve.loadtest.rollouts.spec import RolloutSpec

__all__ = [
    "ANSWERS",
    "REQUESTS",
    "read_answers",
    "read_requests",
    "traffic_requests",
    "write_answers",
    "write_requests",
]

REQUESTS = "requests.bin"
ANSWERS = "answers.bin"
_LENGTH = struct.Struct("<I")
_ANSWER = struct.Struct("<iqI")


class TrafficLoadError(LoadTestError):
    """A traffic file a rollout cannot send (exit 2, before any load)."""

    exit_code = 2


def traffic_requests(spec: RolloutSpec) -> list[bytes]:
    """The predict requests of `spec.traffic` for `spec.traffic_model` (default: the rollout's
    model), each sent to the rollout's model. TrafficError for a file that cannot be read,
    TrafficLoadError for one with no such request."""
    from collections import Counter

    from graphserve.model.traffic import read_traffic

    assert spec.traffic is not None
    records = read_traffic(spec.traffic).records
    wanted = spec.traffic_model or spec.name
    kept = [r for r in records if r.kind == "predict" and r.model == wanted]
    if not kept:
        held = Counter(f"{r.kind} of {r.model!r}" for r in records)
        raise TrafficLoadError(
            f"--traffic {spec.traffic}: no predict request of model {wanted!r} (it holds "
            + ", ".join(f"{n} {what}" for what, n in held.most_common())
            + "); a rollout sends Predict: name the model with --traffic-model"
        )
    out = []
    for record in kept:
        request = type(record.log.predict_log.request)()
        request.CopyFrom(record.log.predict_log.request)
        request.model_spec.name = spec.name
        request.model_spec.ClearField("version_choice")
        if spec.signature_name and not request.model_spec.signature_name:
            request.model_spec.signature_name = spec.signature_name
        out.append(request.SerializeToString())
    return out


def write_requests(path: Path, requests: Iterable[bytes]) -> None:
    with path.open("wb") as f:
        for body in requests:
            f.write(_LENGTH.pack(len(body)))
            f.write(body)


def read_requests(path: Path) -> list[bytes]:
    data, out, at = path.read_bytes(), [], 0
    while at < len(data):
        (size,) = _LENGTH.unpack_from(data, at)
        at += _LENGTH.size
        out.append(data[at : at + size])
        at += size
    return out


def write_answers(path: Path, answers: Mapping[tuple[int, int], bytes]) -> None:
    partial = path.with_suffix(".partial")
    with partial.open("wb") as f:
        for (record, version), body in sorted(answers.items()):
            f.write(_ANSWER.pack(record, version, len(body)))
            f.write(body)
    partial.replace(path)


def read_answers(raw: Path) -> dict[tuple[int, int], bytes]:
    """(record, version) -> the PredictResponse's bytes; none when the users kept none."""
    path = raw / ANSWERS
    return dict(_answers(path.read_bytes())) if path.exists() else {}


def _answers(data: bytes) -> Iterator[tuple[tuple[int, int], bytes]]:
    at = 0
    while at < len(data):
        record, version, size = _ANSWER.unpack_from(data, at)
        at += _ANSWER.size
        yield (record, version), data[at : at + size]
        at += size
