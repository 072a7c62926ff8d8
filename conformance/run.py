"""Run the cases against a server: `run_conformance(spec) -> ConformanceReport`.

    spec = ConformanceSpec("127.0.0.1:8500", rest="127.0.0.1:8501", model="mlp")
    # over TLS: ConformanceSpec("grpcs://h:8500", rest="https://h:8501", tls=ClientTls(ca=CA))
    report = run_conformance(spec)          # ServerUnreachable when nothing answers
    report.failed                           # cases that broke: exit 3 in the CLI
    report.deviated                         # graphserve's known other answers: shown, exit 0
    report.server                           # "graphserve (graph)" when the server says so

Against any model the cases come from the server's own metadata (conformance/generic.py). With
`reference=True` the server is expected to serve TF Serving's half_plus_two models as
`write-models` lays them out, and TF Serving's own table (conformance/reference.py) runs too.

Over TLS every case is the same request on a TLS connection: `tls` (the --tls-* options) dials
both addresses, and a scheme decides for its own address: `grpcs://` and `https://` are TLS (the
system's CAs without options), `grpc://` and `http://` plaintext even with options, which is
how TF Serving is reached with an SSL config: TLS on gRPC, its REST port plaintext
(tensorflow/serving#1503).

A graphserve server says so in a metadata field of its own (`runner`, which TF Serving refuses):
the report names it, so that results from graphserve in TF Serving's clothes (the TF Serving
stand-in image) read as graphserve's own, never as TF Serving's.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from graphserve.conformance.cases import OUTCOMES, Case, CaseResult, Target, call_rest
from graphserve.conformance.generic import cases_for, discover, request_inputs
from graphserve.conformance.reference import GRPC_CASES, LABELS, REST_CASES, TWO
from graphserve.core import client
from graphserve.core.errors import ConfigError, InvalidInput, ServerUnreachable
from graphserve.core.execution import RUNNER_FIELD
from graphserve.core.httpclient import TlsError
from graphserve.core.results import JsonKeys, JsonResult
from graphserve.core.signature import ValueRange
from graphserve.core.tls import ClientTls, diagnose_address, split_scheme

__all__ = ["ConformanceReport", "ConformanceSpec", "run_conformance"]

REFERENCE_MODELS = ("default", TWO)
# A server that is up connects at once; past this many seconds, ask whether TLS is why it does not
_TLS_CHECK_AFTER_S = 1.0


@dataclass(frozen=True)
class ConformanceSpec:
    """Where the server is (gRPC, and REST when given; HOST:PORT, or with a scheme), how to dial
    it (`tls`, for both addresses unless a scheme says otherwise), which model, and the cases to
    run."""

    address: str
    rest: str | None = None
    model: str = "default"
    signature: str | None = None  # default: serving_default, else the first predict signature
    labels: tuple[str, ...] = ()  # version labels to route through (the API does not list them)
    reference: bool = False  # also TF Serving's table, on the models `write-models` writes
    request: Any = None  # a REST predict body (parsed JSON) whose inputs the model takes
    ranges: Mapping[str, ValueRange] = field(default_factory=dict)  # generated inputs' values
    timeout: float = 10.0
    tls: ClientTls | None = None  # the --tls-* options; None: plaintext but for a TLS scheme


@dataclass(frozen=True)
class ConformanceReport(JsonResult):
    """Every case's result, in the order run, and the counts. `server` is what the server says
    it is: "graphserve (RUNNER)" from a graphserve server, whatever its image is named; ""
    from any other."""

    address: str
    rest: str | None
    models: tuple[str, ...]
    reference: bool
    results: tuple[CaseResult, ...] = field(default=())
    server: str = ""

    json_keys: ClassVar[JsonKeys] = (
        "address", "rest", "server", "models", "reference", "counts", "results"
    )  # fmt: skip

    def counts(self) -> dict[str, int]:
        """How many cases had each outcome: {"pass", "fail", "deviates", "n/a"}."""
        tally = Counter(r.outcome for r in self.results)
        return {outcome: tally[outcome] for outcome in OUTCOMES}

    @property
    def failed(self) -> list[CaseResult]:
        """The cases that failed, in the order run (the CLI exits 3 when there is one)."""
        return [r for r in self.results if r.outcome == "fail"]

    @property
    def deviated(self) -> list[CaseResult]:
        """The cases answered with graphserve's known other answer (shown; not failures)."""
        return [r for r in self.results if r.outcome == "deviates"]


def _dialed(address: str, tls: ClientTls | None, what: str) -> tuple[str, ClientTls | None]:
    """`address` without its scheme and the TLS to dial it with (None: plaintext): plaintext for
    `grpc://` and `http://` even with `tls` (a TF Serving with an SSL config serves REST without
    TLS beside its TLS gRPC port), TLS for `grpcs://` and `https://` (`tls`, else the system's
    CAs), `tls` for an address without a scheme. ConfigError for another scheme."""
    try:
        bare, scheme_tls = split_scheme(address)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    if scheme_tls is False:
        return bare, None
    return ClientTls.for_address(address, tls)


def _tls_failure(grpc_client: client.GrpcClient) -> str | None:
    """Why the channel cannot connect if TLS is why (graphserve.core.tls.diagnose: a handshake
    of our own), else None."""
    return diagnose_address(grpc_client.address or "", grpc_client.tls, grpc=True)


def _wait_until_connected(grpc_client: client.GrpcClient, spec: ConformanceSpec) -> None:
    """Return once the gRPC channel connects. ServerUnreachable when it does not within
    `spec.timeout`, or after a second already when TLS is why (saying why and what to give)."""
    import grpc

    deadline = time.monotonic() + spec.timeout
    ready = grpc.channel_ready_future(grpc_client.channel)
    try:
        try:
            ready.result(timeout=min(_TLS_CHECK_AFTER_S, spec.timeout))
            return
        except grpc.FutureTimeoutError:
            reason = _tls_failure(grpc_client)
        if reason is not None:
            raise ServerUnreachable(f"gRPC at {spec.address}: {reason}")
        ready.result(timeout=max(deadline - time.monotonic(), 0.0))
    except grpc.FutureTimeoutError:
        raise ServerUnreachable(
            f"no gRPC server answers at {spec.address} within {spec.timeout:g} s: expected "
            "TF Serving's gRPC API (HOST:PORT, e.g. 127.0.0.1:8500)"
        ) from None
    finally:
        ready.cancel()


def connect(spec: ConformanceSpec) -> Target:
    """A Target on `spec`'s addresses once both answer; ServerUnreachable when one does not (or
    TLS fails: why, and what to give), ConfigError for TLS options that cannot work."""
    address, tls = _dialed(spec.address, spec.tls, "ADDRESS")
    rest, rest_tls = (None, None) if spec.rest is None else _dialed(spec.rest, spec.tls, "--rest")
    if spec.tls is not None and tls is None and rest_tls is None:
        raise ConfigError(
            "TLS options are given, and both addresses say plaintext (grpc://, http://): drop "
            "the options, or dial grpcs:// / https://"
        )
    grpc_client = client.GrpcClient.connect(address, timeout=spec.timeout, tls=tls)
    try:
        _wait_until_connected(grpc_client, spec)
        if rest is not None:
            path = "/v1/models/" + spec.model
            try:
                call_rest(rest, "GET", path, None, timeout=spec.timeout, tls=rest_tls)
            except TlsError as exc:
                raise ServerUnreachable(f"REST at {spec.rest}: {exc}") from None
            except OSError as exc:
                raise ServerUnreachable(
                    f"no HTTP server answers at {spec.rest}: {exc}; expected TF Serving's REST "
                    "API (HOST:PORT, e.g. 127.0.0.1:8501)"
                ) from None
    except BaseException:
        grpc_client.close()
        raise
    return Target(grpc_client, rest, spec.timeout, rest_tls)


def cases(target: Target, spec: ConformanceSpec) -> list[Case]:
    """The cases `spec` asks for, built from what the server says about its models.
    ServerUnreachable when the server does not serve them."""
    import grpc

    wanted = (
        [(m, LABELS if m == TWO else ()) for m in REFERENCE_MODELS]
        if spec.reference
        else [(spec.model, spec.labels)]
    )
    chosen: list[Case] = []
    for model, labels in wanted:
        try:
            facts = discover(target, model, spec.signature, tuple(labels))
        except grpc.RpcError as exc:
            hint = (
                " (serve write-models' tf1.config or tf2.config)"
                if spec.reference
                else (" (--model NAME)")
            )
            raise ServerUnreachable(
                f"{spec.address} does not serve model {model!r}{hint}: "
                f"{target.grpc.error_text(exc)}"
            ) from None
        except ValueError as exc:
            raise ServerUnreachable(f"{spec.address}: {exc}") from None
        inputs = None
        if spec.request is not None:
            try:
                inputs = request_inputs(spec.request, facts)
            except InvalidInput as exc:
                raise ConfigError(
                    f"--request does not fit {model!r}'s signature {facts.signature!r}: {exc}"
                ) from None
        chosen += cases_for(target, facts, inputs, spec.ranges)
    if spec.reference:
        chosen += [*REST_CASES, *GRPC_CASES]
    return chosen


def identify(target: Target, model: str) -> str:
    """What the server says it is: "graphserve (RUNNER)" when it answers graphserve's own
    metadata field for `model` (the TF Serving stand-in does: it is graphserve), "" when it
    refuses the field (TF Serving: INVALID_ARGUMENT, "Metadata field runner is not supported")
    or leaves it out."""
    import grpc
    from google.protobuf import wrappers_pb2

    request = client.metadata_request(model, fields=("signature_def", RUNNER_FIELD))
    try:
        response = target.grpc.call("GetModelMetadata", request)
    except grpc.RpcError:
        return ""
    runner = wrappers_pb2.StringValue()
    if RUNNER_FIELD not in response.metadata or not response.metadata[RUNNER_FIELD].Unpack(runner):
        return ""
    return f"graphserve ({runner.value})" if runner.value else ""


def run_conformance(spec: ConformanceSpec) -> ConformanceReport:
    """Run every case of `spec` against its server, one after the other; a case that fails is
    in the report, not raised. Raises ServerUnreachable when the server does not answer at
    `spec`'s addresses or does not serve the model, ConfigError when `spec.request` does not
    fit the model's signature."""
    target = connect(spec)
    models = REFERENCE_MODELS if spec.reference else (spec.model,)
    try:
        chosen = cases(target, spec)
        server = identify(target, models[0])
        results = tuple(case.run(target) for case in chosen)
    finally:
        target.grpc.close()
    return ConformanceReport(spec.address, spec.rest, models, spec.reference, results, server)
