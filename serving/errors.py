"""Errors the servers report to clients, one tree, each mapped once to a gRPC and an HTTP status.

    ServingError                 (INTERNAL / 500) unexpected failure while serving a request
    ├── InvalidInput             (INVALID_ARGUMENT / 400) the request does not fit the signature
    ├── FailedPrecondition       (FAILED_PRECONDITION / 400) e.g. unknown signature name
    ├── NotFound                 (NOT_FOUND / 404) unknown model or version
    ├── PayloadTooLarge          (RESOURCE_EXHAUSTED / 413) the request is over the size limit
    ├── Unavailable              (UNAVAILABLE / 503) the model exists but cannot serve right now
    ├── DeadlineExceeded         (DEADLINE_EXCEEDED / 504) the client's deadline passed first
    └── Unimplemented            (UNIMPLEMENTED / 501) an API this server does not offer

The mapping follows TensorFlow Serving's (`util/net_http/server` status-to-HTTP table), so a client
cannot tell our servers from TF Serving by their error codes.
"""

from __future__ import annotations

import grpc

__all__ = [
    "DeadlineExceeded",
    "FailedPrecondition",
    "InvalidInput",
    "NotFound",
    "PayloadTooLarge",
    "ServingError",
    "Unavailable",
    "Unimplemented",
]


class ServingError(Exception):
    """Base of every error a request can end in; `message` is what the client sees."""

    grpc_code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    http_status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(ServingError):
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT
    http_status = 400


class FailedPrecondition(ServingError):
    grpc_code = grpc.StatusCode.FAILED_PRECONDITION
    http_status = 400


class NotFound(ServingError):
    grpc_code = grpc.StatusCode.NOT_FOUND
    http_status = 404


class PayloadTooLarge(ServingError):
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED
    http_status = 413


class Unavailable(ServingError):
    grpc_code = grpc.StatusCode.UNAVAILABLE
    http_status = 503


class Unimplemented(ServingError):
    grpc_code = grpc.StatusCode.UNIMPLEMENTED
    http_status = 501


class DeadlineExceeded(ServingError):
    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED
    http_status = 504
