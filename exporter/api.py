"""`export_model`: SOURCE → traced concrete function → verified SavedModel at BASE/NAME/VERSION."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.errors import SignatureError
from exporter.signature import PREDICT_METHOD, SERVING_DEFAULT, TensorSpec
from exporter.sources import load_source, resolve_signature
from exporter.versions import atomic_version_dir, next_version

if TYPE_CHECKING:  # verify imports TensorFlow; export_model imports it when called
    from exporter.verify import ParityReport

__all__ = ["ExportResult", "ExportSpec", "export_model"]


@dataclass
class ExportSpec:
    """What to export and where. `inputs` overrides the signature the source declares."""

    source: str
    name: str
    base_path: Path = Path("models")
    version: int | None = None
    inputs: list[TensorSpec] = field(default_factory=list)
    parity_batches: int = 3
    atol: float = 1e-5
    rtol: float = 1e-4


@dataclass
class ExportResult:
    path: Path
    version: int
    signatures: dict[str, dict[str, Any]]
    parity: ParityReport
    trace_count: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "version": self.version,
            "signatures": self.signatures,
            "parity": self.parity.to_json(),
            "trace_count": self.trace_count,
            "seconds": round(self.seconds, 3),
        }


Log = Callable[[str], None]


def export_model(spec: ExportSpec, log: Log = lambda _msg: None) -> ExportResult:
    """Export `spec.source` as `spec.base_path/spec.name/VERSION`.

    Raises an ExportError (SourceError, SignatureError, VersionExistsError, ParityError) and leaves
    no version directory behind when anything fails.
    """
    import tensorflow as tf

    from exporter.trace import saveable, spec_of, trace
    from exporter.verify import check_parity

    started = time.perf_counter()
    if not spec.name or "/" in spec.name or spec.name.startswith("."):
        raise SignatureError(f"model name {spec.name!r} is not valid: expected a plain name")
    model_dir = Path(spec.base_path) / spec.name
    version = spec.version if spec.version is not None else next_version(model_dir)

    log(f"loading {spec.source}")
    source = load_source(spec.source)
    specs = resolve_signature(source, spec.inputs)
    log("tracing " + ", ".join(f"{s.name}: {s.describe()}" for s in specs))
    traced = trace(source.model, specs)
    outputs = {
        name: spec_of(name, tf.TensorSpec(t.shape, t.dtype))
        for name, t in traced.concrete.structured_outputs.items()
    }
    signatures = {
        SERVING_DEFAULT: {
            "method_name": PREDICT_METHOD,
            "inputs": {s.name: s.to_json() for s in specs},
            "outputs": {name: o.to_json() for name, o in outputs.items()},
        }
    }
    with atomic_version_dir(model_dir, version) as tmp:
        log(f"writing {model_dir / str(version)}")
        tf.saved_model.save(
            saveable(source.model, traced), str(tmp), signatures={SERVING_DEFAULT: traced.concrete}
        )
        log(f"verifying parity on {spec.parity_batches} random batches")
        parity = check_parity(
            tmp, source.model, specs, batches=spec.parity_batches, atol=spec.atol, rtol=spec.rtol
        )
    return ExportResult(
        path=model_dir / str(version),
        version=version,
        signatures=signatures,
        parity=parity,
        trace_count=traced.trace_count,
        seconds=time.perf_counter() - started,
    )
