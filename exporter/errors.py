"""Errors raised by the exporter, one tree, mapped to exit codes once in `exporter.cli`.

ExportError                 something the user can fix; exit code 1 unless noted
├── SourceError             SOURCE cannot be loaded (bad module path, missing file, bad factory)
├── SignatureError          the input signature is missing, malformed or does not fit the model
├── VersionExistsError      BASE/NAME/VERSION exists already
├── ParityError             the reloaded SavedModel disagrees with the eager model
├── RetraceError            a tracing hazard: a Python value no signature carries, a baked dimension
└── UnsafeOpsError          the graph has file, network or process ops (op scan)
"""

from __future__ import annotations

__all__ = [
    "ExportError",
    "ParityError",
    "RetraceError",
    "SignatureError",
    "SourceError",
    "UnsafeOpsError",
    "VersionExistsError",
]


class ExportError(Exception):
    """Base of every error the exporter reports to the user."""


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
