"""`graphserve traffic make`: a traffic file for a version, from its export or a samples file.

Each of `count` distinct predict requests draws its rows from `batch_sizes` and, for inputs
with an open dimension past the batch (a sequence), its length from `seq_lens`; its values come
from where every generated input comes from (graphserve.core.inputs): the samples file when
given, else the source the export recorded in its manifest (the user's samples, the ranges the
user gave or the model told), so the requests fit the model as its parity check's did. The
requests are checked against the version's signature before the file is written, and with
`rate` they carry arrival times (evenly spaced, or a Poisson process), so `loadtest replay`
sends them at that rate without being told.

A distribution is written `1,2,4,8` (each alike), `1:0.7,8:0.3` (weights) or `1-32` (every
whole number between, alike).
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from graphserve.core.errors import EXIT_USAGE, LoadTestError
from graphserve.core.signature import SERVING_DEFAULT, TensorSpec

__all__ = ["Distribution", "Made", "MakeError", "MakeSpec", "make_traffic", "parse_distribution"]


class MakeError(LoadTestError):
    """Traffic that cannot be made: a distribution, a version or a samples file that does not
    fit (exit 2, nothing written)."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Distribution:
    """Whole numbers and how likely each is."""

    values: tuple[int, ...]
    weights: tuple[float, ...]

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values), size=n, p=np.asarray(self.weights))

    def text(self) -> str:
        if len(set(self.weights)) == 1 and len(self.values) > 2:
            run = list(range(self.values[0], self.values[-1] + 1))
            if list(self.values) == run:
                return f"{self.values[0]}-{self.values[-1]}"
        if len(set(self.weights)) == 1:
            return ",".join(map(str, self.values))
        return ",".join(f"{v}:{w:g}" for v, w in zip(self.values, self.weights, strict=True))


_RANGE = re.compile(r"\s*(\d+)\s*-\s*(\d+)\s*")
_EXPECTED = "expected 1,2,4,8 (each alike), 1:0.7,8:0.3 (weights) or 1-32 (a range)"


def parse_distribution(text: str, option: str) -> Distribution:
    """`1,2,4`, `1:0.7,8:0.3` or `1-32` as a Distribution of positive whole numbers. MakeError
    naming `option` and the forms it takes."""
    match = _RANGE.fullmatch(text)
    try:
        if match:
            low, high = int(match[1]), int(match[2])
            if low > high:
                raise ValueError
            values = list(range(low, high + 1))
            weights = [1.0] * len(values)
        else:
            pairs = [part.split(":") for part in text.split(",") if part.strip()]
            values = [int(p[0]) for p in pairs]
            if any(len(p) > 2 for p in pairs) or not pairs:
                raise ValueError
            weighted = [len(p) == 2 for p in pairs]
            if any(weighted) and not all(weighted):
                raise ValueError
            weights = [float(p[1]) if len(p) == 2 else 1.0 for p in pairs]
    except ValueError:
        raise MakeError(f"{option} {text!r}: {_EXPECTED}") from None
    if min(values) < 1 or min(weights) < 0 or sum(weights) <= 0:
        raise MakeError(f"{option} {text!r}: sizes are whole numbers from 1, weights not negative")
    total = sum(weights)
    return Distribution(tuple(values), tuple(w / total for w in weights))


@dataclass
class MakeSpec:
    """What `make_traffic` writes: `count` requests for `signature` of the version at
    `version_dir` (or the newest under BASE/NAME), named for `model`."""

    version_dir: Path
    out: Path
    model: str | None = None  # default: the version's directory's parent's name
    signature: str = SERVING_DEFAULT
    batch_sizes: Distribution = Distribution((1,), (1.0,))
    seq_lens: Distribution | None = None
    count: int = 100
    rate: float | None = None
    arrivals: str = "constant"
    seed: int = 0
    samples: Path | None = None


@dataclass
class Made:
    path: Path
    records: int
    model: str
    signature: str
    shapes: dict[str, int]  # requests by input shapes
    inputs: str  # where the values came from
    span_s: float | None


def _version(path: Path) -> Path:
    from graphserve.core.versions import version_dirs

    path = Path(path)
    if (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file():
        return path
    versions = version_dirs(path) if path.is_dir() else {}
    if not versions:
        raise MakeError(f"{path}: neither a SavedModel version directory nor BASE/NAME with one")
    return versions[max(versions)]


def _specs(version: Path, signature: str) -> list[TensorSpec]:
    from graphserve.core.savedmodel import signature_defs
    from graphserve.core.signature import spec_from_tensor_info

    defs = signature_defs(version)
    if signature not in defs:
        raise MakeError(
            f"{version} has no signature {signature!r}: it has "
            + ", ".join(sorted(n for n in defs if not n.startswith("__")))  # not its init op
        )
    return [spec_from_tensor_info(n, t) for n, t in sorted(defs[signature].inputs.items())]


def _shaped(spec: TensorSpec, seq: int | None) -> TensorSpec:
    """`spec` with every open dimension past the batch `seq` (where given); the batch stays
    open, for the samples (InputSource.batch) and the generator (sample_shape) to fill."""
    if spec.shape is None or seq is None:
        return spec
    dims = tuple(seq if (i > 0 and d is None) else d for i, d in enumerate(spec.shape))
    return replace(spec, shape=dims)


def make_traffic(spec: MakeSpec) -> Made:
    """Write the traffic file `spec.out`, readable by its owner alone, whole or not at all.
    MakeError when the version, signature, samples or distributions do not fit."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    from graphserve.core.client import predict_request
    from graphserve.core.contract import SignatureContract
    from graphserve.core.errors import GraphserveError
    from graphserve.core.inputs import InputSource, load_samples
    from graphserve.core.manifest import read_manifest
    from graphserve.core.predictionlog import set_arrival
    from graphserve.model.traffic import Record, TrafficError, fitting

    version = _version(spec.version_dir)
    model = spec.model or version.parent.name
    specs = _specs(version, spec.signature)
    contract = SignatureContract(spec.signature, tuple(specs))
    try:
        if spec.samples is not None:
            source = InputSource(load_samples(spec.samples, [contract]), str(spec.samples))
            where = f"the samples file {spec.samples}"
        else:
            source = InputSource.recorded(read_manifest(version), [contract])
            where = (
                f"the samples the export of {version} recorded ({source.label})"
                if source.samples
                else f"generated within the ranges the export of {version} recorded"
            )
    except GraphserveError as exc:
        raise MakeError(str(exc)) from None
    open_dims = any(d is None for s in specs if s.shape for i, d in enumerate(s.shape) if i > 0)
    if spec.seq_lens is not None and not open_dims:
        raise MakeError(
            f"--seq-lens: no input of signature {spec.signature!r} has an open dimension past "
            f"the batch ({', '.join(f'{s.name} {s.shape_text()}' for s in specs)})"
        )
    rng = np.random.default_rng(spec.seed)
    rows = spec.batch_sizes.draw(rng, spec.count)
    seqs = spec.seq_lens.draw(rng, spec.count) if spec.seq_lens is not None else None
    if spec.rate is not None:
        gaps = (
            rng.exponential(1.0 / spec.rate, spec.count)
            if spec.arrivals == "poisson"
            else np.full(spec.count, 1.0 / spec.rate)
        )
        offsets = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    start_ns = time.time_ns()
    logs = []
    for n in range(spec.count):
        seq = int(seqs[n]) if seqs is not None else None
        shaped = [_shaped(s, seq) for s in specs]
        try:
            inputs = source.batch(spec.signature, shaped, int(rows[n]), seed=spec.seed + n)
        except GraphserveError as exc:
            raise MakeError(f"request {n}: {exc}") from None
        log = prediction_log_pb2.PredictionLog()
        log.predict_log.request.CopyFrom(
            predict_request(model, inputs, signature_name=spec.signature)
        )
        log.log_metadata.model_spec.name = model
        log.log_metadata.model_spec.signature_name = spec.signature
        if spec.rate is not None:
            set_arrival(log.log_metadata, start_ns + int(offsets[n] * 1e9))
        logs.append(log)
    records = [Record(log, "predict", model, spec.signature, _shapes(log), 0, 0) for log in logs]
    try:
        fitting(records, version)
    except TrafficError as exc:
        raise MakeError(f"the requests made do not fit {version}: {exc}") from None
    out = Path(spec.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(descriptor)
    try:
        with tf.io.TFRecordWriter(str(temporary)) as writer:
            for log in logs:
                writer.write(log.SerializeToString())
        os.replace(temporary, out)
    finally:
        temporary.unlink(missing_ok=True)
    shapes = Counter(r.shape_label() for r in records)
    span = float(offsets[-1]) if spec.rate is not None else None
    return Made(out, len(logs), model, spec.signature, dict(shapes.most_common()), where, span)


def _shapes(log: object) -> tuple[tuple[str, tuple[int, ...]], ...]:
    inputs = log.predict_log.request.inputs  # type: ignore[attr-defined]
    return tuple(
        (name, tuple(d.size for d in tensor.tensor_shape.dim))
        for name, tensor in sorted(inputs.items())
    )
