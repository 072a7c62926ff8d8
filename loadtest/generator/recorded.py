"""A traffic file's records as the requests a replay sends, each encoded once per protocol.

A record holds the request as gRPC's message (a REST request is logged as the message it is
equivalent to, serving.requestlog). Over gRPC the replay sends that message's bytes; over REST
the body TF Serving's REST API takes for it: a predict request's inputs as a row (`instances`) or
columnar (`inputs`) body, a classify or regress request's tf.Examples as `examples` (with
`context`), bytes as `{"b64": ...}`. TF Serving's REST API has no MultiInference: such a record
cannot be sent over REST, and the replay says how many it left out.

Everything is encoded before the load starts, so the send loop only writes bytes. A record's
logged answer is kept beside it, normalised as graphserve.loadtest.results.answers reads every
answer, for the check against what the server said when the traffic was recorded.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphserve.core.client import rest_path
from graphserve.core.codec import array_from_proto
from graphserve.core.errors import LoadTestError
from graphserve.loadtest.generator.payloads import rest_body
from graphserve.loadtest.results.answers import Answer, grpc_answer
from graphserve.model.traffic import Record

__all__ = ["RPCS", "Prepared", "TrafficLoadError", "predict_records", "prepare", "shape_label"]

# the RPC of each kind of record, and its REST verb (None: TF Serving's REST API has none)
RPCS: dict[str, tuple[str, str | None]] = {
    "predict": ("Predict", "predict"),
    "classify": ("Classify", "classify"),
    "regress": ("Regress", "regress"),
    "multi_inference": ("MultiInference", None),
}


class TrafficLoadError(LoadTestError):
    """A traffic file a load cannot send (exit 2, before any load)."""

    exit_code = 2


def predict_records(
    records: Sequence[Record], model: str, flag: str, signature: str | None = None
) -> list[int]:
    """The numbers of `records`' predict requests of `model` (and of `signature`, when given):
    what a load that sends Predict cycles through. TrafficLoadError, naming what the file holds
    and `flag` (the option that picks another model), when there is none."""
    from collections import Counter

    kept = [
        n
        for n, r in enumerate(records)
        if r.kind == "predict" and r.model == model and signature in (None, r.signature)
    ]
    if kept:
        return kept
    held = Counter(f"{r.kind} of {r.model!r} ({r.signature})" for r in records)
    wanted = f"model {model!r}" + (f", signature {signature!r}" if signature else "")
    raise TrafficLoadError(
        f"no predict request of {wanted} (the file holds "
        + ", ".join(f"{n} {what}" for what, n in held.most_common(6))
        + f"): this load sends Predict; name the file's model with {flag}"
    )


@dataclass(frozen=True, slots=True)
class Prepared:
    """One record, ready to send: its place in the file, what it is (kind, shape, rows), its
    bytes for each protocol, and the answer the log holds for it (None: none logged)."""

    index: int  # the record's number in the traffic file, from 0
    kind: str
    rpc: str
    shape: str  # "images [4, 784]": the shape of each input, or the examples' count
    dims: tuple[tuple[int, ...], ...]  # each input's shape, in the label's order: for sorting
    rows: int
    grpc: bytes
    rest_path: str | None  # None: no REST equivalent (MultiInference)
    rest_body: bytes | None
    logged: Answer | None

    def curl(self, base_url: str) -> str | None:
        """The command that sends this request again over REST (its body from a file named
        after the record), None without a REST equivalent."""
        if self.rest_path is None:
            return None
        return (
            f"curl -s -X POST -H 'Content-Type: application/json' "
            f"--data-binary @request-{self.index}.json '{base_url}{self.rest_path}'"
        )


def prepare(
    records: Sequence[Record],
    *,
    indices: Sequence[int] | None = None,
    model: str | None = None,
    columnar: bool | None = None,
) -> list[Prepared]:
    """Every record encoded for both protocols; sent to `model` in place of the name it
    records (a version or label it pins is dropped with it: it named the other model's).
    `indices` are the records' numbers in their file (default: their places in `records`)."""
    numbers = list(indices) if indices is not None else list(range(len(records)))
    return [
        _prepare(number, record, model, columnar)
        for number, record in zip(numbers, records, strict=True)
    ]


def _prepare(index: int, record: Record, model: str | None, columnar: bool | None) -> Prepared:
    entry = getattr(record.log, f"{record.kind}_log")
    request = type(entry.request)()
    request.CopyFrom(entry.request)
    if model is not None:
        specs = (
            [task.model_spec for task in request.tasks]
            if record.kind == "multi_inference"
            else [request.model_spec]
        )
        for spec in specs:
            spec.name = model
            spec.ClearField("version_choice")
    rpc, verb = RPCS[record.kind]
    path = body = None
    if verb is not None:
        spec = request.model_spec
        which = spec.WhichOneof("version_choice")
        path = rest_path(
            spec.name,
            verb,
            version=spec.version.value if which == "version" else None,
            label=spec.version_label if which == "version_label" else None,
        )
        body = _rest_body(record.kind, request, columnar)
    logged = grpc_answer(record.kind, entry.response) if entry.HasField("response") else None
    return Prepared(
        index=index,
        kind=record.kind,
        rpc=rpc,
        shape=shape_label(record.shapes),
        dims=tuple(dims for _, dims in record.shapes),
        rows=record.rows,
        grpc=request.SerializeToString(),
        rest_path=path,
        rest_body=body,
        logged=logged,
    )


def shape_label(shapes: Sequence[tuple[str, tuple[int, ...]]]) -> str:
    """`images [4, 784]`; inputs of one shape named together: `ids, mask [2, 128]`."""
    if len(shapes) > 1 and len({dims for _, dims in shapes}) == 1:
        return f"{', '.join(name for name, _ in shapes)} {list(shapes[0][1])}"
    return ", ".join(f"{name} {list(dims)}" for name, dims in shapes) or "-"


def _rest_body(kind: str, request: Any, columnar: bool | None) -> bytes:
    signature = request.model_spec.signature_name or "serving_default"
    if kind == "predict":
        inputs = {name: array_from_proto(t, name) for name, t in request.inputs.items()}
        return rest_body(inputs, signature, columnar=columnar)
    body: dict[str, Any] = {"signature_name": signature}
    which = request.input.WhichOneof("kind")
    if which == "example_list":
        body["examples"] = [_features(e) for e in request.input.example_list.examples]
    elif which == "example_list_with_context":
        both = request.input.example_list_with_context
        body["examples"] = [_features(e) for e in both.examples]
        body["context"] = _features(both.context)
    else:
        body["examples"] = []
    return json.dumps(body, separators=(",", ":")).encode()


def _features(example: Any) -> dict[str, Any]:
    """A tf.Example as TF Serving's REST API writes one: each feature's values as a list (one
    value alone as itself), bytes as {"b64": ...}."""
    out: dict[str, Any] = {}
    for name, feature in sorted(example.features.feature.items()):
        which = feature.WhichOneof("kind")
        if which == "bytes_list":
            values: list[Any] = [
                {"b64": base64.b64encode(v).decode()} for v in feature.bytes_list.value
            ]
        elif which == "float_list":
            values = [_float(v) for v in np.asarray(feature.float_list.value, np.float32)]
        elif which == "int64_list":
            values = list(feature.int64_list.value)
        else:
            values = []
        out[name] = values[0] if len(values) == 1 else values
    return out


def _float(value: np.float32) -> float:
    """A float32 as the shortest float64 that reads back as it (2.05, not 2.049999952316284)."""
    return float(np.format_float_positional(value, unique=True, trim="-"))


def describe_skipped(skipped: Mapping[str, int]) -> list[str]:
    """Sentences for the records a protocol could not send, by kind."""
    return [
        f"{count} {kind} record{'s' if count != 1 else ''} left out: TF Serving's REST API has "
        f"no {RPCS[kind][0]} (replay them over gRPC)"
        for kind, count in sorted(skipped.items())
    ]
