"""Runners: the one part that differs between the graph server and the eager server.

    GraphRunner   executes the SavedModel's signature functions (graphs; no Python per op)
    EagerRunner   calls the Python model eagerly, op by op, exactly as `model(x)` in a notebook

Both take and return numpy arrays keyed by tensor name, after the shared front ends have validated
the inputs against `signatures`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from exporter.signature import TensorSpec, sample_inputs
from exporter.sources import load_source, resolve_signature
from exporter.trace import call_model
from serving.codec import numpy_dtype_name
from serving.errors import InvalidInput, ServingError
from serving.signature import SERVING_DEFAULT, ServedSignature

__all__ = ["EagerRunner", "GraphRunner", "Runner"]


class Runner(Protocol):
    kind: str  # "graph" | "eager"
    signatures: dict[str, ServedSignature]

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def _run_errors(exc: Exception) -> ServingError:
    """TensorFlow's runtime errors on bad input are the client's: INVALID_ARGUMENT / 400."""
    if isinstance(exc, tf.errors.InvalidArgumentError | ValueError | TypeError):
        return InvalidInput(getattr(exc, "message", None) or str(exc))
    return ServingError(f"{type(exc).__name__}: {exc}")


class GraphRunner:
    """Serves a SavedModel directory: every signature of its serving MetaGraph."""

    kind = "graph"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._loaded = tf.saved_model.load(str(self.path), tags=["serve"])
        self._functions = dict(self._loaded.signatures)
        self.signatures = {
            name: ServedSignature.from_signature_def(name, sig)
            for name, sig in _signature_defs(self.path).items()
            if name in self._functions
        }

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outputs = self._functions[signature](**{k: tf.constant(v) for k, v in inputs.items()})
        except Exception as exc:
            raise _run_errors(exc) from exc
        return {name: t.numpy() for name, t in outputs.items()}


def _signature_defs(path: Path) -> dict[str, Any]:
    """The SignatureDefs of the `serve` MetaGraph, read from saved_model.pb as TF Serving does."""
    saved = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    for meta_graph in saved.meta_graphs:
        if "serve" in meta_graph.meta_info_def.tags:
            return dict(meta_graph.signature_def)
    return {}


class EagerRunner:
    """Serves a Python model source (examples:NAME, module:factory, .keras) run eagerly."""

    kind = "eager"

    def __init__(self, source: str, inputs: list[TensorSpec] | None = None) -> None:
        self.source = load_source(source)
        self._specs = resolve_signature(self.source, inputs or [])
        # One eager call on a sample batch tells the outputs' names, dtypes and shapes (and
        # warms the eager path the way warm-up records warm a SavedModel).
        probe = self._call(sample_inputs(self._specs, batch_size=1))
        batch_free = bool(self._specs[0].shape) and self._specs[0].shape[0] is None
        outputs = [
            TensorSpec(
                name,
                numpy_dtype_name(array),
                tuple(None if (i == 0 and batch_free) else d for i, d in enumerate(array.shape)),
            )
            for name, array in probe.items()
        ]
        self.signatures = {
            SERVING_DEFAULT: ServedSignature.from_specs(SERVING_DEFAULT, self._specs, outputs)
        }

    def _call(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tensors = {k: tf.constant(v) for k, v in inputs.items()}
        return {
            k: np.asarray(v) for k, v in call_model(self.source.model, tensors, self._specs).items()
        }

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return self._call(inputs)
        except Exception as exc:
            raise _run_errors(exc) from exc
