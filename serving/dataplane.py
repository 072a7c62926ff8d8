"""The transport-independent request handling both front ends (gRPC and REST) share.

Resolving the model and signature, validating inputs, running the model, filtering outputs and
building metadata and status responses all happen here, once; the front ends only translate
bytes to these calls and errors to their status codes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

import numpy as np
from google.protobuf import wrappers_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_pb2,
    status_pb2,
)

from serving.codec import as_bytes, shape_hint, validate_inputs
from serving.deadline import check_deadline
from serving.errors import FailedPrecondition, InvalidInput, Unavailable
from serving.metrics import Measure, ServingMetrics
from serving.registry import ModelRegistry, Servable, VersionRef
from serving.signature import SERVING_DEFAULT, ServedSignature

__all__ = ["DataPlane"]

SIGNATURE_DEF_FIELD = "signature_def"
RUNNER_FIELD = "runner"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
_UNKNOWN = 2  # tensorflow.error.Code.UNKNOWN: what a failed load reports


class DataPlane:
    def __init__(self, registry: ModelRegistry, metrics: ServingMetrics | None = None) -> None:
        self.registry = registry
        self.metrics = metrics
        self._draining = False
        self._in_flight = 0
        self._idle = threading.Condition()

    @contextmanager
    def measure(self, model: str, protocol: str) -> Iterator[Measure]:
        """Track one request: refused with UNAVAILABLE once draining, counted in flight until it
        ends, and counted and timed in the metrics. The front end fills in the servable and
        signature as it resolves them."""
        with self._idle:
            if self._draining:
                raise Unavailable("the server is shutting down; retry on another replica")
            self._in_flight += 1
        try:
            timed = self.metrics.measure(model, protocol) if self.metrics else None
            with timed or nullcontext(Measure(model, protocol)) as measure:
                yield measure
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def drain(self, timeout: float) -> bool:
        """Refuse new requests and wait up to `timeout` s for in-flight ones; True if none is
        left."""
        with self._idle:
            self._draining = True
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def servable(self, name: str, version: VersionRef = None) -> Servable:
        if not name:
            raise InvalidInput(
                "model_spec.name is empty: name the model to serve (this server has "
                + (", ".join(repr(n) for n in self.registry.names()) or "none")
                + ")"
            )
        return self.registry.get(name, version)

    @staticmethod
    def signature(servable: Servable, name: str) -> ServedSignature:
        """`name` or serving_default; raises FailedPrecondition as TF Serving does."""
        key = name or SERVING_DEFAULT
        sig = servable.runner.signatures.get(key)
        if sig is None:
            known = ", ".join(repr(k) for k in servable.runner.signatures)
            raise FailedPrecondition(
                f'Serving signature key "{key}" not found: model {servable.name!r} version '
                f"{servable.version} has {known}"
            )
        return sig

    def predict(
        self,
        servable: Servable,
        signature: ServedSignature,
        inputs: dict[str, np.ndarray],
        output_filter: Sequence[str] = (),
    ) -> dict[str, np.ndarray]:
        """Validate, run and filter. Raises InvalidInput for inputs or filters that do not fit."""
        for alias in output_filter:
            if alias not in signature.outputs:
                raise InvalidInput(
                    f"output tensor alias not found in signature: {alias!r}; outputs are "
                    + ", ".join(repr(o) for o in signature.outputs)
                )
        checked = validate_inputs(inputs, signature.inputs)
        check_deadline("before the model ran")
        started = time.perf_counter()
        try:
            outputs = servable.runner.run(signature.name, checked)
        except InvalidInput as exc:  # the graph refused the inputs: say what it was declared
            hint = shape_hint(checked, signature.inputs)
            raise InvalidInput(f"{exc.message} ({hint})" if hint else exc.message) from exc
        if self.metrics is not None:
            self.metrics.observe_runtime(servable, signature.name, time.perf_counter() - started)
        if output_filter:
            return {alias: outputs[alias] for alias in output_filter}
        return outputs

    def classify(
        self, servable: Servable, signature: ServedSignature, examples: list[bytes]
    ) -> list[list[tuple[str, float]]]:
        """Per example, its (label, score) pairs: the signature's `classes` and/or `scores`."""
        outputs = self._run_examples(servable, signature, CLASSIFY_METHOD, examples)
        classes, scores = outputs.get("classes"), outputs.get("scores")
        if classes is None and scores is None:
            raise FailedPrecondition(
                f"classification signature {signature.name!r} has neither 'classes' nor 'scores'"
            )
        n = len(examples)
        labels = None if classes is None else classes.reshape(n, -1)
        values = None if scores is None else scores.reshape(n, -1)
        width = (values if values is not None else labels).shape[1]  # type: ignore[union-attr]
        return [
            [
                (
                    "" if labels is None else as_bytes(labels[i, k]).decode(),
                    0.0 if values is None else float(values[i, k]),
                )
                for k in range(width)
            ]
            for i in range(n)
        ]

    def regress(
        self, servable: Servable, signature: ServedSignature, examples: list[bytes]
    ) -> list[float]:
        """Per example, the signature's `outputs` value."""
        outputs = self._run_examples(servable, signature, REGRESS_METHOD, examples)
        if "outputs" not in outputs:
            raise FailedPrecondition(f"regression signature {signature.name!r} has no 'outputs'")
        values = outputs["outputs"].reshape(len(examples), -1)
        if values.shape[1] != 1:
            raise FailedPrecondition(
                f"regression output of {signature.name!r} has {values.shape[1]} values per "
                "example, expected 1"
            )
        return [float(v) for v in values[:, 0]]

    def _run_examples(
        self, servable: Servable, signature: ServedSignature, method: str, examples: list[bytes]
    ) -> dict[str, np.ndarray]:
        if signature.method_name != method:
            raise FailedPrecondition(
                f"Expected {method.rsplit('/', 1)[-1]} signature method_name to be {method}. "
                f"Was: {signature.method_name}"
            )
        if len(signature.inputs) != 1:
            raise FailedPrecondition(
                f"signature {signature.name!r} must have exactly one input (the serialized "
                f"tf.Examples), has {len(signature.inputs)}"
            )
        (name,) = signature.inputs
        return self.predict(servable, signature, {name: np.array(examples, dtype=object)})

    def metadata(
        self, name: str, version: VersionRef, fields: Sequence[str] = (SIGNATURE_DEF_FIELD,)
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        """TF Serving's `signature_def` field, and our `runner` (a StringValue: graph, eager,
        eager-predict, eager-function) for clients that ask how the model runs."""
        unknown = [f for f in fields if f not in (SIGNATURE_DEF_FIELD, RUNNER_FIELD)]
        if not fields or unknown:
            raise InvalidInput(
                f"metadata_field must be '{SIGNATURE_DEF_FIELD}' (and optionally "
                f"'{RUNNER_FIELD}'), got {list(fields)}"
            )
        servable = self.servable(name, version)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.CopyFrom(model_spec(servable))
        if SIGNATURE_DEF_FIELD in fields:
            sigmap = get_model_metadata_pb2.SignatureDefMap()
            for key, sig in servable.runner.signatures.items():
                sigmap.signature_def[key].CopyFrom(sig.signature_def)
            response.metadata[SIGNATURE_DEF_FIELD].Pack(sigmap)
        if RUNNER_FIELD in fields:
            response.metadata[RUNNER_FIELD].Pack(
                wrappers_pb2.StringValue(value=servable.runner.kind)
            )
        return response

    def status(self, name: str, version: VersionRef) -> get_model_status_pb2.GetModelStatusResponse:
        """Every version's state (failed loads with their error), or one version's. A version
        still serving whose files broke is AVAILABLE with error_code OK and the reason as its
        message; an error code goes with END only, as in TF Serving."""
        response = get_model_status_pb2.GetModelStatusResponse()
        for status in self.registry.statuses(name, version):
            response.model_version_status.add(
                version=status.version,
                state=get_model_status_pb2.ModelVersionStatus.State.Value(status.state),
                status=status_pb2.StatusProto(
                    error_code=_UNKNOWN if status.error and status.state == "END" else 0,
                    error_message=status.error,
                ),
            )
        return response


def model_spec(servable: Servable, signature_name: str = "") -> model_pb2.ModelSpec:
    spec = model_pb2.ModelSpec(name=servable.name, signature_name=signature_name)
    spec.version.value = servable.version
    return spec
