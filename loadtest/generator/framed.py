"""Recorded requests and their answers, framed in two files every process reads without
TensorFlow: what a load under a traffic file cycles through, and what it keeps of the answers.

    REQUESTS   each encoded request (a serialized PredictRequest or a JSON body), after its
               length (4 bytes, little-endian)
    ANSWERS    the first answer of each (record, key): record (4 bytes, signed), key (8: the
               answering version in a rollout, the arm in a comparison), the answer's length
               (4), its bytes

The controller writes REQUESTS before the load; the locust process (or the master, with what its
workers sent) writes ANSWERS when its users stop.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

__all__ = [
    "ANSWERS",
    "REQUESTS",
    "read_answers",
    "read_requests",
    "write_answers",
    "write_requests",
]

REQUESTS = "requests.bin"
ANSWERS = "answers.bin"
_LENGTH = struct.Struct("<I")
_ANSWER = struct.Struct("<iqI")


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
    """Written whole or not at all (a reader never sees half a file)."""
    partial = path.with_suffix(".partial")
    with partial.open("wb") as f:
        for (record, key), body in sorted(answers.items()):
            f.write(_ANSWER.pack(record, key, len(body)))
            f.write(body)
    partial.replace(path)


def read_answers(raw: Path) -> dict[tuple[int, int], bytes]:
    """(record, key) -> the answer's bytes; none when the users kept none."""
    path = raw / ANSWERS
    return dict(_answers(path.read_bytes())) if path.exists() else {}


def _answers(data: bytes) -> Iterator[tuple[tuple[int, int], bytes]]:
    at = 0
    while at < len(data):
        record, key, size = _ANSWER.unpack_from(data, at)
        at += _ANSWER.size
        yield (record, key), data[at : at + size]
        at += size
