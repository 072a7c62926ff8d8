"""Runners: the one part that differs between the graph server and the eager server.

    GraphRunner   executes the SavedModel's signature functions (graphs; no Python per op)
    EagerRunner   calls the Python model eagerly, op by op, exactly as `model(x)` in a notebook

Both take and return numpy arrays keyed by tensor name, after the shared front ends have validated
the inputs against `signatures`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection
from pathlib import Path
from typing import Protocol

import numpy as np
import tensorflow as tf

from exporter.contract import SignatureContract, load_signature_file
from exporter.errors import SignatureError, UnsafeOpsError
from exporter.opscan import describe_flagged, scan_meta_graph
from exporter.savedmodel import serve_meta_graph
from exporter.signature import TensorSpec, sample_inputs
from exporter.sources import load_source, resolve_contracts
from exporter.trace import call_signature, predict_signature
from serving.codec import numpy_dtype_name
from serving.errors import InvalidInput, ServingError
from serving.signature import ServedSignature

__all__ = ["EagerRunner", "GraphRunner", "Runner"]

log = logging.getLogger("graphserve.runners")


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
    """Serves a SavedModel directory: every signature of its serving MetaGraph.

    Models are programs: before loading, the op scan (exporter.opscan) reads the graph, and a
    model with ops that touch files, the network or processes is refused unless each such op
    is in `allow_ops` (the servers' --allow-op), which is logged.
    """

    kind = "graph"

    def __init__(self, path: Path, allow_ops: Collection[str] = ()) -> None:
        self.path = Path(path)
        graph = serve_meta_graph(self.path)  # parsed once, for the scan and the signatures
        scan = scan_meta_graph(graph)
        refused = scan.refused(allow_ops)
        if refused:
            raise UnsafeOpsError(
                f"refusing to serve {self.path}: its graph has ops that touch files, the network "
                f"or processes: {describe_flagged(refused)}. Start the server with --allow-op OP "
                "for each if you trust the model"
            )
        for flagged in scan.flagged:
            log.warning(
                "%s: serving %s, allowed by --allow-op", self.path, describe_flagged([flagged])
            )
        self._loaded = tf.saved_model.load(str(self.path), tags=["serve"])
        self._functions = dict(self._loaded.signatures)
        self.signatures = {
            name: ServedSignature.from_signature_def(name, sig)
            for name, sig in graph.signature_def.items()
            if name in self._functions
        }

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outputs = self._functions[signature](**{k: tf.constant(v) for k, v in inputs.items()})
        except Exception as exc:
            raise _run_errors(exc) from exc
        return {name: t.numpy() for name, t in outputs.items()}


EAGER_MODES = ("call", "predict", "function")


class EagerRunner:
    """Serves a Python model source (examples:NAME, module:factory, .keras) run eagerly.

    It serves the signatures the exporter would export from the same source and flags, calling
    the model through the same `call_signature`, so both servers name inputs and outputs alike.
    `mode` picks how the model runs, the approaches users compare:

        call      `model(x)`: every op dispatched from Python (kind "eager")
        predict   Keras `model.predict(x)`: its batch machinery per request ("eager-predict")
        function  `tf.function` without an input signature: traced per new shape, so varying
                  batch sizes retrace ("eager-function"; traces are counted)
    """

    def __init__(
        self,
        source: str,
        inputs: list[TensorSpec] | None = None,
        *,
        signature_file: Path | None = None,
        output_names: list[str] | None = None,
        allow_unsafe: bool = False,
        mode: str = "call",
    ) -> None:
        if mode not in EAGER_MODES:
            raise SignatureError(f"eager mode {mode!r} is not one of {', '.join(EAGER_MODES)}")
        self.mode = mode
        self.kind = "eager" if mode == "call" else f"eager-{mode}"
        self.source = load_source(source, allow_unsafe=allow_unsafe)
        contracts = resolve_contracts(
            self.source,
            file_contracts=load_signature_file(signature_file) if signature_file else (),
            inputs=inputs or [],
            output_names=output_names or [],
        )
        self._contracts = {c.name: c for c in contracts}
        self._functions = {
            c.name: tf.function(functools.partial(call_signature, self.source.model, c))
            for c in (contracts if mode == "function" else [])
        }
        self.signatures = {c.name: self._describe(c) for c in contracts}

    def trace_counts(self) -> dict[str, int]:
        """Traces per signature in `function` mode (retracing made visible); empty otherwise."""
        return {k: f.experimental_get_tracing_count() for k, f in self._functions.items()}

    def _describe(self, contract: SignatureContract) -> ServedSignature:
        """One eager call on a sample batch tells the outputs' names, dtypes and shapes (and
        warms the eager path the way warm-up records warm a SavedModel)."""
        probe = self._call(contract, sample_inputs(contract.inputs, batch_size=1))
        first = contract.inputs[0].shape
        batch_free = bool(first) and first[0] is None
        outputs = [
            TensorSpec(
                name,
                numpy_dtype_name(array),
                tuple(None if (i == 0 and batch_free) else d for i, d in enumerate(array.shape)),
            )
            for name, array in probe.items()
        ]
        return ServedSignature.from_specs(contract.name, list(contract.inputs), outputs)

    def _call(
        self, contract: SignatureContract, inputs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        if self.mode == "predict":
            outputs = predict_signature(self.source.model, contract, inputs)
        else:
            tensors = {k: tf.constant(v) for k, v in inputs.items()}
            if self.mode == "function":
                outputs = self._functions[contract.name](tensors)
            else:
                outputs = call_signature(self.source.model, contract, tensors)
        return {k: np.asarray(v) for k, v in outputs.items()}

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return self._call(self._contracts[signature], inputs)
        except Exception as exc:
            raise _run_errors(exc) from exc
