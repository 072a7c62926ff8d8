"""The one case model: a request, the answer TF Serving's own tests expect, and how it is judged.

    RestCase   an HTTP request (method, path, body, headers) and the status, body or error text
    GrpcCase   an RPC and its request, the status code, and a check of the response or error text

A case runs against a `Target` (a gRPC channel and, if given, a REST address with the TLS it is
dialed with) and gives a `CaseResult`, one of four outcomes:

    pass       the answer is TF Serving's
    fail       it is not (what was expected and what came back)
    deviates   it is the answer the case's `Deviation` names: a known difference, graphserve's
               by choice (an option such as --strict-json-numbers), shown with TF Serving's
               answer, this one and why; not a failure
    n/a        the request cannot be made for this server or model (why): no REST address, no
               integer input to overflow, inputs the model refuses. Never for a request the
               server can take.

Each case names the file of tensorflow/serving its expectation comes from and the test there, so
a failure points at the reference. Error texts are judged as TF Serving's tests judge them: the
status code exactly, the message by a substring of it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from graphserve.core import client
from graphserve.core.results import JsonResult
from graphserve.core.tls import ClientTls

__all__ = [
    "DEVIATES",
    "NOT_APPLICABLE",
    "OUTCOMES",
    "STRICT_JSON_NUMBERS",
    "Case",
    "CaseResult",
    "Deviation",
    "GrpcCase",
    "Mismatch",
    "Outcome",
    "RestCase",
    "Target",
    "call_rest",
    "expect",
]

Outcome = Literal["pass", "fail", "deviates", "n/a"]
OUTCOMES: tuple[Outcome, ...] = ("pass", "fail", "deviates", "n/a")
DEVIATES: Outcome = "deviates"
NOT_APPLICABLE: Outcome = "n/a"
_SHOWN = 300  # characters of a body or message shown on a failure


class Mismatch(Exception):
    """A response that is not the one expected; the text says what differed."""


def expect(condition: bool, problem: str) -> None:
    """Raise Mismatch(problem) unless `condition`: how response checks say what was wrong."""
    if not condition:
        raise Mismatch(problem)


@dataclass(frozen=True)
class Deviation:
    """An answer graphserve gives knowingly where TF Serving answers otherwise: its status (an
    HTTP status, or a gRPC code's name), a substring of its error message, and why (the option
    that asks for it, and how to get TF Serving's answer instead)."""

    status: int | str
    error: str
    why: str

    def matches(self, status: int | str, message: str) -> bool:
        return status == self.status and self.error in message


@dataclass(frozen=True)
class CaseResult(JsonResult):
    """One case's verdict. `expected` (TF Serving's answer) and `got` are filled when the case
    fails or deviates, `reason` when it deviates (why) or is n/a (why not)."""

    source: str  # the tensorflow/serving file its expectation comes from
    test: str  # the test there
    case: str  # what was sent, e.g. "REST POST /v1/models/m:predict"
    outcome: Outcome
    expected: str = ""
    got: str = ""
    reason: str = ""

    @property
    def passed(self) -> bool:
        """The outcome is "pass"."""
        return self.outcome == "pass"


@dataclass
class Target:
    """The server under test: its gRPC channel (always, over TLS when its client was connected
    so) and its REST address (when given) with the TLS to dial it with (None: plaintext)."""

    grpc: client.GrpcClient
    rest: str | None = None
    timeout: float = 30.0
    rest_tls: ClientTls | None = None


def _unreadable(exc: Exception) -> str:
    return _shown(f"{type(exc).__name__}: {exc}")


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


class _Judged:
    """What a RestCase and a GrpcCase share: a verdict written the same way, and the case's
    `check` run on an answer with the same outcomes."""

    source: str
    test: str
    check: Callable[[Any], None] | None
    deviation: Deviation | None

    @property
    def case(self) -> str:
        raise NotImplementedError

    def expected(self) -> str:
        raise NotImplementedError

    def result(self, outcome: Outcome, got: str = "", reason: str = "") -> CaseResult:
        expected = self.expected() if outcome in ("fail", DEVIATES) else ""
        return CaseResult(self.source, self.test, self.case, outcome, expected, got, reason)

    def refused(self, status: int | str, message: str, got: str) -> CaseResult:
        """The verdict on an answer that is not TF Serving's: deviates when it is the case's
        known deviation, else fail."""
        if self.deviation is not None and self.deviation.matches(status, message):
            return self.result(DEVIATES, got=got, reason=self.deviation.why)
        return self.result("fail", got=got)

    def checked(self, answer: Any, said: str, shown: str = "") -> CaseResult:
        """pass when `check` (if any) accepts `answer`; else fail with `said` (how it came back)
        and what the check found. An answer of another shape fails the case, not the run."""
        if self.check is None:
            return self.result("pass")
        try:
            self.check(answer)
        except Mismatch as exc:
            return self.result("fail", got=f"{said}, but {exc}")
        except Exception as exc:
            return self.result("fail", got=f"{said}, unreadable: {_unreadable(exc)}{shown}")
        return self.result("pass")


@dataclass(frozen=True)
class RestCase(_Judged):
    """An HTTP request and TF Serving's answer to it: the status, and the whole JSON body
    (`expect`), a substring of its `{"error": ...}` (`error`), or a `check` of the parsed body."""

    source: str
    test: str
    method: str
    path: str
    body: Any  # a JSON value, or bytes sent as they are, or None
    status: int
    expect: Any = None
    error: str | None = None
    check: Callable[[Any], None] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    what: str = ""  # a few words when the path alone does not say what the case sends
    not_applicable: str = ""  # set: the case is n/a for this reason
    deviation: Deviation | None = None  # graphserve's known other answer, if it has one

    kind: ClassVar[str] = "REST"

    @property
    def case(self) -> str:
        return f"REST {self.method} {self.path}" + (f" ({self.what})" if self.what else "")

    def expected(self) -> str:
        if self.expect is not None:
            return f"{self.status} {_shown(self.expect)}"
        if self.error is not None:
            return f'{self.status} {{"error": "...{self.error}..."}}'
        return str(self.status)

    def run(self, target: Target) -> CaseResult:
        if self.not_applicable:
            return self.result(NOT_APPLICABLE, reason=self.not_applicable)
        if target.rest is None:
            return self.result(NOT_APPLICABLE, reason="no REST address given (--rest HOST:PORT)")
        try:
            status, content_type, body = call_rest(
                target.rest,
                self.method,
                self.path,
                self.body,
                self.headers,
                target.timeout,
                tls=target.rest_tls,
            )
        except OSError as exc:
            return self.result("fail", got=f"no answer: {exc}")
        got = f"{status} {_shown(body)}"
        error = body.get("error") if isinstance(body, dict) else None
        message = error if isinstance(error, str) else ""
        if status != self.status:
            return self.refused(status, message, got)
        if content_type.split(";")[0].strip() != "application/json":
            return self.result("fail", got=f"{status} with Content-Type {content_type!r}")
        if self.expect is not None and body != self.expect:
            return self.refused(status, message, got)
        if self.error is not None and self.error not in message:
            return self.refused(status, message, got)
        return self.checked(body, str(status), f" in {got}")


def call_rest(
    address: str,
    method: str,
    path: str,
    body: Any,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    *,
    tls: ClientTls | None = None,
) -> tuple[int, str, Any]:
    """(status, Content-Type, parsed body or the text when it is not JSON) of one request on a
    fresh connection (over TLS with `tls`, or for an https:// address), with no headers but
    `headers`. OSError when nothing answers; TlsError (an OSError) when TLS is why."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    connection = client.HttpConnection(address, timeout, tls=tls)
    try:  # every failure of the client is an OSError (graphserve.core.httpclient)
        reply = connection.request(method, path, data, dict(headers or {}))
    finally:
        connection.close()
    try:
        parsed = reply.json()
    except ValueError:
        parsed = reply.text
    return reply.status, reply.headers.get("content-type", ""), parsed


@dataclass(frozen=True)
class GrpcCase(_Judged):
    """An RPC (a PredictionService or ModelService method) with its request, and TF Serving's
    answer: the status code, then a `check` of the response (OK) or a substring of the details."""

    source: str
    test: str
    rpc: str
    request: Callable[[], Any]
    code: str = "OK"  # a grpc.StatusCode name
    check: Callable[[Any], None] | None = None
    error: str | None = None
    what: str = ""
    not_applicable: str = ""
    deviation: Deviation | None = None

    kind: ClassVar[str] = "gRPC"

    @property
    def case(self) -> str:
        return f"gRPC {self.rpc}" + (f" ({self.what})" if self.what else "")

    def expected(self) -> str:
        if self.code == "OK":
            return "OK and the expected response"
        return f"{self.code}: ...{self.error or ''}..."

    def run(self, target: Target) -> CaseResult:
        import grpc

        if self.not_applicable:
            return self.result(NOT_APPLICABLE, reason=self.not_applicable)
        try:
            response = target.grpc.call(self.rpc, self.request(), timeout=target.timeout)
        except grpc.RpcError as exc:
            code, details = exc.code().name, exc.details() or ""
            got = f"{code}: {_shown(details)}"
            if code != self.code or (self.error is not None and self.error not in details):
                return self.refused(code, details, got)
            return self.result("pass")
        if self.code != "OK":
            return self.result("fail", got=f"OK: {_shown(str(response))}")
        return self.checked(response, "OK")


Case = RestCase | GrpcCase


# -- the known deviations: graphserve's other answers, each asked for by an option -------------

STRICT_JSON_NUMBERS = Deviation(
    400,
    "values out of range for float32",
    "graphserve was started with --strict-json-numbers, which refuses a finite JSON number past "
    "float32's range; TF Serving, and graphserve without the option, read it as +-inf",
)
