"""Runners: the one part that differs between the graph server and the eager server.

    GraphRunner   executes the SavedModel's signature functions (graphs; no Python per op)
    SessionRunner runs the SavedModel in a TF1 Session, as TF Serving does (serving.session_runner)
    EagerRunner   calls the Python model eagerly, op by op, exactly as `model(x)` in a notebook

All take and return numpy arrays keyed by tensor name, after the shared front ends have validated
the inputs against `signatures`. `load_runner` picks GraphRunner or SessionRunner for a SavedModel.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2

from graphserve.core.codec import numpy_dtype_name
from graphserve.core.contract import SignatureContract, load_signature_file
from graphserve.core.errors import InvalidInput, ServingError, SignatureError, UnsafeOpsError
from graphserve.core.execution import EAGER
from graphserve.core.inputs import InputSource, load_samples
from graphserve.core.savedmodel import serve_meta_graph
from graphserve.core.signature import TensorSpec, ValueRange
from graphserve.model.domains import infer_ranges
from graphserve.model.opscan import describe_flagged, scan_meta_graph
from graphserve.model.sources import load_source, resolve_contracts
from graphserve.model.trace import (
    call_signature,
    execution_of,
    predict_signature,
    signature_errors,
)
from graphserve.serving.runner import Runner
from graphserve.serving.signature import ServedSignature

if TYPE_CHECKING:
    pass

__all__ = [
    "EagerRunner",
    "GraphRunner",
    "Runner",
    "checked_meta_graph",
    "run_errors",
]

log = logging.getLogger("graphserve.runners")


# What eager TensorFlow wraps around a graph's own error: "Graph execution error: Detected at
# node N defined at (most recent call last): <stack traces unavailable>" before it, and
# " [Op:__inference_...]" after. TF Serving's Session reports the error alone.
_GRAPH_PREAMBLE = re.compile(
    r"^Graph execution error:\s*(?:Detected at node .*? defined at \(most recent call last\):\s*"
    r"(?:<stack traces unavailable>\s*)?)?",
    re.DOTALL,
)
_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\](?: name: .*)?\s*$", re.DOTALL)
# ... and what it puts before an op's error when the op ran alone (eager): "{{function_node
# __wrapped__MatMul_device_/job:localhost/...}} ".
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")


# Keras wraps an op's error raised in a layer: "Exception encountered when calling X.call().",
# the op's error in terminal bold, then the arguments the layer received.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_KERAS_WRAPPED = "Exception encountered when calling"


def graph_error_text(exc: Exception) -> str:
    """A TensorFlow error's own message, as TF Serving shows it: without what eager TensorFlow
    and Keras wrap around it, and without terminal escape codes."""
    message = _ANSI.sub("", getattr(exc, "message", None) or str(exc))
    if _KERAS_WRAPPED in message:
        wrapped = [line for line in message.splitlines() if "{{function_node" in line]
        message = wrapped[0].strip() if wrapped else message
    message = _FUNCTION_NODE.sub("", _GRAPH_PREAMBLE.sub("", message, count=1))
    return _OP_SUFFIX.sub("", message)


def run_errors(exc: Exception) -> ServingError:
    """TensorFlow's runtime errors on bad input are the client's: INVALID_ARGUMENT / 400."""
    if isinstance(exc, tf.errors.InvalidArgumentError | ValueError | TypeError):
        return InvalidInput(graph_error_text(exc))
    return ServingError(f"{type(exc).__name__}: {graph_error_text(exc)}")


def checked_meta_graph(path: Path, allow_ops: Collection[str] = ()) -> meta_graph_pb2.MetaGraphDef:
    """The `serve` MetaGraph of the SavedModel at `path`, once the op scan passed it.

    Models are programs: a graph with ops that touch files, the network or processes raises
    UnsafeOpsError unless each such op is in `allow_ops` (the servers' --allow-op), which is
    logged. Raises SavedModelError when `path` is not a readable SavedModel.
    """
    graph = serve_meta_graph(path)
    scan = scan_meta_graph(graph)
    refused = scan.refused(allow_ops)
    if refused:
        raise UnsafeOpsError(
            f"refusing to serve {path}: its graph has ops that touch files, the network "
            f"or processes: {describe_flagged(refused)}. Start the server with --allow-op OP "
            "for each if you trust the model"
        )
    for flagged in scan.flagged:
        log.warning("%s: serving %s, allowed by --allow-op", path, describe_flagged([flagged]))
    for library, ops in scan.linked_by_library().items():
        log.info("%s: serving %s ops, which TF Serving links in: %s", path, library, ", ".join(ops))
    return graph


class GraphRunner(Runner):
    """Serves a SavedModel directory: every signature of its serving MetaGraph.

    Models are programs: before loading, the op scan (model.opscan) reads the graph, and a
    model with ops that touch files, the network or processes is refused unless each such op
    is in `allow_ops` (the servers' --allow-op), which is logged.
    """

    kind = "graph"
    execution = "function"  # SessionRunner's is "session"

    def __init__(
        self,
        path: Path,
        allow_ops: Collection[str] = (),
        *,
        meta_graph: meta_graph_pb2.MetaGraphDef | None = None,
    ) -> None:
        self.path = Path(path)
        # Parsed once, for the scan and the signatures; given when the caller already scanned it.
        graph = checked_meta_graph(self.path, allow_ops) if meta_graph is None else meta_graph
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
            raise run_errors(exc) from exc
        return {name: t.numpy() for name, t in outputs.items()}


EAGER_MODES = ("call", "predict", "function")


class EagerRunner(Runner):
    """Serves a Python model source (examples:NAME, module:factory, .keras) run eagerly.

    It serves the signatures the exporter would export from the same source and flags, calling
    the model through the same `call_signature`, so both servers name inputs and outputs alike.
    `mode` picks how the model runs, the approaches users compare:

        call      `model(x)`: every op dispatched from Python (kind "eager")
        predict   Keras `model.predict(x)`: its batch machinery per request ("eager-predict")
        function  `tf.function` without an input signature: traced per new shape, so varying
                  batch sizes retrace ("eager-function"; traces are counted)

    `execution` says what runs (graphserve.core.execution): "eager" only when the source is
    Python that runs op by op. A SavedModel source runs its restored graph functions
    ("restored"), a source whose call is a tf.function runs that graph ("tf.function"): both
    are logged as a warning when the version loads, and said in the start line and metadata.
    """

    def __init__(
        self,
        source: str,
        inputs: list[TensorSpec] | None = None,
        *,
        signature_file: Path | None = None,
        output_names: list[str] | None = None,
        allow_unsafe: bool = False,
        imports: Sequence[str] = (),
        mode: str = "call",
        samples_file: Path | None = None,
        input_ranges: Mapping[str, ValueRange] | None = None,
    ) -> None:
        if mode not in EAGER_MODES:
            raise SignatureError(f"eager mode {mode!r} is not one of {', '.join(EAGER_MODES)}")
        self.mode = mode
        self.kind = "eager" if mode == "call" else f"eager-{mode}"
        self.source = load_source(source, allow_unsafe=allow_unsafe, imports=imports)
        contracts = resolve_contracts(
            self.source,
            file_contracts=load_signature_file(signature_file) if signature_file else (),
            inputs=inputs or [],
            output_names=output_names or [],
        )
        self._contracts = {c.name: c for c in contracts}
        self._inputs = InputSource(
            load_samples(samples_file, contracts) if samples_file else None,
            str(samples_file) if samples_file else None,
            {**{n: r for c in contracts for n, r in c.ranges.items()}, **(input_ranges or {})},
        )
        self._functions = {
            c.name: tf.function(functools.partial(call_signature, self.source.model, c))
            for c in (contracts if mode == "function" else [])
        }
        self.execution = self._execution(contracts)
        self.signatures = {c.name: self._describe(c) for c in contracts}

    def _execution(self, contracts: Sequence[SignatureContract]) -> str:
        """What runs a request (graphserve.core.execution): the mode's machinery, else the
        source's own: a SavedModel's functions, a tf.function, or eager Python; the first
        signature that is not eager speaks for the model."""
        if self.mode != "call":
            return "keras-predict" if self.mode == "predict" else "traced"
        if self.source.kind == "savedmodel":
            return "restored"
        found = [execution_of(self.source.model, c) for c in contracts]
        return next((e for e in found if e != EAGER), EAGER)

    def trace_counts(self) -> dict[str, int]:
        """Traces per signature in `function` mode (retracing made visible); empty otherwise."""
        return {k: f.experimental_get_tracing_count() for k, f in self._functions.items()}

    def _describe(self, contract: SignatureContract) -> ServedSignature:
        """One eager call on a sample batch tells the outputs' names, dtypes and shapes (and
        warms the eager path the way warm-up records warm a SavedModel). The batch is the
        user's samples (--samples-file), else generated (graphserve.core.inputs); a model that
        refuses generated ones is asked again within the ranges its graph tells, and one that
        parses strings as tf.Examples with empty strings (an Example with no features)."""
        given = self._inputs.given(contract.name) is not None
        hint = "" if given else self._inputs.refused(contract.inputs)
        # A model that cannot take the signature's inputs fails to load, naming both, as the
        # exporter says it (a SignatureError), never with its own traceback.
        with signature_errors(contract, hint=hint):
            probe = self._first_call(contract, given)
        batch_free = contract.inputs[0].batch_free
        outputs = [
            TensorSpec(
                name,
                numpy_dtype_name(array),
                tuple(None if (i == 0 and batch_free) else d for i, d in enumerate(array.shape)),
            )
            for name, array in probe.items()
        ]
        return ServedSignature.from_specs(contract.name, list(contract.inputs), outputs)

    def _first_call(self, contract: SignatureContract, given: bool) -> dict[str, np.ndarray]:
        sample = self._inputs.batch(contract.name, contract.inputs, 1)
        try:
            return self._call(contract, sample)
        except Exception:
            if given:
                raise
        self._inputs = self._inputs.with_ranges(infer_ranges(self.source.model, contract) or {})
        sample = self._inputs.batch(contract.name, contract.inputs, 1)
        try:
            return self._call(contract, sample)
        except Exception:
            if not any(s.dtype == "string" for s in contract.inputs):
                raise
        empty = {k: np.full_like(v, b"") if v.dtype == object else v for k, v in sample.items()}
        return self._call(contract, empty)

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
            raise run_errors(exc) from exc
