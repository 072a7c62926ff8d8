"""The gRPC front end: TF Serving's PredictionService and ModelService, plus gRPC health.

Servicers come from tensorflow-serving-api's generated stubs, so the wire format is TF Serving's
own. Every ServingError is mapped to its status code in one place, `_status`. On the asyncio
server (`ServerOptions.grpc_asyncio`) Predict is a coroutine (`AsyncPredictionServicer`); the
other methods are the same threaded ones, run on the server's thread pool.

A call its client cancels (or whose deadline passes) stops where it is: on the threaded server
the context says the call is no longer active and calls back when it ends (`_cancellation`); on
the asyncio server the call's coroutine is cancelled. A call cancelled before it has a thread
is dropped by gRPC itself, before any of this code sees it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, TypeVar

import grpc
from tensorflow_serving.apis import (
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from graphserve.core.codec import array_from_proto
from graphserve.core.defaults import COLD_LOAD_HEADER, DEFAULT_MAX_BODY_BYTES
from graphserve.core.errors import InvalidInput, ServingError, Unimplemented
from graphserve.serving.dataplane import CLASSIFY_METHOD, DataPlane, Prepared, model_spec
from graphserve.serving.deadline import Cancellation
from graphserve.serving.messages import (
    classification_response,
    fill_classifications,
    fill_regressions,
    predict_response,
    regression_response,
)
from graphserve.serving.metrics import Measure
from graphserve.serving.registry import Servable, VersionRef
from graphserve.serving.signature import SERVING_DEFAULT, ServedSignature
from graphserve.serving.tfexample import examples_from_input

__all__ = ["AsyncUndecodableRequests", "UndecodableRequests", "add_services"]

log = logging.getLogger("graphserve.grpc")

F = TypeVar("F", bound=Callable[..., Any])


def _status(exc: Exception) -> tuple[grpc.StatusCode, str]:
    """The status a request that raised `exc` ends with; an unexpected error is logged."""
    if isinstance(exc, ServingError):
        return exc.grpc_code, exc.message
    log.error("unexpected error while serving a gRPC request", exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"


def _abort(context: grpc.ServicerContext, exc: Exception) -> None:
    context.abort(*_status(exc))


def _mapped(method: F) -> F:
    @wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as exc:
            _abort(context, exc)

    return wrapper  # type: ignore[return-value]


class _Undecodable:
    """What a request that is not its message type decodes to, so it can be answered."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class UndecodableRequests(grpc.ServerInterceptor):
    """Bytes that do not parse as the method's request message get INVALID_ARGUMENT naming the
    message type. grpc's default is INTERNAL ("Exception deserializing request!") and a
    traceback in the log for every such request, which would make a client's bug look like a
    server fault. An answer a method serialized itself (bytes) goes out as it is."""

    def __init__(self) -> None:
        self._wrapped: dict[str, Any] = {}  # by method: handlers are fixed once registered

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        wrapped = self._wrapped.get(details.method)
        if wrapped is None:
            wrapped = self._wrap(continuation(details), details)
        return wrapped

    def _wrap(self, handler: Any, details: Any) -> Any:
        if handler is None:  # no such method: not cached, or made-up names would pile up
            return None
        if handler.request_deserializer is not None and handler.unary_unary:
            handler = handler._replace(
                request_deserializer=_lenient(handler.request_deserializer),
                unary_unary=_answering_undecodable(handler.unary_unary, details.method),
                response_serializer=_passing_bytes(handler.response_serializer),
            )
        self._wrapped[details.method] = handler
        return handler


class AsyncUndecodableRequests(UndecodableRequests, grpc.aio.ServerInterceptor):
    """`UndecodableRequests` for the asyncio server."""

    async def intercept_service(self, continuation: Any, details: Any) -> Any:  # type: ignore[override]
        wrapped = self._wrapped.get(details.method)
        if wrapped is None:
            wrapped = self._wrap(await continuation(details), details)
        return wrapped


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # protobuf's DecodeError, or anything a parser raises
            return _Undecodable(exc)

    return deserialize


def _passing_bytes(serialize: Callable[[Any], bytes] | None) -> Callable[[Any], bytes] | None:
    """The method's response serializer, letting an answer already serialized (bytes: Predict's
    `messages.predict_response`) through as it is."""
    if serialize is None:
        return None

    def serialized(response: Any) -> bytes:
        return response if isinstance(response, bytes) else serialize(response)

    return serialized


def _answering_undecodable(behaviour: Callable[..., Any], method: str) -> Callable[..., Any]:
    """`behaviour`, answering a request that did not decode with INVALID_ARGUMENT; a coroutine
    function stays one (the asyncio server tells the two apart)."""

    def refusal(request: _Undecodable) -> tuple[grpc.StatusCode, str]:
        return (
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the request is not a valid message for {method}: {request.error}",
        )

    if inspect.iscoroutinefunction(behaviour):

        async def serve_async(request: Any, context: Any) -> Any:
            if isinstance(request, _Undecodable):
                await context.abort(*refusal(request))
            return await behaviour(request, context)

        return serve_async

    def serve(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, _Undecodable):
            context.abort(*refusal(request))
        return behaviour(request, context)

    return serve


def _cancellation(context: Any) -> Cancellation:
    """How a call's client leaving shows: the threaded server's context says whether the call is
    still active, and calls back when it ends. An asyncio server's context says neither: it
    cancels the call's coroutine instead."""
    if isinstance(context, grpc.ServicerContext):
        return Cancellation(lambda: not context.is_active(), context.add_callback)
    return Cancellation()


def _cold_load_said(measure: Measure, context: Any) -> Servable:
    """The request's servable; an answer that waited for it to load on demand says how long in
    its trailing metadata."""
    if measure.cold_load is not None:
        context.set_trailing_metadata(((COLD_LOAD_HEADER, f"{measure.cold_load:.6f}"),))
    assert measure.servable is not None
    return measure.servable


def _version(spec: Any) -> VersionRef:
    """ModelSpec's version choice: a number, a label, or neither (the newest)."""
    if spec.HasField("version"):
        return int(spec.version.value)
    return spec.version_label or None


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, plane: DataPlane, max_message_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.plane = plane
        self.max_message_bytes = max_message_bytes

    @contextmanager
    def _servable(
        self, spec: Any, context: grpc.ServicerContext, prepared: Prepared | None = None
    ) -> Iterator[tuple[Servable, Any]]:
        """The servable a request names (DataPlane.request), the request told how to see its
        client leave; an answer that waited for it to load on demand says how long in its
        trailing metadata."""
        time_remaining = context.time_remaining()
        version = _version(spec)
        with (
            _cancellation(context),
            self.plane.request("grpc", spec.name, version, time_remaining, prepared) as m,
        ):
            yield _cold_load_said(m, context), m

    @contextmanager
    def _resolve(
        self, spec: Any, context: grpc.ServicerContext, prepared: Prepared | None = None
    ) -> Iterator[tuple[Servable, ServedSignature, Measure]]:
        """... and the signature it names."""
        with self._servable(spec, context, prepared) as (servable, measure):
            yield servable, self.plane.use_signature(measure, spec.signature_name), measure

    @_mapped
    def Predict(self, request: predict_pb2.PredictRequest, context: Any) -> Any:
        # `_resolve`, written out: every request comes through here.
        spec = request.model_spec
        plane = self.plane
        with (
            _cancellation(context),
            plane.request("grpc", spec.name, _version(spec), context.time_remaining()) as measure,
        ):
            servable = _cold_load_said(measure, context)
            signature = plane.use_signature(measure, spec.signature_name)
            outputs = plane.predict(
                servable, signature, self._inputs(request), request.output_filter
            )
            response = predict_response(servable, signature, outputs)
            if plane.request_logs is not None:
                plane.log(measure, "predict", request, response)
            return response

    def _inputs(self, request: predict_pb2.PredictRequest) -> dict[str, Any]:
        limit = self.max_message_bytes
        return {n: array_from_proto(t, n, limit) for n, t in request.inputs.items()}

    @_mapped
    def GetModelMetadata(self, request: Any, context: Any) -> Any:
        return self.plane.metadata(
            request.model_spec.name, _version(request.model_spec), list(request.metadata_field)
        )

    @_mapped
    def Classify(self, request: Any, context: Any) -> Any:
        plane = self.plane
        with self._resolve(request.model_spec, context) as (servable, signature, measure):
            result = plane.classify(servable, signature, examples_from_input(request.input))
            response = classification_response(servable, signature.name, result)
            if plane.request_logs is not None:
                plane.log(measure, "classify", request, response)
            return response

    @_mapped
    def Regress(self, request: Any, context: Any) -> Any:
        plane = self.plane
        with self._resolve(request.model_spec, context) as (servable, signature, measure):
            values = plane.regress(servable, signature, examples_from_input(request.input))
            response = regression_response(servable, signature.name, values)
            if plane.request_logs is not None:
                plane.log(measure, "regress", request, response)
            return response

    @_mapped
    def MultiInference(self, request: Any, context: Any) -> Any:
        """Several classify/regress tasks on one model and one set of examples (TF Serving's
        multi_inference.cc rules: one model name, no signature twice, every signature fed the
        same examples)."""
        specs = [task.model_spec for task in request.tasks]
        if not specs:
            raise InvalidInput("MultiInferenceRequest must specify at least one task.")
        if any(not spec.name for spec in specs):
            raise InvalidInput("Found ModelSpec with an empty model name.")
        if len({spec.name for spec in specs}) != 1:
            raise InvalidInput(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name."
            )
        with self._servable(specs[0], context) as (servable, measure):
            tasks = []
            for task in request.tasks:
                key = task.model_spec.signature_name or SERVING_DEFAULT
                if key not in servable.runner.signatures:
                    raise InvalidInput(f"Requested signature not found in model graph: {key}")
                tasks.append((servable.runner.signatures[key], task.method_name))
            examples = examples_from_input(request.input)
            results = self.plane.multi_inference(servable, tasks, examples)
            response = inference_pb2.MultiInferenceResponse()
            for task, result in zip(request.tasks, results, strict=True):
                out = response.results.add()
                out.model_spec.CopyFrom(model_spec(servable, task.model_spec.signature_name))
                if task.method_name == CLASSIFY_METHOD:
                    fill_classifications(out.classification_result, result)  # type: ignore[arg-type]
                else:
                    fill_regressions(out.regression_result, result)  # type: ignore[arg-type]
            if self.plane.request_logs is not None:
                self.plane.log(measure, "multi_inference", request, response)
            return response


class AsyncPredictionServicer(PredictionServicer):
    """The PredictionService for the asyncio server: Predict is a coroutine, so a request that
    waits for its batch holds no thread; the other methods are the threaded ones, run on the
    server's thread pool."""

    async def Predict(self, request: predict_pb2.PredictRequest, context: Any) -> Any:  # type: ignore[override]
        try:
            spec = request.model_spec
            prepared = await self.plane.prepare(spec.name, _version(spec), context.time_remaining())
            with self._resolve(spec, context, prepared) as (servable, signature, measure):
                outputs = await self.plane.predict_async(
                    servable, signature, self._inputs(request), list(request.output_filter)
                )
                response = predict_response(servable, signature, outputs)
                if self.plane.request_logs is not None:
                    self.plane.log(measure, "predict", request, response)
                return response
        except Exception as exc:
            await context.abort(*_status(exc))


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    @_mapped
    def GetModelStatus(self, request: Any, context: Any) -> Any:
        return self.plane.status(request.model_spec.name, _version(request.model_spec))

    @_mapped
    def HandleReloadConfigRequest(self, request: Any, context: Any) -> Any:
        raise Unimplemented("reloading the model config is not supported by this server yet")


def add_services(
    server: grpc.Server | grpc.aio.Server,
    plane: DataPlane,
    max_message_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> None:
    """TF Serving's two services on `server`; Predict as a coroutine on an asyncio server."""
    servicer = (
        AsyncPredictionServicer if isinstance(server, grpc.aio.Server) else PredictionServicer
    )
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        servicer(plane, max_message_bytes), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(plane), server)
