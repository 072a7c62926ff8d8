"""Request deadlines and cancellation: the moment a client stops waiting, carried from the front
end to the model.

gRPC clients set a deadline with their call timeout; REST clients with a `Grpc-Timeout` header in
gRPC's format (`500m` is 500 ms; units H, M, S, m, u, n), the convention grpc-gateway uses for
HTTP. The front end sets it for the request's thread with `deadline_scope`; the data plane checks
it before the model runs, and the batching runner drops requests whose deadline passed in its
queue, so no model time is spent on an answer nobody waits for. Either way the client gets
DEADLINE_EXCEEDED (gRPC) or 504 (REST).

A client may also stop waiting before its deadline: a gRPC call cancelled, a REST connection
closed. The front end says how to tell with a `Cancellation` per request (`with cancellation:`).
The data plane asks it before the server starts on the request and before the model runs it
(`advance`), and the batching runner takes a request whose client left out of its queue (at once
where the transport says when, gRPC; when its batch comes up otherwise, REST), so the model never
runs it. The request ends with `Cancelled` (CANCELLED, HTTP 499: nobody reads it), counted by
the stage it had reached (`POOL`, `QUEUE`, `RUNNING`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextvars import ContextVar, Token

from graphserve.core.errors import Cancelled, DeadlineExceeded, InvalidInput, ServingError

__all__ = [
    "POOL",
    "QUEUE",
    "RUNNING",
    "TIMEOUT_HEADER",
    "Cancellation",
    "Cancelled",
    "advance",
    "check_deadline",
    "client_gone",
    "current_cancellation",
    "current_deadline",
    "deadline_scope",
    "ended_by_deadline",
    "parse_timeout",
]

TIMEOUT_HEADER = "Grpc-Timeout"

# Where a request was when its client stopped waiting: the `stage` of the metrics.
POOL = "pool"  # waiting for a thread: the server had not started on it
QUEUE = "queue"  # started, but the model had not: the batch queue, mostly
RUNNING = "running"  # the model had started on it: it finishes, and its answer is dropped

# gRPC ends a call whose deadline passed as it ends a cancelled one, and the client's copy of the
# deadline fires first (by the request's transit): a call that ends this close to its deadline
# (seconds) ended by it.
DEADLINE_SLACK = 0.02

_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_TIMEOUT = re.compile(r"^(\d{1,8})([HMSmun])$")  # gRPC's TimeoutValue is at most 8 digits
_deadline: ContextVar[float | None] = ContextVar("graphserve_deadline", default=None)
_cancellation: ContextVar[Cancellation | None] = ContextVar("graphserve_cancellation", default=None)


class Cancellation:
    """Whether one request's client still waits for its answer, and how far the request got
    (`stage`: POOL, then QUEUE once the server starts on it, RUNNING once the model does).

    `gone` is the transport's answer to "has the client left?" (gRPC's threaded server: the call
    is no longer active; REST: the connection was lost). It is asked, never awaited, at the few
    points where stopping saves work. `notify` registers a callback for the end of the call
    (gRPC's `context.add_callback`: False if the call had already ended), so that a request in
    the batch queue leaves it the moment its client goes. The asyncio front end needs neither:
    it cancels the request's coroutine.

    Within `with cancellation:` it is the running request's (`current_cancellation`): a context
    manager of its own rather than contextlib's, as every request enters one, and a generator's
    costs microseconds there.
    """

    __slots__ = ("_gone", "_notify", "_token", "stage")

    def __init__(
        self,
        gone: Callable[[], bool] | None = None,
        notify: Callable[[Callable[[], None]], bool] | None = None,
    ) -> None:
        self._gone = gone
        self._notify = notify
        self._token: Token[Cancellation | None] | None = None
        self.stage = POOL

    def __enter__(self) -> Cancellation:
        self._token = _cancellation.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _cancellation.reset(self._token)

    @property
    def cancelled(self) -> bool:
        """Whether the client has left (never, where the transport cannot tell)."""
        return self._gone is not None and self._gone()

    def when_cancelled(self, callback: Callable[[], None]) -> None:
        """Have `callback` called once the client leaves, where the transport can say when (it
        may also be called once the request has ended, and must then do nothing)."""
        if self._notify is not None and not self._notify(callback):
            callback()  # the call had already ended


def parse_timeout(text: str) -> float:
    """Seconds from a gRPC timeout string ("100m", "2S"); InvalidInput naming the header."""
    match = _TIMEOUT.match(text.strip())
    if not match:
        raise InvalidInput(
            f"{TIMEOUT_HEADER} header {text!r} is not a timeout: expected up to 8 digits and a "
            "unit, H, M, S, m (ms), u (µs) or n (ns), e.g. '500m'"
        )
    return int(match[1]) * _UNITS[match[2]]


class deadline_scope:  # a function to its callers: `with deadline_scope(seconds):`
    """Within the block, the request must answer within `seconds_left` (None: no deadline). A
    class rather than a generator, as every request enters one."""

    __slots__ = ("_at", "_token")

    def __init__(self, seconds_left: float | None) -> None:
        self._at = None if seconds_left is None else time.monotonic() + seconds_left
        self._token: Token[float | None] | None = None

    def __enter__(self) -> None:
        self._token = _deadline.set(self._at)

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _deadline.reset(self._token)


def current_deadline() -> float | None:
    """The running request's deadline on time.monotonic()'s clock, or None."""
    return _deadline.get()


def check_deadline(where: str) -> None:
    """Raise DeadlineExceeded when the running request's deadline has passed; `where` ends the
    message: "the request's deadline passed <where>"."""
    at = _deadline.get()
    if at is not None and time.monotonic() >= at:
        raise DeadlineExceeded(f"the request's deadline passed {where}")


def current_cancellation() -> Cancellation | None:
    """The running request's Cancellation, or None (a caller outside any front end)."""
    return _cancellation.get()


def ended_by_deadline(at: float | None) -> bool:
    """Whether a request whose client stopped waiting stopped for its deadline `at` (monotonic
    time; None: it had none), give or take DEADLINE_SLACK."""
    return at is not None and time.monotonic() >= at - DEADLINE_SLACK


def client_gone(where: str, deadline: float | None) -> ServingError:
    """What a request whose client stopped waiting ends with: DeadlineExceeded if that was its
    `deadline`, Cancelled if not. `where` ends the message."""
    if ended_by_deadline(deadline):
        return DeadlineExceeded(f"the request's deadline passed {where}")
    return Cancelled(f"the client cancelled the request {where}")


def advance(stage: str, where: str) -> None:
    """The running request reaches `stage` (QUEUE, RUNNING): raise `client_gone(where)` if its
    client has left, so that the work of the stage is not done for nobody."""
    cancellation = _cancellation.get()
    if cancellation is not None:
        if cancellation.cancelled:
            raise client_gone(where, _deadline.get())
        cancellation.stage = stage
