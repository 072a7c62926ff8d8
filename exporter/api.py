"""`export_model`: SOURCE → traced concrete functions → verified SavedModel at BASE/NAME/VERSION.

The steps, each a module: load the source (sources), settle the signature contracts (contract),
check the arguments and probe the source's own retracing (retrace), trace each signature once
with its declared signature while watching for Python side effects (trace, hazards), write into
a hidden temporary (versions), scan every op (opscan), reload and compare with the eager model
at several batch sizes (hazards, verify), write warm-up records and replay them (warmup), write
the manifest (manifest), rename into place, prune old versions.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from graphserve.core.contract import batch_variants, load_signature_file
from graphserve.core.errors import ExportError, ParityError, SignatureError, UnsafeOpsError
from graphserve.core.inputs import InputSource, range_text
from graphserve.core.results import JsonKeys, JsonResult, json_meta
from graphserve.core.signature import PREDICT_METHOD, TensorSpec, ValueRange
from graphserve.core.versions import (
    atomic_version_dir,
    clean_stale_temporaries,
    ensure_version_free,
    next_version,
    prune_versions,
)
from graphserve.model.sources import load_source, resolve_contracts, signature_origin

if TYPE_CHECKING:  # these import TensorFlow; export_model imports them when called
    from graphserve.core.compat import TFServingCheck
    from graphserve.exporter.retrace import RetraceReport
    from graphserve.exporter.verify import ParityReport
    from graphserve.model.opscan import OpScan

__all__ = ["ExportResult", "ExportSpec", "export_model"]

DEFAULT_WARMUP_SAMPLES = 4


@dataclass
class ExportSpec:
    """What to export, where, and how to check it; the CLI's flags, one field each."""

    source: str
    name: str
    base_path: Path = Path("models")
    version: int | None = None  # None: the next integer
    overwrite: bool = False  # replace an existing version
    keep: int | None = None  # prune to the newest N versions after exporting
    inputs: list[TensorSpec] = field(default_factory=list)  # serving_default's inputs
    output_names: list[str] = field(default_factory=list)  # serving_default's output names
    signature_file: Path | None = None  # YAML/JSON contracts (see graphserve.core.contract)
    signatures: dict[str, str] = field(default_factory=dict)  # extra NAME -> model attribute
    batch_sizes: list[int] = field(default_factory=list)  # fixed-batch variants per signature
    jit_compile: bool = False
    warmup_samples: int = DEFAULT_WARMUP_SAMPLES  # records per signature; 0 writes none
    warmup_from: Path | None = None  # a traffic file: warm-up records from its requests instead
    samples_file: Path | None = None  # .npz or TF Serving JSON samples: probe, parity, warm-up
    input_ranges: dict[str, ValueRange] = field(default_factory=dict)  # input -> generated values
    parity_batches: int = 3
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)  # dtype -> atol, rtol
    allow_unsafe: bool = False  # Keras safe mode off for .keras files
    imports: list[str] = field(default_factory=list)  # modules imported first (custom objects)
    allow_ops: list[str] = field(default_factory=list)  # flagged ops to accept anyway
    tfserving_image: str | None = None  # the image to check compatibility against


def _round_3(seconds: float) -> float:
    return round(seconds, 3)


@dataclass
class ExportResult(JsonResult):
    """What `export_model` wrote and checked: the version's path and number, its signatures,
    the parity report, the traces, the op scan, the warm-up records written, the content hash,
    the TF Serving compatibility check and the warnings; then the versions `keep` pruned and
    the temporaries of interrupted exports it removed. `to_json()` is `graphserve export
    --output json`."""

    json_keys: ClassVar[JsonKeys] = (..., "seconds")

    path: Path
    version: int
    signatures: dict[str, dict[str, Any]]
    parity: ParityReport
    retrace: RetraceReport = field(metadata=json_meta(name="traces"))
    op_scan: OpScan
    warmup_records: int
    content_hash: str
    tfserving: TFServingCheck
    seconds: float = field(metadata=json_meta(value=_round_3))
    warnings: list[str] = field(default_factory=list)
    pruned_versions: list[int] = field(default_factory=list)
    removed_temporaries: list[str] = field(default_factory=list)

    @property
    def trace_count(self) -> int:
        """The traces of the exported functions, all signatures together: one per signature
        (`export_model` refuses a function that traced again)."""
        return sum(self.retrace.exported.values())


Log = Callable[[str], None]

_XLA_WARNING = (
    "--jit-compile: the functions carry XLA's must-compile attribute; TF Serving images are not "
    "guaranteed to run XLA-compiled functions (the GPU image needs XLA support for the GPU it "
    "runs on). Load-test the version on the target image before sending it traffic"
)


def export_model(spec: ExportSpec, log: Log = lambda _msg: None) -> ExportResult:
    """Export `spec.source` as `spec.base_path/spec.name/VERSION`.

    Any callable is traced with the declared signature; `result.retrace.diagnosis` says how the
    model's own functions traced and what was checked. `log` gets a line per step (and each
    warning as it comes); the warnings are in `result.warnings` too. Raises an ExportError
    (SourceError, SignatureError, VersionExistsError, RetraceError for a tracing hazard: a
    Python value the signature cannot carry or a baked dimension, UnsafeOpsError, ParityError)
    and leaves no version directory behind when anything fails.
    """
    import tensorflow as tf

    import graphserve
    from graphserve.core.compat import check_tfserving
    from graphserve.core.manifest import FORMAT_VERSION, content_hash, write_manifest
    from graphserve.exporter.hazards import SideEffects, check_dimensions
    from graphserve.exporter.retrace import (
        RetraceReport,
        check_arguments,
        check_exported,
        probe_source,
    )
    from graphserve.exporter.verify import DEFAULT_TOLERANCES, check_parity, load_samples
    from graphserve.model.opscan import PROCESS_OPS, describe_flagged, scan_saved_model
    from graphserve.model.trace import saveable, trace
    from graphserve.model.warmup import replay_warmup, warmup_requests, write_warmup_records

    started = time.perf_counter()
    if not spec.name or "/" in spec.name or spec.name.startswith("."):
        raise SignatureError(f"model name {spec.name!r} is not valid: expected a plain name")
    model_dir = Path(spec.base_path) / spec.name
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        log(f"warning: {message}")

    removed = clean_stale_temporaries(model_dir)
    for path in removed:
        log(f"removed {path.name}, left by an interrupted export")
    version = spec.version if spec.version is not None else next_version(model_dir)
    if not spec.overwrite:  # fail before the slow part; atomic_version_dir checks again
        ensure_version_free(model_dir, version)

    imported = f" after importing {', '.join(spec.imports)}" if spec.imports else ""
    log(f"loading {spec.source}{imported}")
    source = load_source(spec.source, allow_unsafe=spec.allow_unsafe, imports=spec.imports)
    if source.unsafe:
        warn(f"{spec.source} was loaded with Keras safe mode off (--allow-unsafe)")
    for message in source.warnings:
        warn(message)
    file_contracts = load_signature_file(spec.signature_file) if spec.signature_file else []
    contracts = resolve_contracts(
        source,
        file_contracts=file_contracts,
        inputs=spec.inputs,
        output_names=spec.output_names,
        extra=spec.signatures,
    )
    origin = signature_origin(source, file=spec.signature_file, inputs=spec.inputs)
    log(f"input signature from {origin}")
    variants = [v for c in contracts for v in batch_variants(c, spec.batch_sizes)]
    samples = load_samples(spec.samples_file, contracts) if spec.samples_file else None
    _check_ranges(spec.input_ranges, contracts)
    inputs = InputSource(
        samples,
        str(spec.samples_file) if samples else None,
        {**{n: r for c in contracts for n, r in c.ranges.items()}, **spec.input_ranges},
    )

    check_arguments(source.model, contracts)
    retrace = RetraceReport()
    effects = SideEffects(source.model, contracts)
    traced = []
    with effects.watch():
        log(f"running the model eagerly at batch sizes {list(retrace.batch_sizes)}")
        # The variants call the same functions; settle once the model has built itself.
        inputs = probe_source(
            source.model, contracts, retrace, after_first_call=effects.settle, inputs=inputs
        )
        for contract in contracts:
            if inputs.given(contract.name) is None:
                log(f"inputs of {contract.name}: {inputs.describe(contract.inputs)}")
        checked = list(contracts)  # the free-batch signatures, checked against the eager model
        contracts += variants
        for contract in contracts:
            described = ", ".join(f"{s.name}: {s.describe()}" for s in contract.inputs)
            xla = " with jit_compile" if spec.jit_compile else ""
            log(f"tracing {contract.name}({described}){xla}")
            traced.append(trace(source.model, contract, jit_compile=spec.jit_compile))
    for message in effects.warnings():
        warn(message)
    check_exported(traced, retrace, inputs)
    if spec.jit_compile:
        warn(_XLA_WARNING)
    signatures = {
        t.contract.name: {
            "method_name": PREDICT_METHOD,
            "function": t.contract.function,
            "inputs": {s.name: s.to_json() for s in t.contract.inputs},
            "outputs": {o.name: o.to_json() for o in t.outputs()},
        }
        for t in traced
    }
    tfserving = check_tfserving(tf.__version__, spec.tfserving_image)
    if not tfserving.compatible:
        warn(tfserving.message)

    with atomic_version_dir(model_dir, version, overwrite=spec.overwrite) as tmp:
        log(f"writing {model_dir / str(version)}")
        tf.saved_model.save(
            saveable(source.model, traced),
            str(tmp),
            signatures={t.contract.name: t.concrete for t in traced},
        )
        log("scanning ops")
        op_scan = scan_saved_model(tmp)
        python = sorted({f"{f.op} in {f.function}" for f in op_scan.flagged if f.op in PROCESS_OPS})
        if python:  # refused whatever --allow-op says: no server can provide them
            raise UnsafeOpsError(
                f"the graph calls Python ({', '.join(python)}: tf.py_function or "
                "tf.numpy_function). The SavedModel keeps a token naming a Python function of "
                "this export's process, not the function, so no server can run it: TF Serving "
                "has no Python, and graphserve's graph server is another process (here it passes "
                "parity only because this process still holds the function). Write that part "
                "with TensorFlow ops, or serve the model from Python: graphserve serve eager "
                f"{spec.source}"
            )
        refused = op_scan.refused(spec.allow_ops)
        if refused:
            raise UnsafeOpsError(
                "the graph has ops that touch files, the network or processes, or that TF "
                f"Serving cannot run: {describe_flagged(refused)}. Pass --allow-op OP for each "
                "if you mean it"
            )
        for flagged in op_scan.flagged:
            warn(f"{flagged.op} ({flagged.category}) in {flagged.function}: allowed by --allow-op")
        loaded = tf.saved_model.load(str(tmp))
        tolerances = {**DEFAULT_TOLERANCES, **spec.tolerances}
        log(
            "checking the exported functions against the eager model at batch sizes "
            + ", ".join(map(str, retrace.checked_batch_sizes))
        )
        for message in check_dimensions(
            loaded, source.model, checked, retrace, tolerances=tolerances, inputs=inputs
        ):
            warn(message)
        log(
            f"verifying parity of {len(contracts)} signature(s) on "
            + (str(spec.samples_file) if samples else f"{spec.parity_batches} generated batches")
        )
        parity = check_parity(
            loaded,
            source.model,
            contracts,
            batches=spec.parity_batches,
            tolerances=tolerances,
            inputs=inputs,
        )
        for message in parity.warnings:  # outputs too constant for the check to tell
            warn(message)
        for coverage in parity.vocabularies:
            log(coverage.text())
        warmup_records = 0
        if spec.warmup_from is not None:
            requests = _warmup_from(spec.warmup_from, spec.name, tmp)
            write_warmup_records(tmp, requests)
            log(f"replaying {len(requests)} warm-up records from {spec.warmup_from}")
            try:
                warmup_records = replay_warmup(tmp, _runner_of(loaded))
            except Exception as exc:
                raise ParityError(f"a logged request fails on the exported model: {exc}") from exc
        elif spec.warmup_samples > 0:
            requests = warmup_requests(
                spec.name,
                {c.name: c.inputs for c in contracts},
                spec.warmup_samples,
                fixed=samples,
                ranges=inputs.ranges,
            )
            write_warmup_records(tmp, requests)
            log(f"replaying {len(requests)} warm-up records")
            try:
                warmup_records = replay_warmup(tmp, _runner_of(loaded))
            except Exception as exc:
                raise ParityError(f"a warm-up record fails on the exported model: {exc}") from exc
        digest = content_hash(tmp)
        write_manifest(
            tmp,
            {
                "format_version": FORMAT_VERSION,
                "graphserve_version": graphserve.__version__,
                "tensorflow_version": tf.__version__,
                "python_version": platform.python_version(),
                "created": datetime.now(UTC).isoformat(timespec="seconds"),
                "model_name": spec.name,
                "version": version,
                "source": {"text": spec.source, "kind": source.kind},
                "content_hash": digest,
                "options": _options(spec),
                "signatures": signatures,
                "inputs": inputs.to_json(),
                "parity": parity.to_json(),
                "traces": retrace.to_json(),
                "warmup": {"records": warmup_records, "samples_per_signature": spec.warmup_samples},
                "op_scan": op_scan.to_json(),
                "tfserving": tfserving.to_json(),
                "warnings": warnings,
            },
        )
    pruned = prune_versions(model_dir, spec.keep, protect=version) if spec.keep else []
    if pruned:
        log("pruned versions " + ", ".join(map(str, pruned)) + f" (--keep {spec.keep})")
    return ExportResult(
        path=model_dir / str(version),
        version=version,
        signatures=signatures,
        parity=parity,
        retrace=retrace,
        op_scan=op_scan,
        warmup_records=warmup_records,
        content_hash=digest,
        tfserving=tfserving,
        seconds=time.perf_counter() - started,
        warnings=warnings,
        pruned_versions=pruned,
        removed_temporaries=[p.name for p in removed],
    )


def _check_ranges(ranges: dict[str, ValueRange], contracts: list[Any]) -> None:
    """Every `--input-range` names a number input of some signature (a range says nothing of
    strings or booleans, which would silently ignore it)."""
    known = {s.name: s for c in contracts for s in c.inputs}
    unknown = sorted(set(ranges) - set(known))
    if unknown:
        raise SignatureError(
            f"--input-range names {', '.join(map(repr, unknown))}, which no signature has: the "
            f"inputs are {', '.join(sorted(known))}"
        )
    words = sorted(n for n in ranges if known[n].dtype in ("string", "bool"))
    if words:
        raise SignatureError(
            f"--input-range {', '.join(map(repr, words))}: a range is for number inputs, and "
            f"{words[0]!r} is {known[words[0]].dtype}; give its values with --samples-file FILE "
            '(a .npz bytes array, or a TF Serving predict body with {"b64": ...} for binary '
            "strings)"
        )


def _warmup_from(path: Path, model: str, version_dir: Path) -> list[Any]:
    """The warm-up requests a traffic file gives the version at `version_dir`: one per
    signature and input shape its requests for `model` (or, with none named so, all of them)
    hold. Raises ExportError naming what does not fit."""
    from graphserve.model.traffic import (
        TrafficError,
        fitting,
        read_traffic,
        warmup_selection,
    )
    from graphserve.model.warmup import MAX_WARMUP_RECORDS

    try:
        records = list(read_traffic(path).records)
        named = [r for r in records if r.model == model]
        chosen = warmup_selection(fitting(named or records, version_dir), MAX_WARMUP_RECORDS)
    except TrafficError as exc:
        raise ExportError(f"--warmup-from: {exc}") from None
    if not chosen:
        raise ExportError(f"--warmup-from: {path} holds no predict request to warm up with")
    return [r.log.predict_log.request for r in chosen]


def _runner_of(loaded: Any) -> Callable[[str, dict[str, Any]], Any]:
    import tensorflow as tf

    def run(signature: str, inputs: dict[str, Any]) -> Any:
        return loaded.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})

    return run


def _options(spec: ExportSpec) -> dict[str, Any]:
    return {
        "overwrite": spec.overwrite,
        "keep": spec.keep,
        "signature_file": str(spec.signature_file) if spec.signature_file else None,
        "inputs": [f"{s.name}:{s.dtype}:{s.shape_text()}" for s in spec.inputs],
        "output_names": spec.output_names,
        "signatures": spec.signatures,
        "batch_sizes": spec.batch_sizes,
        "jit_compile": spec.jit_compile,
        "warmup_samples": spec.warmup_samples,
        "samples_file": str(spec.samples_file) if spec.samples_file else None,
        "input_ranges": [range_text(n, r) for n, r in spec.input_ranges.items()],
        "parity_batches": spec.parity_batches,
        "tolerances": {k: list(v) for k, v in spec.tolerances.items()},
        "allow_unsafe": spec.allow_unsafe,
        "imports": spec.imports,
        "allow_ops": spec.allow_ops,
        "tfserving_image": spec.tfserving_image,
    }
