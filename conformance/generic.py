"""The cases that hold for any model: built from what the server says about it.

`discover` reads the model's status and metadata (gRPC), and `cases_for` turns them into cases
whose expected status and message depend only on TF Serving's API, not on the model's values:

    status and metadata        REST and gRPC agree (versions, states, signatures)
    Predict                    generated inputs (a fixed seed) over gRPC, REST rows and REST
                               columns, the three answers equal; output_filter; a gzip body; a
                               number past float32's range, read as inf (REST's answer is
                               gRPC's to the same inputs with inf there)
    versions and labels        each AVAILABLE version and each label given answers as itself
    errors                     bad JSON, empty body, a number past double's range, unknown model
                               / version / label / signature, missing and extra inputs, wrong
                               dtype, malformed tensors, both formats at once, values past the
                               input's integer range, bad routes

A case whose request cannot be made for this model (no integer input to overflow, no label
named) is n/a with the reason; a request the server can take is never n/a. A case may name
graphserve's known other answer (a `Deviation`, given under an option): that answer deviates,
it does not fail.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from graphserve.conformance.cases import (
    STRICT_JSON_NUMBERS,
    Case,
    GrpcCase,
    Mismatch,
    RestCase,
    Target,
    expect,
)
from graphserve.core import client
from graphserve.core.codec import decode_json_request, tf_type_name, to_json_value
from graphserve.core.errors import InvalidInput
from graphserve.core.inputs import InputSource, sample_inputs
from graphserve.core.signature import TensorSpec, ValueRange, spec_from_tensor_info

__all__ = ["ModelFacts", "cases_for", "discover", "request_inputs"]

ITEST = "model_servers/tensorflow_model_server_test.py"
HANDLER = "model_servers/http_rest_api_handler_test.cc"
JSON = "util/json_tensor_test.cc"
JSON_CODE = "util/json_tensor.cc"  # its parser's own behaviour, where no test of theirs has it
PREDICT = "servables/tensorflow/predict_util_test.cc"
PREDICT_IMPL = "servables/tensorflow/predict_impl_test.cc"
STATUS = "model_servers/get_model_status_impl_test.cc"
METADATA = "servables/tensorflow/get_model_metadata_impl_test.cc"
EVHTTP = "util/net_http/server/internal/evhttp_request_test.cc"

_BATCH = 2  # rows of the generated inputs
_SEED = 0
_RTOL, _ATOL = 1e-5, 1e-6  # REST carries float32 exactly; a float64 model may differ past this
_INT32 = ("int8", "int16", "int32", "uint8", "uint16")  # JSON ints TF Serving reads as int32
_PAST_FLOAT32 = 1e39  # finite, past float32's largest (3.4e38): TF Serving reads inf


@dataclass(frozen=True)
class ModelFacts:
    """What the server says about the model: its AVAILABLE versions (ascending), the signature
    the cases use with its inputs and outputs, and the labels the user named."""

    name: str
    versions: tuple[int, ...]
    signature: str
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    signatures: tuple[str, ...]
    labels: tuple[str, ...] = ()

    @property
    def latest(self) -> int:
        return self.versions[-1]


def discover(
    target: Target, model: str, signature: str | None = None, labels: tuple[str, ...] = ()
) -> ModelFacts:
    """The model's facts from GetModelStatus and GetModelMetadata. grpc.RpcError when the server
    does not answer them; ValueError when the model has no AVAILABLE version or the signature
    is not there."""
    status = target.grpc.call("GetModelStatus", client.status_request(model))
    versions = tuple(
        sorted(
            s.version
            for s in client.version_statuses(status)
            if s.state == "AVAILABLE" and s.version is not None
        )
    )
    if not versions:
        raise ValueError(f"model {model!r} has no AVAILABLE version: {status}")
    metadata = target.grpc.call("GetModelMetadata", client.metadata_request(model))
    defs = client.signature_defs(metadata).signature_def
    names = tuple(sorted(defs))
    chosen = signature or _default_signature(defs)
    if chosen not in defs:
        raise ValueError(
            f"model {model!r} has no signature {chosen!r}: it has {', '.join(names) or 'none'}"
        )
    chosen_def = defs[chosen]
    if not chosen_def.inputs:
        raise ValueError(
            f"signature {chosen!r} of model {model!r} takes no inputs: name one that does with "
            f"--signature (the model has {', '.join(names)})"
        )
    return ModelFacts(
        name=model,
        versions=versions,
        signature=chosen,
        inputs={k: spec_from_tensor_info(k, v) for k, v in sorted(chosen_def.inputs.items())},
        outputs={k: spec_from_tensor_info(k, v) for k, v in sorted(chosen_def.outputs.items())},
        signatures=names,
        labels=labels,
    )


def _default_signature(defs: Any) -> str:
    if "serving_default" in defs:
        return "serving_default"
    predict = [k for k, v in sorted(defs.items()) if v.method_name.endswith("/predict")]
    return (predict or sorted(defs) or ["serving_default"])[0]


# -- what an answer is, whatever carried it -----------------------------------------------------


def _rest_answer(body: Any, facts: ModelFacts, key: str) -> dict[str, np.ndarray]:
    """The arrays of a REST predict answer, read with the outputs' specs the way a request's
    tensors are read (one output: the unnamed form; several: by name)."""
    expect(isinstance(body, dict) and key in body, f"no {key!r} in the answer: {body}")
    as_request = {"instances" if key == "predictions" else "inputs": body[key]}
    try:
        arrays, _ = decode_json_request(as_request, facts.outputs)
    except InvalidInput as exc:
        raise Mismatch(f"the answer's {key!r} does not read as the outputs: {exc}") from exc
    return arrays


def _same(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], what: str) -> None:
    expect(sorted(got) == sorted(want), f"{what} has outputs {sorted(got)}, not {sorted(want)}")
    for name, expected in want.items():
        value = np.asarray(got[name])
        expect(value.shape == expected.shape, f"{what}: {name!r} has shape {list(value.shape)}, "
               f"gRPC's has {list(expected.shape)}")  # fmt: skip
        if expected.dtype.kind in "fc":
            equal = np.allclose(value, expected, rtol=_RTOL, atol=_ATOL, equal_nan=True)
        else:
            equal = bool(np.array_equal(value, expected))
        expect(equal, f"{what}: {name!r} differs from gRPC's answer")


class _Reference:
    """The gRPC answer to the generated inputs, asked once and shared by the REST cases."""

    def __init__(
        self,
        target: Target,
        facts: ModelFacts,
        inputs: Mapping[str, np.ndarray],
        how: str = "",
    ) -> None:
        self._target, self._facts, self._inputs, self._how = target, facts, inputs, how
        self._outputs: dict[str, np.ndarray] | None = None

    def refused_with(self) -> str:
        """The first line of the model's INVALID_ARGUMENT refusal of the inputs, or "" when it
        answers (or fails otherwise: the cases comparing with it say what went wrong)."""
        import grpc

        try:
            self._ask()
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                return ""
            return (exc.details() or "INVALID_ARGUMENT").splitlines()[0][:160]
        return ""

    def refusal(self) -> str:
        """Why the model refuses the inputs with INVALID_ARGUMENT, or "" when it answers."""
        details = self.refused_with()
        if not details:
            return ""
        return (
            f"the model refuses generated inputs ({self._how}: {details}): give a request it "
            "takes with --request FILE, or the values an input takes with --input-range "
            "NAME=LOW:HIGH"
        )

    def outputs(self) -> dict[str, np.ndarray]:
        """gRPC's answer; Mismatch when gRPC failed, for the REST case comparing with it."""
        import grpc

        try:
            return self._ask()
        except grpc.RpcError as exc:
            raise Mismatch(
                f"gRPC failed on the same inputs: {client.grpc_error_text(exc)}"
            ) from exc

    def _ask(self) -> dict[str, np.ndarray]:
        if self._outputs is None:
            request = client.predict_request(
                self._facts.name, self._inputs, signature_name=self._facts.signature
            )
            response = self._target.grpc.call("Predict", request)
            self._outputs = client.predict_outputs(response)
        return self._outputs


# -- the cases ----------------------------------------------------------------------------------


def cases_for(
    target: Target,
    facts: ModelFacts,
    inputs: Mapping[str, np.ndarray] | None = None,
    ranges: Mapping[str, ValueRange] | None = None,
) -> list[Case]:
    """Every model-independent case for `facts`' model, in a fixed order, on `inputs` (the
    model's inputs by name; default: generated from the signature with a fixed seed, within
    `ranges` by input name).

    Generated inputs a model refuses (serialized tf.Examples with required features, ids past a
    vocabulary) make the cases that need an answer n/a, saying so; inputs given are the user's
    claim, and a refusal of them fails those cases."""
    given = inputs is not None
    if inputs is None:
        inputs = sample_inputs(facts.inputs.values(), batch_size=_BATCH, seed=_SEED, ranges=ranges)
    how = InputSource(ranges=dict(ranges or {})).describe(facts.inputs.values())
    reference = _Reference(target, facts, inputs, how)
    refused = "" if given else reference.refusal()
    what = "the request's inputs" if given else f"generated inputs, batch {_BATCH}"
    answered = [*_predict_cases(facts, inputs, reference, what), *_routing_cases(facts, inputs)]
    if refused:
        answered = [replace(c, not_applicable=c.not_applicable or refused) for c in answered]
    else:  # (asks the model, so only of inputs it takes)
        answered.append(_past_float32_range(target, facts, inputs))
    return [
        *_status_cases(facts),
        *_metadata_cases(target, facts),
        *answered,
        *_error_cases(facts, inputs),
    ]


def request_inputs(body: Any, facts: ModelFacts) -> dict[str, np.ndarray]:
    """The inputs of a TF Serving REST predict body (`instances` or `inputs`), read with the
    signature's specs. InvalidInput when they do not fit."""
    if not isinstance(body, dict):
        raise InvalidInput("the request must be a JSON object with 'instances' or 'inputs'")
    arrays, _ = decode_json_request(body, facts.inputs)
    return arrays


def _status_cases(facts: ModelFacts) -> list[Case]:
    name, path = facts.name, client.rest_path(facts.name)

    def grpc_lists_versions(response: Any) -> None:
        got = tuple(sorted(s.version for s in client.version_statuses(response)
                           if s.state == "AVAILABLE"))  # fmt: skip
        expect(got == facts.versions, f"AVAILABLE versions {got}, expected {facts.versions}")

    def rest_agrees(body: Any) -> None:
        got = sorted((s.version, s.state) for s in client.version_statuses_from_json(body))
        want = sorted((v, "AVAILABLE") for v in facts.versions)
        expect([g for g in got if g[1] == "AVAILABLE"] == want,
               f"REST lists {got}, gRPC lists AVAILABLE {list(facts.versions)}")  # fmt: skip

    def one_version(response: Any) -> None:
        got = [s.version for s in client.version_statuses(response)]
        expect(got == [facts.latest], f"versions {got}, expected [{facts.latest}]")

    return [
        GrpcCase(ITEST, "testGetModelStatus", "GetModelStatus",
                 lambda: client.status_request(name), check=grpc_lists_versions),
        RestCase(ITEST, "testGetStatusREST", "GET", path, None, 200, check=rest_agrees,
                 what="agrees with gRPC"),
        GrpcCase(STATUS, "SingleVersionSuccess", "GetModelStatus",
                 lambda: client.status_request(name, version=facts.latest), check=one_version,
                 what=f"version {facts.latest}"),
        RestCase(STATUS, "SingleVersionSuccess", "GET",
                 client.rest_path(name, version=facts.latest), None, 200,
                 check=lambda body: one_version_json(body, facts.latest)),
    ]  # fmt: skip


def one_version_json(body: Any, version: int) -> None:
    got = [s.version for s in client.version_statuses_from_json(body)]
    expect(got == [version], f"versions {got}, expected [{version}]")


def _metadata_cases(target: Target, facts: ModelFacts) -> list[Case]:
    name = facts.name

    def grpc_metadata(response: Any) -> None:
        spec = response.model_spec
        expect((spec.name, spec.version.value) == (name, facts.latest),
               f"model_spec ({spec.name!r}, {spec.version.value}), expected "
               f"({name!r}, {facts.latest})")  # fmt: skip
        signatures = tuple(sorted(client.signature_defs(response).signature_def))
        expect(signatures == facts.signatures, f"signatures {signatures}")

    def rest_agrees(body: Any) -> None:
        spec = body.get("model_spec", {}) if isinstance(body, dict) else {}
        want = {"name": name, "signature_name": "", "version": str(facts.latest)}
        expect(spec == want, f"model_spec {spec}, expected {want}")
        try:
            rest_defs = client.signature_defs_from_json(body)
        except (KeyError, TypeError, ValueError) as exc:
            raise Mismatch(f"metadata is not a SignatureDefMap: {exc}") from exc
        grpc_defs = client.signature_defs(
            target.grpc.call("GetModelMetadata", client.metadata_request(name))
        )
        expect(rest_defs == grpc_defs, "REST's signature_def differs from gRPC's")

    return [
        GrpcCase(ITEST, "testGetModelMetadata", "GetModelMetadata",
                 lambda: client.metadata_request(name), check=grpc_metadata),
        RestCase(ITEST, "testGetModelMetadataREST", "GET", client.rest_path(name, "metadata"),
                 None, 200, check=rest_agrees, what="agrees with gRPC"),
    ]  # fmt: skip


def _rows_and_columns(facts: ModelFacts, inputs: Mapping[str, np.ndarray]) -> tuple[Any, Any]:
    """The generated inputs as a row body (or None when the inputs share no batch dimension)
    and a columnar body."""
    columns = _json_values(inputs)
    named = len(inputs) > 1
    columnar = _columnar(facts, columns)
    batch = {a.shape[0] if a.ndim else None for a in inputs.values()}
    if len(batch) != 1 or None in batch:
        return None, columnar
    size = int(next(iter(batch)) or 0)
    if named:
        rows = [{k: v[i] for k, v in columns.items()} for i in range(size)]
    else:
        rows = next(iter(columns.values()))
    return {"signature_name": facts.signature, "instances": rows}, columnar


def _predict_cases(
    facts: ModelFacts, inputs: Mapping[str, np.ndarray], reference: _Reference, what: str
) -> list[Case]:
    name, path = facts.name, client.rest_path(facts.name, "predict")
    rows, columns = _rows_and_columns(facts, inputs)
    no_rows = "" if rows is not None else "the inputs share no batch dimension: no row format"
    first = sorted(facts.outputs)[0]

    def grpc_answer(response: Any) -> None:
        outputs = client.predict_outputs(response)
        expect(sorted(outputs) == sorted(facts.outputs),
               f"outputs {sorted(outputs)}, the signature has {sorted(facts.outputs)}")  # fmt: skip
        for key, spec in facts.outputs.items():
            got = outputs[key].dtype
            expect(got == spec.np_dtype or spec.dtype == "string",
                   f"output {key!r} is {got}, the signature says {spec.dtype}")  # fmt: skip
        ms = response.model_spec
        echoed = (ms.name, ms.signature_name, ms.version.value)
        want = (name, facts.signature, facts.latest)
        expect(echoed == want, f"model_spec {echoed}, expected {want}")

    def filtered(response: Any) -> None:
        expect(list(response.outputs) == [first], f"outputs {list(response.outputs)}, "
               f"expected only {first!r}")  # fmt: skip

    def like_grpc(key: str) -> Callable[[Any], None]:
        return lambda body: _same(_rest_answer(body, facts, key), reference.outputs(),
                                  f"REST {key}")  # fmt: skip

    gzipped = gzip.compress(json.dumps(columns).encode())
    return [
        GrpcCase(PREDICT, "PredictionSuccess", "Predict",
                 lambda: client.predict_request(name, inputs, signature_name=facts.signature),
                 check=grpc_answer, what=what),
        RestCase(ITEST, "testPredictREST", "POST", path, rows, 200,
                 check=like_grpc("predictions"), what="rows, equal to gRPC's answer",
                 not_applicable=no_rows),
        RestCase(ITEST, "testPredictColumnarREST", "POST", path, columns, 200,
                 check=like_grpc("outputs"), what="columns, equal to gRPC's answer"),
        RestCase(EVHTTP, "ValidGzipPost", "POST", path, gzipped, 200,
                 check=like_grpc("outputs"), headers={"Content-Encoding": "gzip"},
                 what="gzip body, equal to gRPC's answer"),
        GrpcCase(PREDICT, "PredictionSuccess", "Predict",
                 lambda: client.predict_request(name, inputs, signature_name=facts.signature,
                                                output_filter=[first]),
                 check=filtered, what=f"output_filter [{first}]"),
    ]  # fmt: skip


def _routing_cases(facts: ModelFacts, inputs: Mapping[str, np.ndarray]) -> list[Case]:
    name = facts.name
    _, columns = _rows_and_columns(facts, inputs)
    cases: list[Case] = []
    for version in facts.versions:  # one version too: a request any server takes
        cases += [
            GrpcCase(HANDLER, "Predict", "Predict", _predict_on(facts, inputs, version=version),
                     check=_answered_by(version), what=f"version {version}"),
            RestCase(HANDLER, "Predict", "POST", client.rest_path(name, "predict",
                     version=version), columns, 200),
        ]  # fmt: skip
    if not facts.labels:
        reason = "no labels named (--label NAME; TF Serving's API does not list them)"
        cases.append(RestCase(HANDLER, "Predict", "POST",
                              client.rest_path(name, "predict", label="LABEL"), columns, 200,
                              not_applicable=reason))  # fmt: skip
    for label in facts.labels:
        cases += [
            GrpcCase(HANDLER, "Predict", "Predict", _predict_on(facts, inputs, label=label),
                     check=_answered_by(*facts.versions), what=f"label {label}"),
            RestCase(HANDLER, "Predict", "POST", client.rest_path(name, "predict", label=label),
                     columns, 200),
        ]  # fmt: skip
    return cases


def _predict_on(
    facts: ModelFacts, inputs: Mapping[str, np.ndarray], **where: Any
) -> Callable[[], Any]:
    """A PredictRequest of the generated inputs to the version or label in `where`."""
    return lambda: client.predict_request(
        facts.name, inputs, signature_name=facts.signature, **where
    )


def _answered_by(*versions: int) -> Callable[[Any], None]:
    wanted = " or ".join(map(str, versions))

    def check(response: Any) -> None:
        got = response.model_spec.version.value
        expect(got in versions, f"answered by version {got}, expected {wanted}")

    return check


def _wrong_dtype(spec: TensorSpec) -> tuple[Any, str]:
    """A tensor of another dtype for `spec` (strings for numbers, floats for strings) and the
    words of TensorFlow's refusal."""
    if spec.dtype == "string":
        return np.array([1.0], np.float32), "to be string but float is provided"
    wanted = tf_type_name(spec.dtype)
    return np.array([b"any_value"], dtype=object), f"to be {wanted} but string is provided"


def _cut_content(array: np.ndarray) -> Any:
    """`array` with its tensor_content one byte short of its shape: a tensor that cannot parse."""
    from graphserve.core.codec import array_to_proto

    proto = array_to_proto(array)
    proto.tensor_content = np.ascontiguousarray(array).tobytes()[:-1]
    return proto


def _json_values(inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Each input as the plain JSON value TF Serving reads (lists, b64 objects for bytes)."""
    return {name: to_json_value(name, array) for name, array in inputs.items()}


def _columnar(facts: ModelFacts, values: Mapping[str, Any]) -> dict[str, Any]:
    """A columnar body: the inputs by name, or the one input's value alone (TF Serving's forms)."""
    inputs = dict(values) if len(values) > 1 else next(iter(values.values()))
    return {"signature_name": facts.signature, "inputs": inputs}


def _error_cases(facts: ModelFacts, inputs: Mapping[str, np.ndarray]) -> list[Case]:
    name, signature = facts.name, facts.signature
    path = client.rest_path(name, "predict")
    rows, columns = _rows_and_columns(facts, inputs)
    first_input = sorted(inputs)[0]
    spec = facts.inputs[first_input]
    wrong_tensor, wrong_text = _wrong_dtype(spec)
    missing = ",".join(sorted(inputs))
    unknown_version = facts.latest + 1000
    values = _json_values(inputs)
    numbers = spec.dtype not in ("string", "bool")

    def predict(
        model: str = name,
        signature: str = signature,
        replace: Mapping[str, Any] | None = None,
        drop: tuple[str, ...] = (),
        **options: Any,
    ) -> Callable[[], Any]:
        def build() -> Any:
            request = {k: v for k, v in {**inputs, **(replace or {})}.items() if k not in drop}
            return client.predict_request(model, request, signature_name=signature, **options)

        return build

    if rows is None:
        ragged, ragged_error, ragged_na = None, "", "the inputs share no batch dimension"
    elif len(inputs) == 1:
        first_row = rows["instances"][0]
        ragged = {"signature_name": signature, "instances": [first_row, [first_row]]}
        ragged_error, ragged_na = "Expecting shape", ""
    else:
        ragged = {"signature_name": signature, "instances": [rows["instances"][0], [1, 20, 30]]}
        ragged_error, ragged_na = "Expecting object but got list", ""
    too_big, too_big_text, too_big_na = _past_integer_range(facts, values)
    past_double = b'{"signature_name": %s, "inputs": [1e400]}' % json.dumps(signature).encode()
    return [
        RestCase(HANDLER, "PredictRequestErrors", "POST", path, b"", 400,
                 error="JSON Parse error: The document is empty", what="empty body"),
        RestCase(HANDLER, "PredictRequestErrors", "POST", path, b"instances = [1, 2]", 400,
                 error="JSON Parse error: Invalid value", what="not JSON"),
        RestCase(JSON_CODE, "FillPredictRequestFromJson", "POST", path, past_double, 400,
                 error="JSON Parse error: Number too big to be stored in double",
                 what="a number past double's range, 1e400"),
        RestCase(HANDLER, "PredictRequestErrors", "POST", path, {"signature_name": 100}, 400,
                 error="'signature_name' key must be a string value.",
                 what="signature_name 100"),
        RestCase(HANDLER, "PredictRequestErrors", "POST", path,
                 _columnar(facts, {**values, first_input: [["x"]]}), 400,
                 error=f"not of expected type: {tf_type_name(spec.dtype)}",
                 what=f"a string for {first_input!r}",
                 not_applicable="" if numbers else f"{first_input!r} is not a number"),
        RestCase(JSON, "SingleUnnamedTensorErrors", "POST", path,
                 {**columns, "instances": columns["inputs"]}, 400,
                 error="Not formatted correctly", what="both instances and inputs"),
        RestCase(JSON, "SingleUnnamedTensorErrors", "POST", path, ragged, 400,
                 error=ragged_error, what="ragged rows", not_applicable=ragged_na),
        RestCase(JSON, "SingleUnnamedTensorErrors", "POST", path, too_big, 400,
                 error=too_big_text, what="a value past the input's integer range",
                 not_applicable=too_big_na),
        RestCase(HANDLER, "PredictModelNameVersionErrors", "POST",
                 client.rest_path(f"{name}-nope", "predict"), columns, 404,
                 what="unknown model"),
        RestCase(HANDLER, "PredictModelNameVersionErrors", "POST",
                 client.rest_path(name, "predict", version=unknown_version), columns, 404,
                 what="unknown version"),
        RestCase(HANDLER, "PredictRequestErrors", "POST",
                 client.rest_path(name, "predict", label="nope"), columns, 400,
                 error="Unrecognized servable version label", what="unknown label"),
        RestCase(PREDICT, "ModelMissingSignatures", "POST", path,
                 {**columns, "signature_name": "nope"}, 400,
                 error='Serving signature key "nope" not found', what="unknown signature"),
        RestCase(HANDLER, "UnsupportedApiCalls", "POST", client.rest_path(name, "metadata"),
                 None, 400, error="Malformed request"),
        RestCase(HANDLER, "UnsupportedApiCalls", "GET", path, None, 400,
                 error="Malformed request"),
        GrpcCase(STATUS, "InvalidModelNameFailure", "GetModelStatus",
                 lambda: client.status_request(f"{name}-nope"), "NOT_FOUND",
                 error=f"Could not find any versions of model {name}-nope"),
        GrpcCase(STATUS, "InvalidModelVersionFailure", "GetModelStatus",
                 lambda: client.status_request(name, version=unknown_version), "NOT_FOUND",
                 error=f"Could not find version {unknown_version} of model {name}"),
        GrpcCase(PREDICT_IMPL, "MissingOrEmptyModelSpec", "Predict", predict(model=""),
                 "INVALID_ARGUMENT", what="no model name"),
        GrpcCase(PREDICT_IMPL, "MissingOrEmptyModelSpec", "Predict",
                 predict(model=f"{name}-nope"), "NOT_FOUND", what="unknown model"),
        GrpcCase(HANDLER, "PredictModelNameVersionErrors", "Predict",
                 predict(version=unknown_version), "NOT_FOUND", what="unknown version"),
        GrpcCase(PREDICT_IMPL, "EmptyInputList", "Predict", predict(drop=tuple(inputs)),
                 "INVALID_ARGUMENT", what="no inputs"),
        GrpcCase(HANDLER, "PredictRequestErrors", "Predict", predict(label="nope"),
                 "INVALID_ARGUMENT", error="Unrecognized servable version label",
                 what="unknown label"),
        GrpcCase(PREDICT, "ModelMissingSignatures", "Predict", predict(signature="nope"),
                 "FAILED_PRECONDITION", error='Serving signature key "nope" not found',
                 what="unknown signature"),
        GrpcCase(PREDICT, "PredictionInvalidTensor", "Predict",
                 predict(replace={"unknown_key1": inputs[first_input]}, drop=tuple(inputs)),
                 "INVALID_ARGUMENT",
                 error=f"Sent extra: {{unknown_key1}}. Missing but required: {{{missing}}}.",
                 what="extra and missing inputs"),
        GrpcCase(PREDICT, "InputTensorsHaveWrongType", "Predict",
                 predict(replace={first_input: wrong_tensor}), "INVALID_ARGUMENT",
                 error=wrong_text, what=f"wrong dtype for {first_input!r}"),
        GrpcCase(PREDICT, "PredictionInvalidTensor", "Predict",
                 predict(replace={first_input: _cut_content(inputs[first_input])}),
                 "INVALID_ARGUMENT", what=f"{first_input!r} does not parse as its shape",
                 not_applicable="" if numbers else f"{first_input!r} is not a number"),
        GrpcCase(PREDICT_IMPL, "OutputFiltersDontMatchModelSpecOutputs", "Predict",
                 predict(output_filter=["output_filter"]), "INVALID_ARGUMENT",
                 error="output tensor alias not found in signature: output_filter"),
    ]  # fmt: skip


def _past_integer_range(facts: ModelFacts, values: Mapping[str, Any]) -> tuple[Any, str, str]:
    """A columnar body with one value past its input's integer range (past int32's, or a uint64
    for an int64) and the words of TF Serving's refusal, or why there is none."""
    ints = [k for k, s in sorted(facts.inputs.items()) if s.dtype in (*_INT32, "int64")]
    if not ints:
        return None, "", "no integer input"
    key = ints[0]
    value = 2**40 if facts.inputs[key].dtype in _INT32 else 2**64 - 1
    body = _columnar(facts, {**values, key: _with_first(values[key], value)})
    return body, "not of expected type", ""


def _past_float32_range(
    target: Target, facts: ModelFacts, inputs: Mapping[str, np.ndarray]
) -> RestCase:
    """A columnar body with the first value of the first float32 input past float32's range,
    which TF Serving reads as inf (json_tensor_test.cc FloatTensorThatExceedsMaxReturnsInf):
    REST's answer must be gRPC's to the same inputs with inf there, whatever the model makes
    of it (its answer, or its refusal in the same words). Under --strict-json-numbers
    graphserve refuses the number: a known deviation."""
    path = client.rest_path(facts.name, "predict")
    test, what = "FloatTensorThatExceedsMaxReturnsInf", "a number past float32's range, read as inf"
    floats = [k for k, s in sorted(facts.inputs.items()) if s.dtype == "float32"]
    key = next((k for k in floats if inputs[k].size), None)
    if key is None:
        reason = "no float32 input" if not floats else f"the input {floats[0]!r} is empty"
        return RestCase(JSON, test, "POST", path, None, 200, what=what, not_applicable=reason)
    values = _json_values(inputs)
    body = _columnar(facts, {**values, key: _with_first(values[key], _PAST_FLOAT32)})
    infinite = np.array(inputs[key], copy=True)
    infinite.flat[0] = np.inf
    reference = _Reference(target, facts, {**inputs, key: infinite})
    refused = reference.refused_with()
    if refused:
        return RestCase(JSON, test, "POST", path, body, 400, error=refused,
                        what=f"{what}, which the model refuses",
                        deviation=STRICT_JSON_NUMBERS)  # fmt: skip

    def like_grpc(answer: Any) -> None:
        _same(_rest_answer(answer, facts, "outputs"), reference.outputs(), "REST outputs")

    return RestCase(JSON, test, "POST", path, body, 200, check=like_grpc,
                    what=f"{what}, equal to gRPC's answer with inf",
                    deviation=STRICT_JSON_NUMBERS)  # fmt: skip


def _with_first(tensor: Any, value: Any) -> Any:
    """A JSON tensor (nested lists, or a scalar) with its first number replaced by `value`."""
    copy = json.loads(json.dumps(tensor))
    row = copy
    while isinstance(row, list) and row and isinstance(row[0], list):
        row = row[0]
    if not (isinstance(row, list) and row):
        return value
    row[0] = value
    return copy
