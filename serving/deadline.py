"""Request deadlines: the moment a client stops waiting, carried from the front end to the model.

gRPC clients set one with their call timeout; REST clients with a `Grpc-Timeout` header in gRPC's
format (`500m` is 500 ms; units H, M, S, m, u, n), the convention grpc-gateway uses for HTTP. The
front end sets it for the request's thread with `deadline_scope`; the data plane checks it before
the model runs, and the batching runner drops requests whose deadline passed in its queue, so no
model time is spent on an answer nobody waits for. Either way the client gets DEADLINE_EXCEEDED
(gRPC) or 504 (REST).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from graphserve.core.errors import DeadlineExceeded, InvalidInput

__all__ = [
    "TIMEOUT_HEADER",
    "check_deadline",
    "current_deadline",
    "deadline_scope",
    "parse_timeout",
]

TIMEOUT_HEADER = "Grpc-Timeout"

_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_TIMEOUT = re.compile(r"^(\d{1,8})([HMSmun])$")  # gRPC's TimeoutValue is at most 8 digits
_deadline: ContextVar[float | None] = ContextVar("graphserve_deadline", default=None)


def parse_timeout(text: str) -> float:
    """Seconds from a gRPC timeout string ("100m", "2S"); InvalidInput naming the header."""
    match = _TIMEOUT.match(text.strip())
    if not match:
        raise InvalidInput(
            f"{TIMEOUT_HEADER} header {text!r} is not a timeout: expected up to 8 digits and a "
            "unit, H, M, S, m (ms), u (µs) or n (ns), e.g. '500m'"
        )
    return int(match[1]) * _UNITS[match[2]]


@contextmanager
def deadline_scope(seconds_left: float | None) -> Iterator[None]:
    """Within the block, the request must answer within `seconds_left` (None: no deadline)."""
    at = None if seconds_left is None else time.monotonic() + seconds_left
    token = _deadline.set(at)
    try:
        yield
    finally:
        _deadline.reset(token)


def current_deadline() -> float | None:
    """The running request's deadline on time.monotonic()'s clock, or None."""
    return _deadline.get()


def check_deadline(where: str) -> None:
    """Raise DeadlineExceeded when the running request's deadline has passed; `where` ends the
    message: "the request's deadline passed <where>"."""
    at = _deadline.get()
    if at is not None and time.monotonic() >= at:
        raise DeadlineExceeded(f"the request's deadline passed {where}")
