"""graphserve's exporter: trace a model into a versioned, parity-verified SavedModel.

    from graphserve.exporter import ExportSpec, export_model
    result = export_model(ExportSpec(source="examples:mlp", name="mlp", base_path=Path("models")))

Importing this package does not import TensorFlow; `export_model` does, when called.
"""

from graphserve.core.errors import (
    ExportError,
    ParityError,
    RetraceError,
    SignatureError,
    SourceError,
    UnsafeOpsError,
    VersionExistsError,
)
from graphserve.core.signature import TensorSpec, parse_input_spec
from graphserve.exporter.api import ExportResult, ExportSpec, export_model

__all__ = [
    "ExportError",
    "ExportResult",
    "ExportSpec",
    "ParityError",
    "RetraceError",
    "SignatureError",
    "SourceError",
    "TensorSpec",
    "UnsafeOpsError",
    "VersionExistsError",
    "export_model",
    "parse_input_spec",
]
