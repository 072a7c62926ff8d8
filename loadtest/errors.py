"""Errors of the load test, one tree; the CLI maps each to an exit code once.

LoadTestError                 (exit 1) anything that stops a load test
├── RemoteTargetError         (exit 2) a target is not on loopback and --allow-remote is off
├── PayloadError              (exit 1) the request payload cannot be built, read or written
├── LocustRunError            (exit 1) a locust run did not finish or left no statistics
├── ServerStartError          (exit 1) a self-managed server did not start or become ready
├── ColdStartError            (exit 1) a request to a freshly started server failed
└── SloError                  (exit 2) an --slo gate cannot be read or names an unknown arm
"""

from __future__ import annotations

__all__ = [
    "ColdStartError",
    "LoadTestError",
    "LocustRunError",
    "PayloadError",
    "RemoteTargetError",
    "ServerStartError",
    "SloError",
]


class LoadTestError(Exception):
    """Base of every load-test failure; the message says what was wrong and what was expected."""

    exit_code = 1


class RemoteTargetError(LoadTestError):
    exit_code = 2


class PayloadError(LoadTestError):
    pass


class LocustRunError(LoadTestError):
    pass


class ServerStartError(LoadTestError):
    pass


class SloError(LoadTestError):
    exit_code = 2


class ColdStartError(LoadTestError):
    """A Predict against a freshly started server failed (the server did start)."""
