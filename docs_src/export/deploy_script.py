from pathlib import Path

from graphserve.exporter import ExportError, ExportSpec, export_model, parse_input_spec

try:
    result = export_model(
        ExportSpec(
            source="mymodel:build",  # any SOURCE the command takes
            name="doubler",
            base_path=Path("models"),
            inputs=[parse_input_spec("x:float32:-1,3")],
            batch_sizes=[1, 32],
            keep=3,
        )
    )
except ExportError as exc:  # SourceError, SignatureError, VersionExistsError, RetraceError,
    raise SystemExit(f"not deploying: {exc}") from None  # UnsafeOpsError, ParityError
for warning in result.warnings:
    print("warning:", warning)
print(result.path, result.version, result.parity.max_abs_error, result.content_hash)
