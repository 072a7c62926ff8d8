"""The transport-independent request handling both front ends (gRPC and REST) share.

Resolving the model and signature, validating inputs, running the model, filtering outputs and
building metadata and status responses all happen here, once; the front ends only translate
bytes to these calls and errors to their status codes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
from google.protobuf import wrappers_pb2
from google.protobuf.message import Message
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_pb2,
    status_pb2,
)

from graphserve.core.codec import as_bytes, shape_hint, validate_inputs
from graphserve.core.errors import (
    FailedPrecondition,
    InvalidInput,
    NotFound,
    Unavailable,
    Unimplemented,
)
from graphserve.core.execution import EXECUTION_FIELD, RUNNER_FIELD
from graphserve.serving.deadline import (
    QUEUE,
    RUNNING,
    advance,
    check_deadline,
    current_deadline,
    deadline_scope,
)
from graphserve.serving.metrics import Measure, ServingMetrics
from graphserve.serving.registry import ModelRegistry, Servable, VersionRef
from graphserve.serving.runner import Runner
from graphserve.serving.signature import SERVING_DEFAULT, ServedSignature, TensorSpec

if TYPE_CHECKING:
    from graphserve.serving.requestlog import RequestLogs

__all__ = ["DataPlane"]

SIGNATURE_DEF_FIELD = "signature_def"
_OWN_FIELDS = (RUNNER_FIELD, EXECUTION_FIELD)
EXAMPLES_INPUT = "inputs"  # the key of a classify or regress signature's one input
REGRESS_OUTPUT = "outputs"  # ... and of a regress signature's one output
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
_UNKNOWN = 2  # tensorflow.error.Code.UNKNOWN: what a failed load reports
_ON_DEMAND_TRIES = 3  # a version loaded for a request and unloaded before it ran: load again


class Demand(Protocol):
    """Loads versions on demand (serving.ondemand.OnDemandManager): given a request's model,
    version and deadline, the seconds it waited for the load, None for a model it does not
    load."""

    def demand(self, name: str, version: VersionRef, deadline: float | None) -> float | None: ...

    async def demand_async(
        self, name: str, version: VersionRef, deadline: float | None
    ) -> float | None: ...


@dataclass(frozen=True)
class Prepared:
    """What loading a request's version on demand came to, before the request (`prepare`)."""

    waited: float
    error: Exception | None = None


# The servables the current request holds (set by DataPlane.measure).
_LEASES: ContextVar[list[Servable] | None] = ContextVar("graphserve_leases", default=None)


def _refused(
    exc: InvalidInput, checked: dict[str, np.ndarray], signature: ServedSignature
) -> InvalidInput:
    """The graph refused the inputs: say what they were declared."""
    hint = shape_hint(checked, signature.inputs)
    return InvalidInput(f"{exc.message} ({hint})" if hint else exc.message)


class _Measured:
    """DataPlane.measure's scope: a class rather than nested generators, as every request
    enters one (each generator-based context manager costs about a microsecond and a half)."""

    __slots__ = ("_leases", "_plane", "_timed", "_token", "measure")

    def __init__(self, plane: DataPlane, model: str, protocol: str) -> None:
        self._plane = plane
        metrics = plane.metrics
        self._timed = metrics.measure(model, protocol) if metrics is not None else None
        self.measure = self._timed.measure if self._timed is not None else Measure(model, protocol)
        self._leases: list[Servable] = []
        self._token: Token[list[Servable] | None] | None = None

    def __enter__(self) -> Measure:
        self._plane._enter()
        self._token = _LEASES.set(self._leases)
        try:
            if self._timed is not None:
                self._timed.__enter__()
            try:
                advance(QUEUE, "before the server could start on it")
            except BaseException as exc:
                if self._timed is not None:
                    self._timed.__exit__(type(exc), exc, exc.__traceback__)
                raise
        except BaseException:
            self._end()
            raise
        return self.measure

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        try:
            if self._timed is not None:
                self._timed.__exit__(kind, exc, tb)
        finally:
            self._end()

    def _end(self) -> None:
        assert self._token is not None
        _LEASES.reset(self._token)
        self._plane._leave(self._leases)


class _Request:
    """DataPlane.request's scope: the deadline, the measurement and the servable, in one
    object."""

    __slots__ = ("_deadline", "_measured", "_name", "_prepared", "_version")

    def __init__(
        self,
        plane: DataPlane,
        protocol: str,
        name: str,
        version: VersionRef,
        time_remaining: float | None,
        prepared: Prepared | None,
    ) -> None:
        # The deadline outlives the measurement: a request that ends for its client's deadline
        # is counted as such, not as cancelled.
        self._deadline = deadline_scope(time_remaining)
        self._measured = _Measured(plane, name, protocol)
        self._name = name
        self._version = version
        self._prepared = prepared

    def __enter__(self) -> Measure:
        self._deadline.__enter__()
        try:
            measure = self._measured.__enter__()
            try:
                plane = self._measured._plane
                plane.take_prepared(measure, self._prepared)
                check_deadline("before the server could start on it")
                measure.servable = plane.servable(self._name, self._version, measure)
            except BaseException as exc:
                self._measured.__exit__(type(exc), exc, exc.__traceback__)
                raise
        except BaseException:
            self._deadline.__exit__()
            raise
        return measure

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        try:
            self._measured.__exit__(kind, exc, tb)
        finally:
            self._deadline.__exit__()


class DataPlane:
    def __init__(
        self,
        registry: ModelRegistry,
        metrics: ServingMetrics | None = None,
        *,
        method_name_check: bool = False,
        demand: Demand | None = None,
    ) -> None:
        self.registry = registry
        self.metrics = metrics
        # Loads a version a request names that is not resident (serving.ondemand), returning
        # the seconds the request waited; None when the server loads every model at start.
        self.demand = demand
        # Refuse Classify/Regress on signatures of another method, as TF Serving does only
        # under --enable_signature_method_name_check.
        self.method_name_check = method_name_check
        # The request log (serving.requestlog): the front ends call `log` when it is set.
        self.request_logs: RequestLogs | None = None
        self._draining = False
        self._in_flight = 0
        self._idle = threading.Condition()

    def measure(self, model: str, protocol: str) -> _Measured:
        """Track one request (`with plane.measure(model, protocol) as measure:`): refused with
        UNAVAILABLE once draining, counted in flight until it ends, and counted and timed in the
        metrics. A request whose client has left already (graphserve.serving.deadline's
        Cancellation) ends here, counted, before any work. The front end fills in the servable
        and signature as it resolves them; a servable resolved inside is leased until the end,
        so the manager closes an unloaded version only after its last request."""
        return _Measured(self, model, protocol)

    def _enter(self) -> None:
        with self._idle:
            if self._draining:
                raise Unavailable("the server is shutting down; retry on another replica")
            self._in_flight += 1

    def _leave(self, leases: list[Servable]) -> None:
        for servable in leases:
            self.registry.release(servable)
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def request(
        self,
        protocol: str,
        name: str,
        version: VersionRef,
        time_remaining: float | None = None,
        prepared: Prepared | None = None,
    ) -> _Request:
        """The one entry of every model request, whichever front end it came through (`with
        plane.request(...) as measure:`): refused when draining, measured, under the client's
        deadline (no work for a client that stopped waiting in a queue), the servable resolved
        and leased (`measure.servable`). The front end resolves the signature
        (`use_signature`), decodes, and calls predict, classify, regress or multi_inference,
        which validate, run and count."""
        return _Request(self, protocol, name, version, time_remaining, prepared)

    def use_signature(self, measure: Measure, name: str) -> ServedSignature:
        """The signature a request names (or serving_default), recorded in its measurement."""
        assert measure.servable is not None
        signature = self.signature(measure.servable, name)
        measure.signature = signature.name
        return signature

    def log(
        self,
        measure: Measure,
        kind: str,
        request: Message | Callable[[], Message],
        response: Message | bytes | Callable[[], Message],
    ) -> None:
        """Log one answered request if its model logs and the sample takes it (the front ends
        call this only where `request_logs` is set): hands the messages, or functions making
        them, to the log's writer and returns."""
        logs = self.request_logs
        if logs is None or measure.servable is None:
            return
        settings = logs.sample(measure.model)
        if settings is None:
            return
        logs.record(
            settings,
            kind,
            measure.servable,
            measure.signature,
            measure.arrived_ns,
            request,
            response,
        )

    def drain(self, timeout: float) -> bool:
        """Refuse new requests and wait up to `timeout` s for in-flight ones; True if none is
        left."""
        with self._idle:
            self._draining = True
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def servable(
        self, name: str, version: VersionRef = None, measure: Measure | None = None
    ) -> Servable:
        """The servable a request names, leased inside a request (`measure`); one loaded on
        demand is loaded first, the time the request waited for it kept in `measure.cold_load`
        (front ends tell the client)."""
        if not name:
            raise InvalidInput(
                "model_spec.name is empty: name the model to serve (this server has "
                + (", ".join(repr(n) for n in self.registry.names()) or "none")
                + ")"
            )
        for tries in range(_ON_DEMAND_TRIES + 1):
            try:
                return self._resident(name, version)
            except NotFound:
                if self.demand is None or tries == _ON_DEMAND_TRIES:
                    raise
                waited = self.demand.demand(name, version, current_deadline())
                if waited is None:
                    raise
                if measure is not None:
                    measure.cold_load = (measure.cold_load or 0.0) + waited
        raise AssertionError("unreachable")

    async def prepare(
        self, name: str, version: VersionRef, time_remaining: float | None
    ) -> Prepared | None:
        """On an event loop, before `request`: load the version if it is loaded on demand and
        not resident, awaiting the load with no thread held, so requests for resident models
        are not kept waiting for a free thread meanwhile. `request` takes what came of it (it
        finds the version resident then or, unloaded again meanwhile, loads it waiting)."""
        if self.demand is None or not name:
            return None
        try:
            self.registry.get(name, version)
            return None
        except (NotFound, InvalidInput):
            pass
        deadline = None if time_remaining is None else time.monotonic() + time_remaining
        try:
            waited = await self.demand.demand_async(name, version, deadline)
        except Exception as exc:
            return Prepared(0.0, exc)  # raised in `request`, so it is measured and counted
        return None if waited is None else Prepared(waited)

    @staticmethod
    def take_prepared(measure: Measure, prepared: Prepared | None) -> None:
        """Inside a request's measurement: what `prepare` waited (kept in the measure), or
        what it failed with (raised here, so it is measured and counted)."""
        if prepared is not None:
            measure.cold_load = prepared.waited
            if prepared.error is not None:
                raise prepared.error

    def _resident(self, name: str, version: VersionRef) -> Servable:
        leases = _LEASES.get()
        if leases is None:  # outside a request (metadata, status): nothing runs on it
            return self.registry.get(name, version)
        servable = self.registry.acquire(name, version)
        leases.append(servable)
        return servable

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
        *,
        inline: bool = False,
    ) -> dict[str, np.ndarray]:
        """Validate, run and filter. Raises InvalidInput for inputs or filters that do not fit.
        `inline`: the caller is the only thread on the request's path (an event loop), and the
        model runs on it with no hand-off (Runner.run_inline)."""
        checked = self._predict_inputs(signature, inputs, output_filter)
        return _filtered(self._run(servable, signature, checked, inline), output_filter)

    async def predict_async(
        self,
        servable: Servable,
        signature: ServedSignature,
        inputs: dict[str, np.ndarray],
        output_filter: Sequence[str] = (),
    ) -> dict[str, np.ndarray]:
        """`predict` for a coroutine on an asyncio loop: the model runs as its runner's
        `run_async` says (batching: the request waits for its batch holding no thread)."""
        checked = self._predict_inputs(signature, inputs, output_filter)
        with self._running(servable, signature, checked):
            outputs = await servable.runner.run_async(signature.name, checked)
        return _filtered(outputs, output_filter)

    @staticmethod
    def _predict_inputs(
        signature: ServedSignature, inputs: dict[str, np.ndarray], output_filter: Sequence[str]
    ) -> dict[str, np.ndarray]:
        """The inputs, validated against the signature, once the output filter is checked."""
        for i, alias in enumerate(output_filter):  # TF Serving's words (predict_util.cc)
            if alias not in signature.outputs:
                raise InvalidInput(
                    f"output tensor alias not found in signature: {alias} Outputs expected to "
                    f"be in the set {{{','.join(sorted(signature.outputs))}}}."
                )
            if alias in output_filter[:i]:
                raise InvalidInput(f"duplicate output tensor alias: {alias}")
        return validate_inputs(inputs, signature.inputs)

    def _run(
        self,
        servable: Servable,
        signature: ServedSignature,
        checked: dict[str, np.ndarray],
        inline: bool = False,
    ) -> dict[str, np.ndarray]:
        """One model run (what `_running` does around a coroutine's, written out: every
        request makes one)."""
        runner = servable.runner
        started = self._starting(runner)
        try:
            if inline:
                outputs = runner.run_inline(signature.name, checked)
            else:
                outputs = runner.run(signature.name, checked)
        except InvalidInput as exc:
            raise _refused(exc, checked, signature) from exc
        self._ran(servable, signature, started)
        return outputs

    @contextmanager
    def _running(
        self, servable: Servable, signature: ServedSignature, checked: dict[str, np.ndarray]
    ) -> Iterator[None]:
        """Around one model run: the deadline and the client checked first (a runner that runs
        on its caller starts the model now; batching starts it when it takes the batch), the
        inputs' declared shapes added to the graph's refusal, the run timed in the metrics and
        in the servable's `run_time`."""
        started = self._starting(servable.runner)
        try:
            yield
        except InvalidInput as exc:
            raise _refused(exc, checked, signature) from exc
        self._ran(servable, signature, started)

    @staticmethod
    def _starting(runner: Runner) -> float:
        check_deadline("before the model ran")
        advance(RUNNING if runner.on_caller else QUEUE, "before the model ran")
        return time.perf_counter()

    def _ran(self, servable: Servable, signature: ServedSignature, started: float) -> None:
        took = time.perf_counter() - started
        servable.run_time.observe(took)
        if self.metrics is not None:
            self.metrics.observe_runtime(servable, signature.name, took)

    def classify(
        self, servable: Servable, signature: ServedSignature, examples: list[bytes]
    ) -> list[list[tuple[str, float]]]:
        """Per example, its (label, score) pairs: the signature's `classes` and/or `scores`."""
        outputs = self._run_examples(servable, signature, CLASSIFY_METHOD, examples)
        return classifications(signature, outputs, len(examples))

    def regress(
        self, servable: Servable, signature: ServedSignature, examples: list[bytes]
    ) -> list[float]:
        """Per example, the signature's `outputs` value."""
        outputs = self._run_examples(servable, signature, REGRESS_METHOD, examples)
        return regressions(signature, outputs, len(examples))

    def multi_inference(
        self,
        servable: Servable,
        tasks: Sequence[tuple[ServedSignature, str]],
        examples: list[bytes],
    ) -> list[list[list[tuple[str, float]]] | list[float]]:
        """Classify and regress the same examples with several signatures, as TF Serving's
        MultiInference: every task names a classify or regress method and a signature of its
        own; every signature is fed the same examples. All are checked before any runs."""
        seen: set[str] = set()
        for signature, method in tasks:
            if signature.name in seen:
                raise InvalidInput(f"Duplicate evaluation of signature: {signature.name}")
            seen.add(signature.name)
            if method not in (CLASSIFY_METHOD, REGRESS_METHOD):
                raise Unimplemented(f"Unsupported signature method_name: {method}")
            self._examples_input(signature, method)
        results: list[list[list[tuple[str, float]]] | list[float]] = []
        for signature, method in tasks:
            outputs = self._run_examples(servable, signature, method, examples)
            if method == CLASSIFY_METHOD:
                results.append(classifications(signature, outputs, len(examples)))
            else:
                results.append(regressions(signature, outputs, len(examples)))
        return results

    def _examples_input(self, signature: ServedSignature, method: str) -> TensorSpec:
        """The one input (the serialized tf.Examples) of a classify or regress signature, by
        TF Serving's rules: the method name is checked only when the server was asked to
        (--enable_signature_method_name_check; TF2 exports name every signature predict)."""
        kind = "classification" if method == CLASSIFY_METHOD else "regression"
        if self.method_name_check and signature.method_name != method:
            raise InvalidInput(
                f"Expected {kind} signature method_name to be {method}. "
                f"Was: {signature.method_name}"
            )
        if len(signature.inputs) != 1:
            raise InvalidInput("Expected one input Tensor.")
        if EXAMPLES_INPUT not in signature.inputs:
            raise InvalidInput(
                f"No {kind} inputs found in SignatureDef: signature {signature.name!r} has "
                f"{', '.join(repr(n) for n in signature.inputs)}, expected '{EXAMPLES_INPUT}'"
            )
        return signature.inputs[EXAMPLES_INPUT]

    def _run_examples(
        self, servable: Servable, signature: ServedSignature, method: str, examples: list[bytes]
    ) -> dict[str, np.ndarray]:
        spec = self._examples_input(signature, method)
        if method == REGRESS_METHOD:
            if len(signature.outputs) != 1:
                raise InvalidInput("Expected one output Tensor.")
            if REGRESS_OUTPUT not in signature.outputs:
                raise InvalidInput(
                    f"No regression outputs found in SignatureDef: signature {signature.name!r} "
                    f"has {', '.join(repr(o) for o in signature.outputs)}, expected "
                    f"'{REGRESS_OUTPUT}'"
                )
        # The serialized examples go in as strings whatever dtype the signature declares: TF
        # Serving feeds them so, and TF 1.0 exports (half_plus_three) declared them DT_FLOAT.
        return self._run(servable, signature, {spec.name: np.array(examples, dtype=object)})

    def metadata(
        self, name: str, version: VersionRef, fields: Sequence[str] = (SIGNATURE_DEF_FIELD,)
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        """TF Serving's `signature_def` field, and our own for clients that ask how the model
        runs, each a StringValue: `runner` (graph, eager, eager-predict, eager-function) and
        `execution` (graphserve.core.execution: eager, tf.function, restored, session, ...)."""
        unknown = [f for f in fields if f not in (SIGNATURE_DEF_FIELD, *_OWN_FIELDS)]
        if not fields or unknown:
            raise InvalidInput(
                f"metadata_field must be '{SIGNATURE_DEF_FIELD}' (and optionally "
                f"{' and '.join(repr(f) for f in _OWN_FIELDS)}), got {list(fields)}"
            )
        servable = self.servable(name, version)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.CopyFrom(model_spec(servable))
        if SIGNATURE_DEF_FIELD in fields:
            sigmap = get_model_metadata_pb2.SignatureDefMap()
            for key, sig in servable.runner.signatures.items():
                sigmap.signature_def[key].CopyFrom(sig.signature_def)
            response.metadata[SIGNATURE_DEF_FIELD].Pack(sigmap)
        own = {RUNNER_FIELD: servable.runner.kind, EXECUTION_FIELD: servable.runner.execution}
        for field in _OWN_FIELDS:
            if field in fields:
                response.metadata[field].Pack(wrappers_pb2.StringValue(value=own[field]))
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


def classifications(
    signature: ServedSignature, outputs: dict[str, np.ndarray], n: int
) -> list[list[tuple[str, float]]]:
    """TF Serving's classification result: per example, (label, score) pairs from the
    signature's `classes` (strings) and/or `scores` (floats), one row per example."""
    classes, scores = outputs.get("classes"), outputs.get("scores")
    if classes is None and scores is None:
        raise InvalidInput(
            'Expected classification signature outputs to contain at least one of "classes" or '
            f'"scores". Signature {signature.name!r} has '
            + ", ".join(repr(o) for o in signature.outputs)
        )
    if classes is not None and classes.dtype.kind not in "OSU":
        raise InvalidInput(f"Expected classes Tensor of DT_STRING. Got: {classes.dtype}")
    if scores is not None and scores.dtype.kind != "f":
        raise InvalidInput(f"Expected scores Tensor of DT_FLOAT. Got: {scores.dtype}")
    labels = None if classes is None else _rows(classes, n, "classes")
    values = None if scores is None else _rows(scores, n, "scores")
    if labels is not None and values is not None and labels.shape != values.shape:
        raise InvalidInput(
            f"Tensors class and score should match in shape: {list(labels.shape)} vs "
            f"{list(values.shape)}"
        )
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


def regressions(signature: ServedSignature, outputs: dict[str, np.ndarray], n: int) -> list[float]:
    """TF Serving's regression result: one float per example, from the signature's one output."""
    (values,) = outputs.values()
    if values.dtype.kind != "f":
        raise InvalidInput(f"Expected output Tensor of DT_FLOAT. Got: {values.dtype}")
    rows = _rows(values, n, "output")
    if rows.shape[1] != 1:
        raise InvalidInput(
            f"Expected output Tensor shape to be [{n}] or [{n}, 1], the regression output of "
            f"{signature.name!r} has {rows.shape[1]} values per example"
        )
    return [float(v) for v in rows[:, 0]]


def _rows(array: np.ndarray, n: int, what: str) -> np.ndarray:
    """`array` as one row per example; its batch size must be the number of examples."""
    if array.ndim == 0 or array.shape[0] != n:
        raise InvalidInput(
            f"Input batch size did not match output batch size: {n} examples, {what} of shape "
            f"{list(array.shape)}"
        )
    return array.reshape(n, -1)


def _filtered(
    outputs: dict[str, np.ndarray], output_filter: Sequence[str]
) -> dict[str, np.ndarray]:
    return {alias: outputs[alias] for alias in output_filter} if output_filter else outputs


def model_spec(servable: Servable, signature_name: str = "") -> model_pb2.ModelSpec:
    spec = model_pb2.ModelSpec(name=servable.name, signature_name=signature_name)
    spec.version.value = servable.version
    return spec
