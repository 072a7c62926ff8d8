"""The one case model: a request, the answer TF Serving's own tests expect, and how it is judged.

    RestCase   an HTTP request (method, path, body, headers) and the status, body or error text
    GrpcCase   an RPC and its request, the status code, and a check of the response or error text

A case runs against a `Target` (a gRPC channel and, if given, a REST address) and gives a
`CaseResult`: pass, fail (what was expected and what came back) or n/a (why it does not apply).
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

__all__ = [
    "NOT_APPLICABLE",
    "Case",
    "CaseResult",
    "GrpcCase",
    "Mismatch",
    "Outcome",
    "RestCase",
    "Target",
    "call_rest",
    "expect",
]

Outcome = Literal["pass", "fail", "n/a"]
NOT_APPLICABLE: Outcome = "n/a"
_SHOWN = 300  # characters of a body or message shown on a failure


class Mismatch(Exception):
    """A response that is not the one expected; the text says what differed."""


def expect(condition: bool, problem: str) -> None:
    """Raise Mismatch(problem) unless `condition`: how response checks say what was wrong."""
    if not condition:
        raise Mismatch(problem)


@dataclass(frozen=True)
class CaseResult(JsonResult):
    """One case's verdict. `expected` and `got` are filled on a failure, `reason` on n/a."""

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
    """The server under test: its gRPC channel (always) and its REST address (when given)."""

    grpc: client.GrpcClient
    rest: str | None = None
    timeout: float = 30.0


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

    @property
    def case(self) -> str:
        raise NotImplementedError

    def expected(self) -> str:
        raise NotImplementedError

    def result(self, outcome: Outcome, got: str = "", reason: str = "") -> CaseResult:
        expected = self.expected() if outcome == "fail" else ""
        return CaseResult(self.source, self.test, self.case, outcome, expected, got, reason)

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
                target.rest, self.method, self.path, self.body, self.headers, target.timeout
            )
        except OSError as exc:
            return self.result("fail", got=f"no answer: {exc}")
        got = f"{status} {_shown(body)}"
        if status != self.status:
            return self.result("fail", got=got)
        if content_type.split(";")[0].strip() != "application/json":
            return self.result("fail", got=f"{status} with Content-Type {content_type!r}")
        if self.expect is not None and body != self.expect:
            return self.result("fail", got=got)
        if self.error is not None:
            error = body.get("error") if isinstance(body, dict) else None
            if not isinstance(error, str) or self.error not in error:
                return self.result("fail", got=got)
        return self.checked(body, str(status), f" in {got}")


def call_rest(
    address: str,
    method: str,
    path: str,
    body: Any,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> tuple[int, str, Any]:
    """(status, Content-Type, parsed body or the text when it is not JSON) of one request on a
    fresh connection, with no headers but `headers`. OSError when nothing answers."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    connection = client.HttpConnection(address, timeout)
    try:
        reply = connection.request(method, path, data, dict(headers or {}))
    except Exception as exc:  # http.client's errors are not OSErrors: one kind for the caller
        raise OSError(f"{type(exc).__name__}: {exc}") from exc
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
            got = f"{exc.code().name}: {_shown(exc.details() or '')}"
            if exc.code().name != self.code:
                return self.result("fail", got=got)
            if self.error is not None and self.error not in (exc.details() or ""):
                return self.result("fail", got=got)
            return self.result("pass")
        if self.code != "OK":
            return self.result("fail", got=f"OK: {_shown(str(response))}")
        return self.checked(response, "OK")


Case = RestCase | GrpcCase
