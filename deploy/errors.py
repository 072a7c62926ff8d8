"""Errors of the deploy step, one tree; the CLI maps each to an exit code once.

DeployError                     (exit 1) anything that stops a deployment
├── DeployUsageError            (exit 2) flags or input files that cannot work, caught before work
├── NoModelsError               (exit 1) the model base path holds no servable model
├── IncompatibleImageError      (exit 1) --strict, and the image may not load an export
├── DockerError                 (exit 1) docker or compose is missing, or a compose command failed
└── NotAvailableError           (exit 1) a model did not become AVAILABLE (load failed, timeout)
"""

from __future__ import annotations

__all__ = [
    "DeployError",
    "DeployUsageError",
    "DockerError",
    "IncompatibleImageError",
    "NoModelsError",
    "NotAvailableError",
]


class DeployError(Exception):
    """Base of every deploy failure; the message says what was wrong and what was expected."""

    exit_code = 1


class DeployUsageError(DeployError):
    exit_code = 2


class NoModelsError(DeployError):
    pass


class IncompatibleImageError(DeployError):
    pass


class DockerError(DeployError):
    pass


class NotAvailableError(DeployError):
    pass
