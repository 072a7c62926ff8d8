"""Traffic files: TFRecord files of TF Serving's `PredictionLog`s, read for a load.

A server's request log (serving.requestlog) and a version's warm-up file
(`assets.extra/tf_serving_warmup_requests`) are both traffic files. `read_traffic` reads one
whole, CRCs checked, before any load starts, so a file that cannot be used is refused with the
reason and nothing is sent; `summary` counts what it holds, by model, signature, kind and shape,
with its sizes, time span and rate (`graphserve traffic show`).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorflow_serving.apis import prediction_log_pb2

from graphserve.core.errors import EXIT_USAGE, GraphserveError
from graphserve.core.predictionlog import arrival_ns
from graphserve.core.signature import TensorSpec

__all__ = [
    "Record",
    "Traffic",
    "TrafficError",
    "check_fits",
    "fitting",
    "read_traffic",
    "summary",
    "warmup_selection",
]

_KINDS = ("predict_log", "classify_log", "regress_log", "multi_inference_log")


class TrafficError(GraphserveError):
    """A traffic file that cannot be used: missing, empty, truncated, corrupt, or holding no
    request a load can send (a usage error: exit 2, before any load)."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Record:
    """One logged request: its kind (predict, classify, regress, multi_inference), the model
    and signature it named, the shape of each input (predict) or its number of examples, its
    size, and when it arrived (ns since the epoch; 0 when the record has no time)."""

    log: prediction_log_pb2.PredictionLog
    kind: str
    model: str
    signature: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    request_bytes: int
    arrived_ns: int

    @property
    def rows(self) -> int:
        """The request's batch: the first dimension of its first input, or its examples."""
        return self.shapes[0][1][0] if self.shapes and self.shapes[0][1] else 1

    def shape_label(self) -> str:
        return ", ".join(f"{name} {list(shape)}" for name, shape in self.shapes) or "-"


@dataclass(frozen=True)
class Traffic:
    path: Path
    records: Sequence[Record] = field(default_factory=list)


def read_traffic(path: Path) -> Traffic:
    """Every record of the traffic file at `path`, checked. Raises TrafficError saying what is
    wrong with the file and where."""
    import tensorflow as tf

    path = Path(path)
    if not path.is_file():
        raise TrafficError(f"traffic file {path}: no such file")
    if path.stat().st_size == 0:
        raise TrafficError(f"traffic file {path} is empty: expected TFRecord PredictionLogs")
    records: list[Record] = []
    index = 0
    try:
        # lengths and CRCs checked, a record cut off found
        for index, data in enumerate(tf.data.TFRecordDataset(str(path)).as_numpy_iterator()):
            records.append(_record(path, index, data))
    except tf.errors.DataLossError as exc:
        raise TrafficError(
            f"traffic file {path} is truncated or corrupt after {len(records)} whole records "
            f"({_reason(exc.message)}): expected a TFRecord file of PredictionLogs, as a "
            "request log or a warm-up file holds"
        ) from None
    if not records:
        raise TrafficError(f"traffic file {path} holds no record")
    return Traffic(path, records)


def _reason(message: str) -> str:
    """TensorFlow's words without its op's name and its function's: "truncated record at 19587'
    failed with Read less bytes than requested"."""
    message = re.sub(r"^\{\{[^}]*\}\}\s*", "", message.strip())
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", message)


def _record(path: Path, index: int, data: bytes) -> Record:
    log = prediction_log_pb2.PredictionLog()
    try:
        log.ParseFromString(data)
    except Exception:  # protobuf's DecodeError, of whichever implementation
        raise TrafficError(
            f"traffic file {path}, record {index}: not a PredictionLog ({len(data)} bytes)"
        ) from None
    kind = log.WhichOneof("log_type")
    if kind not in _KINDS:
        raise TrafficError(
            f"traffic file {path}, record {index}: a {kind or 'empty'} record; expected "
            "predict_log, classify_log, regress_log or multi_inference_log"
        )
    request = getattr(log, kind).request
    if kind == "multi_inference_log":
        specs = [task.model_spec for task in request.tasks]
        model = specs[0].name if specs else ""
        signature = ",".join(spec.signature_name for spec in specs)
    else:
        model, signature = request.model_spec.name, request.model_spec.signature_name
    return Record(
        log=log,
        kind=kind.removesuffix("_log"),
        model=model,
        signature=signature or "serving_default",
        shapes=_shapes(kind, request),
        request_bytes=request.ByteSize(),
        arrived_ns=arrival_ns(log),
    )


def _shapes(kind: str, request: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    if kind == "predict_log":
        return tuple(
            (name, tuple(d.size for d in tensor.tensor_shape.dim))
            for name, tensor in sorted(request.inputs.items())
        )
    which = request.input.WhichOneof("kind")
    examples = getattr(request.input, which).examples if which else []
    return (("examples", (len(examples),)),)


def summary(records: Iterable[Record]) -> dict[str, Any]:
    """What a traffic file holds: counts by model, signature, kind and shape; request sizes;
    the time span and the rate of the records that carry a time."""
    records = list(records)
    sizes = [r.request_bytes for r in records]
    times = sorted(r.arrived_ns for r in records if r.arrived_ns)
    span_s = (times[-1] - times[0]) / 1e9 if len(times) > 1 else 0.0
    return {
        "records": len(records),
        "by_model": dict(Counter(r.model for r in records).most_common()),
        "by_signature": dict(Counter(f"{r.model}:{r.signature}" for r in records).most_common()),
        "by_kind": dict(Counter(r.kind for r in records).most_common()),
        "by_shape": dict(Counter(f"{r.model}: {r.shape_label()}" for r in records).most_common()),
        "request_bytes": {
            "min": min(sizes),
            "median": statistics.median(sizes),
            "max": max(sizes),
            "total": sum(sizes),
        },
        "timed": len(times),
        "first_ns": times[0] if times else None,
        "last_ns": times[-1] if times else None,
        "span_s": span_s,
        "rate_per_s": (len(times) - 1) / span_s if span_s > 0 else None,
    }


def fitting(records: Iterable[Record], version_dir: Path) -> list[Record]:
    """The predict records whose signature the SavedModel at `version_dir` has, each input
    named, of its dtype, and of a shape its declared one takes. Raises TrafficError naming the
    first that does not fit, and what the signature expects."""
    from graphserve.core.savedmodel import signature_defs
    from graphserve.core.signature import spec_from_tensor_info

    defs = signature_defs(version_dir)
    kept = []
    for index, record in enumerate(records):
        if record.kind != "predict":
            continue
        signature = defs.get(record.signature)
        if signature is None:
            raise TrafficError(
                f"record {index} names signature {record.signature!r}, which {version_dir} does "
                f"not have: it has {', '.join(sorted(n for n in defs if not n.startswith('__')))}"
            )
        specs = [spec_from_tensor_info(n, t) for n, t in signature.inputs.items()]
        check_fits(index, record, specs, f"signature {record.signature!r} of {version_dir}")
        kept.append(record)
    return kept


def check_fits(index: int, record: Record, specs: Iterable[TensorSpec], where: str) -> None:
    """Whether predict `record` (number `index`) sends each input of `specs` (and no other) of
    its dtype and of a shape its declared one takes; TrafficError naming the first that does
    not, and what `where` (the signature, and whose) takes."""
    from graphserve.core.signature import DTYPE_ENUMS, dtype_name

    by_name = {spec.name: spec for spec in specs}
    inputs = record.log.predict_log.request.inputs
    if set(inputs) != set(by_name):
        raise TrafficError(
            f"record {index} sends inputs {sorted(inputs)}; {where} takes {sorted(by_name)}"
        )
    for name, spec in by_name.items():
        tensor = inputs[name]
        shape = tuple(d.size for d in tensor.tensor_shape.dim)
        declared = spec.shape
        fits = declared is None or (
            len(declared) == len(shape)
            and all(d is None or d == s for d, s in zip(declared, shape, strict=True))
        )
        if tensor.dtype != DTYPE_ENUMS[spec.dtype] or not fits:
            raise TrafficError(
                f"record {index}, input {name!r}: {dtype_name(tensor.dtype)} of shape "
                f"{list(shape)}; {where} takes {spec.describe()}"
            )


def warmup_selection(records: Sequence[Record], limit: int) -> list[Record]:
    """At most `limit` predict records covering every (signature, input shapes) seen: one
    each, the most frequent first; the count of distinct ones past `limit` is dropped."""
    first: dict[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]], Record] = {}
    seen: Counter[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]] = Counter()
    for record in records:
        if record.kind != "predict":
            continue
        key = (record.signature, record.shapes)
        seen[key] += 1
        first.setdefault(key, record)
    return [first[key] for key, _ in seen.most_common(limit)]
