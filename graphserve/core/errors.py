"""Every error graphserve reports, one tree under one root. Each class carries what it maps to:
the CLI's exit code, and, for the servers, a gRPC status code and an HTTP status. They are mapped
once per transport (the CLI, the gRPC and the REST front ends), never case by case.

GraphserveError                  exit 1 · INTERNAL / 500
├── ExportError                  something the user of `export` can fix
│   ├── SourceError              SOURCE cannot be loaded (bad module path, missing file, factory)
│   ├── SignatureError           the input signature is missing, malformed or does not fit the model
│   ├── VersionExistsError       BASE/NAME/VERSION exists already
│   ├── ParityError              the reloaded SavedModel disagrees with the eager model
│   ├── RetraceError             a tracing hazard: a Python value no signature carries, a baked dim
│   ├── UnsafeOpsError           the graph has file, network or process ops (op scan)
│   └── SavedModelError          saved_model.pb(txt) is missing or unreadable
├── ConfigError                  exit 2 · a server configuration file or flag cannot work
│   ├── ModelConfigError         --model_config_file (ModelServerConfig text proto)
│   ├── MonitoringConfigError    --monitoring_config_file
│   ├── BatchingConfigError      --batching_parameters_file or batching flags
│   └── TlsConfigError           --ssl_config_file, or a client's --tls-* files
├── ModelLoadError               a model version failed to load (the manager keeps serving others)
├── ServerUnreachable            a server to test or measure does not answer, or lacks the model
├── ServingError                 a request failed; `message` is what the client sees
│   ├── InvalidInput             INVALID_ARGUMENT / 400: the request does not fit the signature
│   ├── FailedPrecondition       FAILED_PRECONDITION / 400: e.g. unknown signature name
│   ├── NotFound                 NOT_FOUND / 404: unknown model or version
│   ├── PayloadTooLarge          RESOURCE_EXHAUSTED / 413: over the size limit
│   ├── Unavailable              UNAVAILABLE / 503: the model exists but cannot serve right now
│   ├── DeadlineExceeded         DEADLINE_EXCEEDED / 504: the client's deadline passed first
│   ├── Cancelled                CANCELLED / 499: the client left before its answer
│   └── Unimplemented            UNIMPLEMENTED / 501: an API this server does not offer
├── LoadTestError                anything that stops a load test
│   ├── RemoteTargetError        exit 2: a target is not on loopback and --allow-remote is off
│   ├── PayloadError             the request payload cannot be built, read or written
│   ├── LocustRunError           a locust run did not finish or left no statistics
│   ├── ServerStartError         a self-managed server did not start or become ready
│   ├── ColdStartError           a request to a freshly started server failed
│   ├── RolloutError             a rollout could not copy the new version into place
│   └── SloError                 exit 2: an --slo gate cannot be read or names an unknown arm
└── DeployError                  anything that stops a deployment
    ├── DeployUsageError         exit 2: flags or input files that cannot work, caught before work
    ├── NoModelsError            the model base path holds no servable model
    ├── IncompatibleImageError   --strict, and the image may not load an export
    ├── DockerError              docker or compose is missing, or a compose command failed
    └── NotAvailableError        a model did not become AVAILABLE (load failed, timeout)

The server statuses follow TensorFlow Serving's table (`util/net_http/server` status to HTTP), so
a client cannot tell our servers from TF Serving by their error codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

__all__ = [
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_MISSED",
    "EXIT_USAGE",
    "BatchingConfigError",
    "ColdStartError",
    "ConfigError",
    "DeadlineExceeded",
    "DeployError",
    "DeployUsageError",
    "DockerError",
    "ExportError",
    "FailedPrecondition",
    "GraphserveError",
    "IncompatibleImageError",
    "InvalidInput",
    "LoadTestError",
    "LocustRunError",
    "ModelConfigError",
    "ModelLoadError",
    "MonitoringConfigError",
    "NoModelsError",
    "NotAvailableError",
    "NotFound",
    "ParityError",
    "PayloadError",
    "PayloadTooLarge",
    "RemoteTargetError",
    "RetraceError",
    "RolloutError",
    "SavedModelError",
    "ServerStartError",
    "ServerUnreachable",
    "ServingError",
    "SignatureError",
    "SloError",
    "SourceError",
    "Unavailable",
    "Unimplemented",
    "UnsafeOpsError",
    "VersionExistsError",
    "exit_epilog",
]

EXIT_FAILED = 1  # the work failed: the message says what to fix
EXIT_USAGE = 2  # the command line or an input file cannot work, found before any work
EXIT_MISSED = 3  # the run worked, and a gate or goal it was given was missed (some commands only)

# What each exit code means, for every command, as "headline: detail": the CLI reference
# (tools/docsgen/cli.py) prints this table. A command that can exit EXIT_MISSED says what it means
# there in its epilog, which `exit_epilog` writes and `--help` shows: the reference reads it from
# there.
EXIT_CODES: dict[int, str] = {
    0: "success: the command did what it was asked",
    EXIT_FAILED: "the job failed: the message says what to fix (an export refused, a server that "
    "did not start, a load-test arm with no answer, ...)",
    EXIT_USAGE: "usage error: the command line or an input file cannot work, found before any "
    "work (typer's own usage errors, and a group run without a command, exit 2 too)",
    EXIT_MISSED: "a gate or goal missed: the run worked, and a gate or goal it was given was "
    "missed (only the commands whose help names exit 3)",
}


def exit_epilog(codes: dict[int, str]) -> str:
    """A command's epilog naming its own exit codes, one paragraph each: `Exit 3: <meaning>`."""
    return "\n\n".join(f"Exit {code}: {meaning}" for code, meaning in sorted(codes.items()))


class GraphserveError(Exception):
    """The root: `message` says what was wrong and what was expected."""

    exit_code: int = EXIT_FAILED
    # By name, so that importing the tree (every CLI does) does not load gRPC.
    grpc_status: str = "INTERNAL"
    http_status: int = 500

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    @property
    def grpc_code(self) -> grpc.StatusCode:
        import grpc

        return grpc.StatusCode[self.grpc_status]


# -- export ------------------------------------------------------------------------------------


class ExportError(GraphserveError):
    pass


class SourceError(ExportError):
    pass


class SignatureError(ExportError):
    pass


class VersionExistsError(ExportError):
    pass


class ParityError(ExportError):
    pass


class RetraceError(ExportError):
    pass


class UnsafeOpsError(ExportError):
    pass


class SavedModelError(ExportError):
    pass


# -- server configuration and loading -----------------------------------------------------------


class ConfigError(GraphserveError, ValueError):
    exit_code = EXIT_USAGE


class ModelConfigError(ConfigError):
    pass


class MonitoringConfigError(ConfigError):
    pass


class TlsConfigError(ConfigError):
    """An SSL config or a client's TLS files that cannot work: what is wrong, what to give."""


class BatchingConfigError(ConfigError):
    pass


class ModelLoadError(GraphserveError):
    pass


class ServerUnreachable(GraphserveError):
    """Nothing answers at the address given, or the server there does not serve the model."""


# -- requests -----------------------------------------------------------------------------------


class ServingError(GraphserveError):
    pass


class InvalidInput(ServingError):
    grpc_status = "INVALID_ARGUMENT"
    http_status = 400


class FailedPrecondition(ServingError):
    grpc_status = "FAILED_PRECONDITION"
    http_status = 400


class NotFound(ServingError):
    grpc_status = "NOT_FOUND"
    http_status = 404


class PayloadTooLarge(ServingError):
    grpc_status = "RESOURCE_EXHAUSTED"
    http_status = 413


class Unavailable(ServingError):
    grpc_status = "UNAVAILABLE"
    http_status = 503


class Unimplemented(ServingError):
    grpc_status = "UNIMPLEMENTED"
    http_status = 501


class DeadlineExceeded(ServingError):
    grpc_status = "DEADLINE_EXCEEDED"
    http_status = 504


class Cancelled(ServingError):
    """The client stopped waiting before its answer (a cancelled gRPC call, a closed REST
    connection): nobody reads it, the metrics count it. 499 is nginx's "client closed request"."""

    grpc_status = "CANCELLED"
    http_status = 499


# -- load test ----------------------------------------------------------------------------------


class LoadTestError(GraphserveError):
    pass


class RemoteTargetError(LoadTestError):
    exit_code = EXIT_USAGE


class PayloadError(LoadTestError):
    pass


class LocustRunError(LoadTestError):
    pass


class ServerStartError(LoadTestError):
    pass


class SloError(LoadTestError):
    exit_code = EXIT_USAGE


class ColdStartError(LoadTestError):
    """A Predict against a freshly started server failed (the server did start)."""


class RolloutError(LoadTestError):
    """`loadtest rollout` could not copy the new version into the model's base path."""


# -- deploy -------------------------------------------------------------------------------------


class DeployError(GraphserveError):
    pass


class DeployUsageError(DeployError):
    exit_code = EXIT_USAGE


class NoModelsError(DeployError):
    pass


class IncompatibleImageError(DeployError):
    pass


class DockerError(DeployError):
    pass


class NotAvailableError(DeployError):
    pass
